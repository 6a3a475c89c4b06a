"""PyFlink's `AvroRowSerializationSchema` and `AvroRowDeserializationSchema`
(`pyflink.datastream.formats.avro`); the conversions are in avro_row.py."""

from __future__ import annotations

from typing import Any, ClassVar

from tidegate.common.serialization import DeserializationSchema, SerializationSchema
from tidegate.common.typeinfo import RowTypeInfo
from tidegate.formats.avro_row import avro_reader, avro_row_type, avro_writer, parse_avro_schema
from tidegate.formats.base import RowSchema

__all__ = ["AvroRowDeserializationSchema", "AvroRowSerializationSchema"]


def _no_record_class(record_class: str | None, avro_schema_string: str | None) -> str:
    if record_class is not None:
        raise TypeError(
            "record_class names a generated Java class, which tidegate cannot load: pass the "
            "class's schema as avro_schema_string"
        )
    if avro_schema_string is None:
        raise TypeError("avro_schema_string should be specified")
    return avro_schema_string


class AvroRowDeserializationSchema(RowSchema, DeserializationSchema):
    """Reads one Avro record in the schemaless binary encoding into a Row with the record's
    field names (avro_row.py says how each Avro type arrives).

    `avro_schema_string` is the schema the job reads with. Data written with another version of
    the schema is read by also giving `writer_schema_string` (a tidegate extension; PyFlink's
    schema assumes the data was written with the reader's schema): Avro's schema resolution then
    fills added fields with their defaults and drops removed ones. A message that cannot be
    read raises FormatError with the byte position; a None message is None.
    """

    _PARAMS: ClassVar[tuple[str, ...]] = ("avro_schema_string", "writer_schema_string")

    def __init__(
        self,
        record_class: str | None = None,
        avro_schema_string: str | None = None,
        writer_schema_string: str | None = None,
    ) -> None:
        self.avro_schema_string = _no_record_class(record_class, avro_schema_string)
        self.writer_schema_string = writer_schema_string
        reader = parse_avro_schema(self.avro_schema_string, "avro_schema_string")
        self._row_type = avro_row_type(reader)
        if writer_schema_string is None:
            self._read = avro_reader(reader, None)
        else:
            writer = parse_avro_schema(writer_schema_string, "writer_schema_string")
            self._read = avro_reader(writer, reader)

    def deserialize(self, message: bytes | None) -> Any:
        return None if message is None else self._read(message)

    def get_produced_type(self) -> RowTypeInfo:
        """The Rows' type, from the (reader) schema: a ROW_NAMED of its fields (Flink's
        `getProducedType`); avro_row.avro_row_type says how each Avro type maps."""
        return self._row_type


class AvroRowSerializationSchema(RowSchema, SerializationSchema):
    """Writes a Row (named: by name; positional: in field order), tuple, list or dict as one
    Avro record of `avro_schema_string` in the schemaless binary encoding (Flink's), raising
    FormatError naming the field that does not fit."""

    _PARAMS: ClassVar[tuple[str, ...]] = ("avro_schema_string",)

    def __init__(
        self, record_class: str | None = None, avro_schema_string: str | None = None
    ) -> None:
        self.avro_schema_string = _no_record_class(record_class, avro_schema_string)
        self._write = avro_writer(parse_avro_schema(self.avro_schema_string, "avro_schema_string"))

    def serialize(self, element: Any) -> bytes:
        return self._write(element)
