"""JsonRowSerializationSchema / JsonRowDeserializationSchema: PyFlink's builders, round trips of
every type, what Flink's JSON format writes for dates, times and special numbers, and errors
that name the field and position."""

from __future__ import annotations

import datetime as dt
import math
import pickle
from decimal import Decimal

import orjson
import pytest

from tidegate.common import Row, Types
from tidegate.datastream.formats.json import (
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
)
from tidegate.formats.base import FormatError

ADDRESS = Types.ROW_NAMED(["street", "zip"], [Types.STRING(), Types.INT()])
PERSON = Types.ROW_NAMED(
    ["id", "name", "score", "active", "tags", "address", "attrs"],
    [
        Types.LONG(),
        Types.STRING(),
        Types.DOUBLE(),
        Types.BOOLEAN(),
        Types.LIST(Types.STRING()),
        ADDRESS,
        Types.MAP(Types.STRING(), Types.INT()),
    ],
)


def schemas(type_info, **options):
    writer = JsonRowSerializationSchema.builder().with_type_info(type_info).build()
    builder = JsonRowDeserializationSchema.builder().type_info(type_info)
    if options.get("fail_on_missing_field"):
        builder = builder.fail_on_missing_field()
    if options.get("ignore_parse_errors"):
        builder = builder.ignore_parse_errors()
    return writer, builder.build()


def test_a_nested_row_round_trips_with_its_field_names():
    writer, reader = schemas(PERSON)
    person = Row(
        id=7,
        name="Zoë 🚀",
        score=9.5,
        active=True,
        tags=["a", None],
        address=Row(street="Main St", zip=12345),
        attrs={"k": 1},
    )
    data = writer.serialize(person)
    assert orjson.loads(data) == {
        "id": 7,
        "name": "Zoë 🚀",
        "score": 9.5,
        "active": True,
        "tags": ["a", None],
        "address": {"street": "Main St", "zip": 12345},
        "attrs": {"k": 1},
    }
    back = reader.deserialize(data)
    assert back == person
    assert back.address.zip == 12345 and back.as_dict()["name"] == "Zoë 🚀"


def test_tuples_lists_dicts_and_positional_rows_are_written_by_position_or_name():
    writer, _ = schemas(ADDRESS)
    expected = b'{"street":"a","zip":1}'
    assert writer.serialize(("a", 1)) == expected
    assert writer.serialize(["a", 1]) == expected
    assert writer.serialize(Row("a", 1)) == expected
    assert writer.serialize({"zip": 1, "street": "a"}) == expected
    assert writer.serialize(Row(zip=1, street="a")) == expected


def test_nulls_and_missing_fields_are_none_and_extra_keys_are_ignored():
    _, reader = schemas(ADDRESS)
    row = reader.deserialize(b'{"street": null, "other": [1, 2]}')
    assert row == Row(street=None, zip=None)
    assert reader.deserialize(None) is None  # a tombstone


def test_fail_on_missing_field_names_the_missing_field():
    _, reader = schemas(PERSON, fail_on_missing_field=True)
    with pytest.raises(FormatError, match=r"field 'address.zip'.*missing") as info:
        reader.deserialize(
            b'{"id":1,"name":"a","score":1,"active":true,"tags":[],"address":{"street":"x"},'
            b'"attrs":{}}'
        )
    assert info.value.field == "address.zip"


def test_a_type_mismatch_names_the_nested_field_and_quotes_the_record():
    _, reader = schemas(PERSON)
    with pytest.raises(FormatError) as info:
        reader.deserialize(b'{"id": 1, "tags": ["a", "b"], "address": {"zip": "x1"}}')
    assert info.value.field == "address.zip"
    assert "expected an integer (INT), got 'x1'" in str(info.value)
    assert '"address": {"zip": "x1"}' in str(info.value)


def test_an_element_of_a_list_is_named_by_its_index():
    _, reader = schemas(Types.ROW_NAMED(["xs"], [Types.LIST(Types.INT())]))
    with pytest.raises(FormatError) as info:
        reader.deserialize(b'{"xs": [1, 2, true]}')
    assert info.value.field == "xs[2]"


def test_invalid_json_gives_the_character_position():
    _, reader = schemas(ADDRESS)
    with pytest.raises(FormatError, match="not valid JSON") as info:
        reader.deserialize(b'{"street": "a", "zip": }')
    assert info.value.position == "char 23"
    with pytest.raises(FormatError, match="expected a JSON object"):
        reader.deserialize(b"[1, 2]")
    with pytest.raises(FormatError, match="UTF-8"):
        reader.deserialize(b'{"street": "\xff"}')


def test_ignore_parse_errors_skips_the_bad_record():
    _, reader = schemas(ADDRESS, ignore_parse_errors=True)
    assert reader.deserialize(b"{not json") is None
    assert reader.deserialize(b'{"zip": "x"}') is None
    assert reader.deserialize(b'{"zip": 3}') == Row(street=None, zip=3)


def test_fail_on_missing_field_and_ignore_parse_errors_exclude_each_other():
    with pytest.raises(ValueError, match="both"):
        schemas(ADDRESS, fail_on_missing_field=True, ignore_parse_errors=True)


def test_numbers_as_strings_are_read_and_out_of_range_integers_are_refused():
    t = Types.ROW_NAMED(
        ["i", "d", "b", "s"], [Types.INT(), Types.DOUBLE(), Types.BOOLEAN(), Types.STRING()]
    )
    _, reader = schemas(t)
    assert reader.deserialize(b'{"i": "42", "d": "1.5", "b": "TRUE", "s": 12}') == Row(
        i=42, d=1.5, b=True, s="12"
    )
    assert reader.deserialize(b'{"i": 3.0, "s": {"a": [1]}}').s == '{"a":[1]}'
    with pytest.raises(FormatError, match="out of range for INT"):
        reader.deserialize(b'{"i": 2147483648}')
    with pytest.raises(FormatError, match="expected an integer"):
        reader.deserialize(b'{"i": 1.5}')


def test_nan_and_infinities_are_written_as_flinks_strings_and_read_back():
    t = Types.ROW_NAMED(["a", "b", "c", "f"], [Types.DOUBLE()] * 3 + [Types.FLOAT()])
    writer, reader = schemas(t)
    data = writer.serialize(Row(a=math.nan, b=math.inf, c=-math.inf, f=0.1))
    assert data == b'{"a":"NaN","b":"Infinity","c":"-Infinity","f":0.1}'
    back = reader.deserialize(data)
    assert math.isnan(back.a) and back.b == math.inf and back.c == -math.inf


def test_big_integers_and_decimals_keep_every_digit():
    t = Types.ROW_NAMED(["n", "d", "l"], [Types.BIG_INT(), Types.BIG_DEC(), Types.LONG()])
    writer, reader = schemas(t)
    row = Row(n=2**100 + 1, d=Decimal("12345678901234567890.000000001"), l=-(2**63))
    data = writer.serialize(row)
    assert data == (
        b'{"n":1267650600228229401496703205377,"d":12345678901234567890.000000001,'
        b'"l":-9223372036854775808}'
    )
    assert reader.deserialize(data) == row
    # the exact parser's decimals inside a STRING field keep their text
    text = Types.ROW_NAMED(["s", "d"], [Types.STRING(), Types.BIG_DEC()])
    assert schemas(text)[1].deserialize(b'{"s": {"x": 0.10}, "d": 1}').s == '{"x":0.10}'


def test_a_long_beyond_64_bits_is_refused_not_rounded():
    _, reader = schemas(Types.ROW_NAMED(["l"], [Types.LONG()]))
    with pytest.raises(FormatError, match="out of range for LONG"):
        reader.deserialize(b'{"l": 123456789012345678901234567890}')
    # beside a BIG_INT the exact parser reads it, and the LONG is still checked
    _, exact = schemas(Types.ROW_NAMED(["l", "n"], [Types.LONG(), Types.BIG_INT()]))
    with pytest.raises(FormatError, match="out of range for LONG"):
        exact.deserialize(b'{"l": 123456789012345678901234567890, "n": 1}')


def test_dates_and_times_are_written_as_flinks_json_format_writes_them():
    t = Types.ROW_NAMED(
        ["d", "t", "ts", "ts0"],
        [Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(), Types.SQL_TIMESTAMP()],
    )
    writer, reader = schemas(t)
    row = Row(
        d=dt.date(2024, 5, 1),
        t=dt.time(12, 30, 5, 250000),
        ts=dt.datetime(2024, 5, 1, 12, 30, 0, 123000),
        ts0=dt.datetime(2024, 5, 1, 12, 30),
    )
    data = writer.serialize(row)
    assert orjson.loads(data) == {
        "d": "2024-05-01",
        "t": "12:30:05.25Z",
        "ts": "2024-05-01T12:30:00.123Z",
        "ts0": "2024-05-01T12:30:00Z",
    }
    assert reader.deserialize(data) == row
    with pytest.raises(FormatError, match="UTC"):
        reader.deserialize(b'{"ts": "2024-05-01T12:30:00+02:00"}')


def test_bytes_are_base64_and_maps_take_typed_keys():
    t = Types.ROW_NAMED(
        ["raw", "m"], [Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.MAP(Types.INT(), Types.STRING())]
    )
    writer, reader = schemas(t)
    data = writer.serialize(Row(raw=b"\x00\xff", m={1: "a", 2: None}))
    assert data == b'{"raw":"AP8=","m":{"1":"a","2":null}}'
    # read back as tidegate's value of a BYTE array: signed bytes, as a typed stream holds them
    assert reader.deserialize(data) == Row(raw=[0, -1], m={1: "a", 2: None})
    assert writer.serialize(Row(raw=[0, -1], m={})) == b'{"raw":"AP8=","m":{}}'


def test_a_record_that_does_not_fit_is_refused_when_written():
    writer, _ = schemas(PERSON)
    with pytest.raises(FormatError, match=r"field 'address\.zip'") as info:
        writer.serialize(
            Row(
                id=1, name="a", score=1.0, active=True, tags=[],
                address=Row(street="s", zip="x"), attrs={},
            )
        )  # fmt: skip
    assert "expected an int" in str(info.value)
    with pytest.raises(FormatError, match="has no field 'zip'"):
        schemas(ADDRESS)[0].serialize(Row(street="s"))
    with pytest.raises(FormatError, match="expected 2 fields"):
        schemas(ADDRESS)[0].serialize(("s",))


def test_schemas_need_a_row_type():
    with pytest.raises(TypeError, match="ROW_NAMED"):
        JsonRowSerializationSchema.builder().with_type_info(Types.STRING()).build()
    with pytest.raises(TypeError, match="type_info"):
        JsonRowDeserializationSchema.builder().build()
    with pytest.raises(TypeError, match="does not support"):
        schemas(Types.ROW_NAMED(["t"], [Types.TUPLE([Types.INT()])]))
    with pytest.raises(NotImplementedError, match="ROW_NAMED"):
        JsonRowDeserializationSchema.builder().json_schema("{}")


def test_schemas_are_equal_by_configuration_and_pickle():
    writer, reader = schemas(PERSON, fail_on_missing_field=True)
    assert reader == schemas(PERSON, fail_on_missing_field=True)[1]
    assert reader != schemas(PERSON)[1]
    assert hash(writer) == hash(schemas(PERSON)[0])
    assert "fail_on_missing_field=True" in repr(reader)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy == reader
    assert copy.deserialize(b'{"id":1,"name":"a","score":1,"active":true,"tags":[],'
                            b'"address":{"street":"s","zip":1},"attrs":{}}').id == 1  # fmt: skip
    assert reader.get_produced_type() == PERSON


def test_format_errors_pickle_with_their_details():
    _, reader = schemas(ADDRESS)
    with pytest.raises(FormatError) as info:
        reader.deserialize(b'{"zip": "x"}')
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.field == "zip"
