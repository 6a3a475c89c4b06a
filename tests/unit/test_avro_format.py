"""AvroRowSerializationSchema / AvroRowDeserializationSchema: the schemaless binary encoding
(checked against fastavro's own reader and writer), Rows with field names, logical types,
unions and recursive records, schema evolution by a reader schema, and errors."""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
from decimal import Decimal

import fastavro
import pytest

from tidegate.common import Row
from tidegate.datastream.formats.avro import (
    AvroRowDeserializationSchema,
    AvroRowSerializationSchema,
)
from tidegate.formats.base import FormatError

ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": "int"}],
}
USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "address", "type": ["null", ADDRESS], "default": None},
        {"name": "previous", "type": {"type": "array", "items": "Address"}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "avatar", "type": ["null", "bytes"]},
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "balance",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
    ],
}
USER = Row(
    id=2**40,
    name="Zoë 🚀",
    address=Row(street="Main St", zip=12345),
    previous=[Row(street="Old Rd", zip=1)],
    scores={"math": 1.5},
    kind="B",
    avatar=b"\x00\xff",
    born=dt.date(1990, 1, 2),
    seen=dt.datetime(2024, 5, 1, 12, 30, 0, 123000),
    balance=Decimal("12.34"),
)


def pair(schema):
    text = json.dumps(schema)
    return (
        AvroRowSerializationSchema(avro_schema_string=text),
        AvroRowDeserializationSchema(avro_schema_string=text),
    )


def test_a_record_round_trips_as_a_row_with_field_names():
    writer, reader = pair(USER_V1)
    data = writer.serialize(USER)
    back = reader.deserialize(data)
    assert back == USER
    assert back.address.zip == 12345 and back.previous[0].street == "Old Rd"


def test_the_encoding_is_fastavros_schemaless_binary_encoding():
    writer, _ = pair(USER_V1)
    parsed = fastavro.parse_schema(USER_V1)
    data = writer.serialize(USER)
    plain = fastavro.schemaless_reader(io.BytesIO(data), parsed)
    assert plain["name"] == "Zoë 🚀" and plain["address"] == {"street": "Main St", "zip": 12345}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, {**USER.as_dict(True), "seen": USER.seen})
    assert out.getvalue() == data


def test_positional_rows_tuples_and_dicts_are_written_in_field_order():
    writer, reader = pair(ADDRESS)
    expected = writer.serialize(Row(street="a", zip=1))
    assert writer.serialize(("a", 1)) == expected
    assert writer.serialize(Row("a", 1)) == expected
    assert writer.serialize({"zip": 1, "street": "a"}) == expected
    assert reader.deserialize(expected) == Row(street="a", zip=1)


def test_a_reader_schema_reads_data_of_an_older_writer_schema():
    v2 = json.loads(json.dumps(USER_V1))
    v2["fields"] = [
        f for f in v2["fields"] if f["name"] not in ("avatar", "previous", "scores", "balance")
    ]
    v2["fields"].append({"name": "email", "type": ["null", "string"], "default": None})
    v2["fields"].append({"name": "level", "type": "int", "default": 1})
    v2["fields"][0] = {"name": "id", "type": "double"}  # long -> double is a promotion
    writer, _ = pair(USER_V1)
    evolved = AvroRowDeserializationSchema(
        avro_schema_string=json.dumps(v2), writer_schema_string=json.dumps(USER_V1)
    )
    row = evolved.deserialize(writer.serialize(USER))
    assert row == Row(
        id=float(2**40),
        name="Zoë 🚀",
        address=Row(street="Main St", zip=12345),
        kind="B",
        born=dt.date(1990, 1, 2),
        seen=USER.seen,
        email=None,
        level=1,
    )


def test_an_incompatible_reader_schema_is_a_format_error():
    reader_schema = {"type": "record", "name": "Address", "fields": [{"name": "x", "type": "int"}]}
    evolved = AvroRowDeserializationSchema(
        avro_schema_string=json.dumps(reader_schema), writer_schema_string=json.dumps(ADDRESS)
    )
    with pytest.raises(FormatError, match="Avro"):
        evolved.deserialize(pair(ADDRESS)[0].serialize(("a", 1)))


def test_truncated_or_overlong_messages_give_the_byte_position():
    writer, reader = pair(ADDRESS)
    data = writer.serialize(("street", 1))
    with pytest.raises(FormatError) as info:
        reader.deserialize(data[:3])
    assert info.value.position == "byte 3"
    with pytest.raises(FormatError, match="1 bytes left over") as info:
        reader.deserialize(data + b"\x00")
    assert info.value.position == f"byte {len(data)}"


def test_a_record_that_does_not_fit_names_the_field():
    writer, _ = pair(USER_V1)
    bad = Row(*USER)
    bad.set_field_names(list(USER.as_dict()))
    bad["address"] = Row(street="s", zip="not a number")
    with pytest.raises(FormatError) as info:
        writer.serialize(bad)
    assert info.value.field == "com.example.Address.zip"  # record full name . field
    with pytest.raises(FormatError, match="has no field 'zip'"):
        pair(ADDRESS)[0].serialize(Row(street="s"))


def test_a_union_of_two_records_picks_the_branch_by_field_names():
    circle = {"type": "record", "name": "Circle", "fields": [{"name": "r", "type": "double"}]}
    square = {"type": "record", "name": "Square", "fields": [{"name": "side", "type": "double"}]}
    schema = {
        "type": "record",
        "name": "Shape",
        "fields": [{"name": "shape", "type": ["null", circle, square]}],
    }
    writer, reader = pair(schema)
    for shape in (Row(side=2.0), Row(r=1.0), None):
        assert reader.deserialize(writer.serialize(Row(shape=shape))) == Row(shape=shape)


def test_a_recursive_record_becomes_nested_rows():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
    }
    writer, reader = pair(node)
    chain = Row(value=1, next=Row(value=2, next=Row(value=3, next=None)))
    assert reader.deserialize(writer.serialize(chain)) == chain


def test_schemas_need_a_record_schema_string():
    with pytest.raises(TypeError, match="should be specified"):
        AvroRowSerializationSchema()
    with pytest.raises(TypeError, match="Java class"):
        AvroRowDeserializationSchema(record_class="com.example.User")
    with pytest.raises(ValueError, match="not a valid Avro schema"):
        AvroRowDeserializationSchema(avro_schema_string='{"type": "recrod"}')
    with pytest.raises(TypeError, match="record schema"):
        AvroRowDeserializationSchema(avro_schema_string='"string"')


def test_schemas_are_equal_by_configuration_and_pickle():
    writer, reader = pair(USER_V1)
    assert reader == pair(USER_V1)[1] and reader != pair(ADDRESS)[1]
    copy = pickle.loads(pickle.dumps(reader))
    assert copy == reader and hash(copy) == hash(reader)
    assert copy.deserialize(writer.serialize(USER)) == USER
    assert pickle.loads(pickle.dumps(writer)) == writer
    assert repr(writer).startswith("AvroRowSerializationSchema(avro_schema_string=")


def test_named_enums_and_records_are_referred_to_by_name():
    kind = {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}
    schema = {
        "type": "record",
        "name": "Pair",
        "fields": [
            {"name": "first", "type": kind},
            {"name": "second", "type": "Kind"},
            {"name": "home", "type": ADDRESS},
            {"name": "work", "type": ["null", "Address"]},
        ],
    }
    writer, reader = pair(schema)
    row = Row(first="A", second="B", home=Row(street="a", zip=1), work=Row(street="b", zip=2))
    assert reader.deserialize(writer.serialize(row)) == row


def test_the_produced_type_is_the_row_type_of_the_schema_and_fits_the_rows():
    from tidegate.common import Types
    from tidegate.common.type_format import converter

    writer, reader = pair(USER_V1)
    produced = reader.get_produced_type()
    assert produced.get_field_names() == [f["name"] for f in USER_V1["fields"]]
    assert produced.get_field_types()[:3] == [
        Types.LONG(),
        Types.STRING(),
        Types.ROW_NAMED(["street", "zip"], [Types.STRING(), Types.INT()]),
    ]
    assert produced.get_field_types()[7:] == [
        Types.SQL_DATE(), Types.SQL_TIMESTAMP(), Types.BIG_DEC()
    ]  # fmt: skip
    row = reader.deserialize(writer.serialize(USER))
    assert converter(produced)(row) == row  # what a typed stream of it carries, unchanged
