"""CsvRowSerializationSchema / CsvRowDeserializationSchema: PyFlink's builders, round trips
through quoting and escaping, Java's text of values, Flink's ignore_parse_errors leniency,
and errors that name the column."""

from __future__ import annotations

import datetime as dt
import math
import pickle
from decimal import Decimal

import pytest

from tidegate.common import Row, Types
from tidegate.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from tidegate.formats.base import FormatError

ORDER = Types.ROW_NAMED(
    ["id", "item", "price", "paid", "tags", "at"],
    [
        Types.INT(),
        Types.STRING(),
        Types.DOUBLE(),
        Types.BOOLEAN(),
        Types.LIST(Types.STRING()),
        Types.SQL_TIMESTAMP(),
    ],
)
ROW = Row(
    id=1,
    item='a "big", \n box',
    price=2.5,
    paid=True,
    tags=["x", "y"],
    at=dt.datetime(2024, 5, 1, 12, 30),
)


def test_a_row_round_trips_through_quoting():
    writer = CsvRowSerializationSchema.Builder(ORDER).build()
    reader = CsvRowDeserializationSchema.Builder(ORDER).build()
    data = writer.serialize(ROW)
    assert data == b'1,"a ""big"", \n box",2.5,true,x;y,2024-05-01 12:30:00.0\n'
    assert reader.deserialize(data) == ROW


def test_values_are_written_as_java_writes_them():
    t = Types.ROW_NAMED(
        ["d", "f", "big", "dec", "day", "time", "raw"],
        [
            Types.DOUBLE(), Types.FLOAT(), Types.DOUBLE(), Types.BIG_DEC(), Types.SQL_DATE(),
            Types.SQL_TIME(), Types.PRIMITIVE_ARRAY(Types.BYTE()),
        ],
    )  # fmt: skip
    writer = CsvRowSerializationSchema.Builder(t).build()
    reader = CsvRowDeserializationSchema.Builder(t).build()
    row = Row(
        d=1e10, f=0.1, big=math.nan, dec=Decimal("1.50"), day=dt.date(2024, 1, 2),
        time=dt.time(3, 4, 5), raw=b"\x01\x02",
    )  # fmt: skip
    data = writer.serialize(row)
    assert data == b"1.0E10,0.1,NaN,1.50,2024-01-02,03:04:05,AQI=\n"
    back = reader.deserialize(data)
    assert back.d == 1e10 and math.isnan(back.big) and back.dec == Decimal("1.50")
    assert back.f == pytest.approx(0.1) and back.raw == [1, 2]


def test_builders_set_delimiters_quote_escape_and_null_literal():
    t = Types.ROW_NAMED(["a", "b", "c"], [Types.STRING(), Types.INT(), Types.LIST(Types.INT())])
    writer = (
        CsvRowSerializationSchema.Builder(t)
        .set_field_delimiter("|")
        .set_array_element_delimiter(",")
        .set_quote_character("'")
        .set_escape_character("\\")
        .set_null_literal("NULL")
        .set_line_delimiter("\r\n")
        .build()
    )
    reader = (
        CsvRowDeserializationSchema.Builder(t)
        .set_field_delimiter("|")
        .set_array_element_delimiter(",")
        .set_quote_character("'")
        .set_escape_character("\\")
        .set_null_literal("NULL")
        .build()
    )
    row = Row(a="it's|here", b=None, c=[1, 2])
    data = writer.serialize(row)
    assert data == b"'it\\'s|here'|NULL|1,2\r\n"
    assert reader.deserialize(data) == row


def test_without_quoting_a_delimiter_needs_the_escape_character():
    t = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.STRING()])
    plain = CsvRowSerializationSchema.Builder(t).disable_quote_character().build()
    with pytest.raises(FormatError, match="quoting is disabled"):
        plain.serialize(("x,y", "z"))
    escaped = (
        CsvRowSerializationSchema.Builder(t).disable_quote_character().set_escape_character("\\")
    ).build()
    data = escaped.serialize(("x,y", "z"))
    assert data == b"x\\,y,z\n"


def test_empty_columns_are_none_except_for_strings():
    t = Types.ROW_NAMED(["s", "i", "l"], [Types.STRING(), Types.INT(), Types.LIST(Types.INT())])
    reader = CsvRowDeserializationSchema.Builder(t).build()
    assert reader.deserialize(b",,") == Row(s="", i=None, l=None)
    nulls = CsvRowDeserializationSchema.Builder(t).set_null_literal("").build()
    assert nulls.deserialize(b",,") == Row(s=None, i=None, l=None)
    assert reader.deserialize(b"") is None and reader.deserialize(None) is None


def test_a_bad_column_is_named_by_field_and_column():
    reader = CsvRowDeserializationSchema.Builder(ORDER).build()
    with pytest.raises(FormatError) as info:
        reader.deserialize("1,box,cheap,true,x,2024-05-01 12:30:00")
    assert info.value.field == "price" and info.value.position == "column 3"
    assert "expected a number, got 'cheap'" in str(info.value)
    with pytest.raises(FormatError, match=r"expected 6 columns .* got 2"):
        reader.deserialize(b"1,box")
    with pytest.raises(FormatError, match="cannot split"):
        reader.deserialize(b'1,"box,2.5,true,x,2024-05-01 12:30:00')
    with pytest.raises(FormatError, match="not valid UTF-8") as info:
        reader.deserialize(b"1,b\xffx,2.5,true,x,2024-05-01 12:30:00")
    assert info.value.position == "byte 3"
    with pytest.raises(FormatError) as info:
        reader.deserialize('"1",box')  # a str record is quoted in the message too
    assert str(info.value).endswith("""(record: '"1",box')""")


def test_ignore_parse_errors_nulls_bad_columns_pads_short_lines_and_skips_broken_ones():
    reader = CsvRowDeserializationSchema.Builder(ORDER).set_ignore_parse_errors(True).build()
    assert reader.deserialize(b"x,box,cheap") == Row(
        id=None, item="box", price=None, paid=None, tags=None, at=None
    )
    assert reader.deserialize(b'1,"box') is None


def test_comments_are_skipped_when_allowed():
    t = Types.ROW_NAMED(["a"], [Types.STRING()])
    reader = CsvRowDeserializationSchema.Builder(t).set_allow_comments(True).build()
    assert reader.deserialize(b"# header\n") is None
    assert reader.deserialize(b"value\n") == Row(a="value")


def test_a_nested_row_is_one_column_of_array_elements():
    t = Types.ROW_NAMED(["p"], [Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.STRING()])])
    writer = CsvRowSerializationSchema.Builder(t).build()
    reader = CsvRowDeserializationSchema.Builder(t).build()
    data = writer.serialize(Row(p=Row(x=1, y="é")))
    assert data == "1;é\n".encode()
    assert reader.deserialize(data) == Row(p=Row(x=1, y="é"))


def test_a_record_that_does_not_fit_is_refused_when_written():
    writer = CsvRowSerializationSchema.Builder(ORDER).build()
    with pytest.raises(FormatError, match=r"field 'id'.*expected an int"):
        writer.serialize(Row(id="1", item="", price=1.0, paid=True, tags=[], at=None))


def test_options_are_checked_and_types_must_fit_a_column():
    with pytest.raises(ValueError, match="single character"):
        CsvRowSerializationSchema.Builder(ORDER).set_field_delimiter("||").build()
    with pytest.raises(ValueError, match="must differ"):
        CsvRowSerializationSchema.Builder(ORDER).set_quote_character(",").build()
    with pytest.raises(ValueError, match="must differ"):
        CsvRowDeserializationSchema.Builder(ORDER).set_escape_character('"').build()
    nested = Types.ROW_NAMED(["l"], [Types.LIST(Types.LIST(Types.INT()))])
    with pytest.raises(TypeError, match="does not support"):
        CsvRowDeserializationSchema.Builder(nested).build()
    with pytest.raises(TypeError, match="must not be None"):
        CsvRowDeserializationSchema.Builder(None)


def test_schemas_are_equal_by_configuration_and_pickle():
    reader = CsvRowDeserializationSchema.Builder(ORDER).set_field_delimiter(";").build()
    assert reader == CsvRowDeserializationSchema.Builder(ORDER).set_field_delimiter(";").build()
    assert reader != CsvRowDeserializationSchema.Builder(ORDER).build()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy == reader and hash(copy) == hash(reader)
    assert copy.deserialize(b"1;a;2;false;;2024-01-01 00:00:00").id == 1
    writer = CsvRowSerializationSchema.Builder(ORDER).build()
    assert pickle.loads(pickle.dumps(writer)) == writer
    assert "field_delimiter=';'" in repr(reader)
