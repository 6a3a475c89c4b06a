"""PyFlink's `JsonRowSerializationSchema` and `JsonRowDeserializationSchema` with their builders
(`pyflink.datastream.formats.json`); the conversions are in json_row.py."""

from __future__ import annotations

from typing import Any, ClassVar

from tidegate.common.serialization import DeserializationSchema, SerializationSchema
from tidegate.common.typeinfo import RowTypeInfo, TypeInformation
from tidegate.formats.base import FormatError, RowSchema, row_type
from tidegate.formats.json_row import json_reader, json_writer

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]


class JsonRowDeserializationSchema(RowSchema, DeserializationSchema):
    """Reads a JSON object into a Row of `type_info` (its field names are the JSON keys).

    A message that is not JSON or does not fit the type raises FormatError naming the field and
    the position, with an excerpt of the message; with `ignore_parse_errors` it gives None
    instead, which sources skip (Flink's semantics). A None message (a Kafka tombstone) is None.
    Build it like PyFlink: `JsonRowDeserializationSchema.builder().type_info(t).build()`.
    """

    _PARAMS: ClassVar[tuple[str, ...]] = (
        "type_info",
        "fail_on_missing_field",
        "ignore_parse_errors",
    )

    def __init__(
        self,
        type_info: RowTypeInfo,
        fail_on_missing_field: bool = False,
        ignore_parse_errors: bool = False,
    ) -> None:
        self.type_info = row_type(type_info, "JsonRowDeserializationSchema")
        if fail_on_missing_field and ignore_parse_errors:
            raise ValueError(
                "JSON format doesn't support fail_on_missing_field and ignore_parse_errors "
                "both set (a missing field would be an error that is then ignored)"
            )
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors
        self._read = json_reader(self.type_info, fail_on_missing_field)

    @staticmethod
    def builder() -> JsonRowDeserializationSchema.Builder:
        return JsonRowDeserializationSchema.Builder()

    def deserialize(self, message: bytes | str | None) -> Any:
        if message is None:
            return None
        if not self.ignore_parse_errors:
            return self._read(message)
        try:
            return self._read(message)
        except FormatError:
            return None

    def get_produced_type(self) -> TypeInformation:
        """The type of the records it produces (Flink's `getProducedType`)."""
        return self.type_info

    class Builder:
        """PyFlink's builder: `type_info` is required."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info: TypeInformation) -> JsonRowDeserializationSchema.Builder:
            """The Row type to read; its field names are the JSON keys."""
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str) -> JsonRowDeserializationSchema.Builder:
            raise NotImplementedError(
                "JSON Schema strings are not supported: declare the row with "
                "type_info(Types.ROW_NAMED([...], [...]))"
            )

        def fail_on_missing_field(self) -> JsonRowDeserializationSchema.Builder:
            """A declared field missing from a message is an error (by default it is None)."""
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self) -> JsonRowDeserializationSchema.Builder:
            """A message that cannot be read is skipped (None) instead of failing the job."""
            self._ignore_parse_errors = True
            return self

        def build(self) -> JsonRowDeserializationSchema:
            if self._type_info is None:
                raise TypeError("JsonRowDeserializationSchema needs type_info(...)")
            return JsonRowDeserializationSchema(
                self._type_info, self._fail_on_missing_field, self._ignore_parse_errors
            )


class JsonRowSerializationSchema(RowSchema, SerializationSchema):
    """Writes a Row (or tuple, list, dict) of `type_info` as one compact JSON object, UTF-8.

    A record that does not fit the type raises FormatError naming the field. Build it like
    PyFlink: `JsonRowSerializationSchema.builder().with_type_info(t).build()`.
    """

    _PARAMS: ClassVar[tuple[str, ...]] = ("type_info",)

    def __init__(self, type_info: RowTypeInfo) -> None:
        self.type_info = row_type(type_info, "JsonRowSerializationSchema")
        self._write = json_writer(self.type_info)

    @staticmethod
    def builder() -> JsonRowSerializationSchema.Builder:
        return JsonRowSerializationSchema.Builder()

    def serialize(self, element: Any) -> bytes:
        return self._write(element)

    class Builder:
        """PyFlink's builder: `with_type_info` is required."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None

        def with_type_info(self, type_info: TypeInformation) -> JsonRowSerializationSchema.Builder:
            self._type_info = type_info
            return self

        def build(self) -> JsonRowSerializationSchema:
            if self._type_info is None:
                raise TypeError("Typeinfo should be set: call with_type_info(...)")
            return JsonRowSerializationSchema(self._type_info)  # type: ignore[arg-type]
