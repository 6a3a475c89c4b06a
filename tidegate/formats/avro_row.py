"""Avro binary <-> Rows through fastavro (Flink's AvroRow(De)SerializationSchema).

The encoding is Avro's schemaless single-datum binary encoding, as Flink's
AvroRowSerializationSchema writes it: no container file header, no schema id prefix, so reader
and writer must agree on the schema out of band. Schema evolution: read with the schema the
data was written with (the writer schema) resolved against the schema the job wants (the
reader schema): added fields get their defaults, removed ones are skipped, promotions (int ->
long -> double ...) applied.

Values as tidegate gives them: an Avro record is a Row with the record's field names (nested
records nested Rows), array a list, map a dict, enum its symbol, bytes/fixed bytes, decimal a
Decimal, date a date, time a time, timestamp-millis/micros a naive datetime in UTC (Flink's SQL
timestamp), uuid a str. Writing takes Rows (named: by name; positional: in the schema's field
order), tuples, lists or dicts for records.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any

from tidegate.common.typeinfo import RowTypeInfo, TypeInformation, Types
from tidegate.common.types import Row
from tidegate.formats.base import FieldError, FormatError, new_row, row_values

__all__ = ["avro_reader", "avro_row_type", "avro_writer", "parse_avro_schema"]

Fn = Callable[[Any], Any]
_READ_ERRORS = (EOFError, ValueError, IndexError, KeyError, TypeError, StopIteration, OverflowError)


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:
        raise ImportError("the Avro format needs fastavro: pip install 'tidegate[avro]'") from None
    return fastavro


def parse_avro_schema(schema_string: str, what: str) -> dict[str, Any]:
    """The parsed (fastavro) schema of a JSON schema string; a clear error if it is not one."""
    if not isinstance(schema_string, str):
        raise TypeError(f"{what} must be an Avro schema as a JSON string, got {schema_string!r}")
    fastavro = _fastavro()
    try:
        parsed = fastavro.parse_schema(json.loads(schema_string))
    except (ValueError, fastavro.schema.SchemaParseException) as e:
        raise ValueError(f"{what} is not a valid Avro schema: {e}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise TypeError(f"{what} must be an Avro record schema (records become Rows)")
    return parsed


class _Compiler:
    """Compiles converters for one parsed schema; a record by name once, so a recursive record
    (one holding itself) compiles to a reference to its own converter."""

    def __init__(self, parsed: dict[str, Any], reading: bool) -> None:
        self.named: dict[str, Any] = parsed.get("__named_schemas", {})
        self.reading = reading
        self.done: dict[str, Fn] = {}

    def compile(self, s: Any) -> Fn | None:
        """A converter for values of schema `s`; None where values need no conversion."""
        if isinstance(s, str):
            return self._named(s) if s in self.named else None
        if isinstance(s, list):
            return self._union(s)
        kind, logical = s.get("type"), s.get("logicalType")
        if kind == "record":
            return self._record(s)
        if kind == "array":
            return _each(self.compile(s["items"]))
        if kind == "map":
            return _each_value(self.compile(s["values"]))
        if isinstance(kind, dict | list):
            return self.compile(kind)
        if self.reading and logical in ("timestamp-millis", "timestamp-micros"):
            return _naive_utc
        if self.reading and logical == "uuid":
            return str
        return None

    def _named(self, name: str) -> Fn | None:
        """A reference to a named type defined earlier (a record may refer to itself)."""
        s = self.named[name]
        if isinstance(s, dict) and s.get("type") == "record":
            return self._record(s)
        return self.compile(s)  # an enum or fixed: nothing to convert

    def _record(self, s: dict[str, Any]) -> Fn:
        name = s["name"]
        if name in self.done:
            return self.done[name]
        cell: list[Fn] = []
        self.done[name] = lambda v: cell[0](v)
        names = [f["name"] for f in s["fields"]]
        convs = [self.compile(f["type"]) for f in s["fields"]]
        fn = _row_reader(names, convs) if self.reading else _row_writer(names, convs)
        cell.append(fn)
        self.done[name] = fn
        return fn

    def _union(self, branches: list[Any]) -> Fn | None:
        convs = [self.compile(b) for b in branches]
        if all(c is None for c in convs):
            return None
        if self.reading:
            return _union_reader(branches, convs)
        return _union_writer(self, branches, convs)


def _naive_utc(v: Any) -> Any:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    return v


def _each(conv: Fn | None) -> Fn | None:
    if conv is None:
        return None
    return lambda v: [None if x is None else conv(x) for x in v]


def _each_value(conv: Fn | None) -> Fn | None:
    if conv is None:
        return None
    return lambda v: {k: None if x is None else conv(x) for k, x in v.items()}


def _row_reader(names: list[str], convs: list[Fn | None]) -> Fn:
    pairs = [(n, c) for n, c in zip(names, convs, strict=True)]
    if all(c is None for c in convs):
        return lambda d: new_row(names, [d[n] for n in names])

    def read_row(d: dict[str, Any]) -> Row:
        return new_row(names, [d[n] if c is None or d[n] is None else c(d[n]) for n, c in pairs])

    return read_row


def _union_reader(branches: list[Any], convs: list[Fn | None]) -> Fn:
    """fastavro gives records of a union with several records as (name, dict)."""
    by_name = {}
    for b, c in zip(branches, convs, strict=True):
        name = b if isinstance(b, str) else b.get("name") if isinstance(b, dict) else None
        if name is not None and c is not None:
            by_name[name] = c
    others = [c for b, c in zip(branches, convs, strict=True) if c is not None]

    def read_union(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, tuple) and len(v) == 2 and v[0] in by_name:
            return by_name[v[0]](v[1])
        if isinstance(v, dict) and len(others) == 1:
            return others[0](v)
        if isinstance(v, dt.datetime):
            return _naive_utc(v)
        return v

    return read_union


def _row_writer(names: list[str], convs: list[Fn | None]) -> Fn:
    fields = list(names)

    def write_row(v: Any) -> dict[str, Any]:
        values = row_values(v, fields)
        out = {}
        name = ""
        try:
            for name, c, x in zip(fields, convs, values, strict=True):
                out[name] = x if c is None or x is None else c(x)
        except FieldError as e:
            e.path.append(name)
            raise
        return out

    return write_row


def _union_writer(compiler: _Compiler, branches: list[Any], convs: list[Fn | None]) -> Fn:
    """A Row, tuple or dict in a union goes to the first record branch whose fields it has (a
    positional one: whose arity it has), a list to the array branch, another dict to the map
    branch; fastavro picks the branch of everything else itself."""
    records, array, mapping = [], None, None
    for b, conv in zip(branches, convs, strict=True):
        s = compiler.named.get(b) if isinstance(b, str) else b
        kind = s.get("type") if isinstance(s, dict) else None
        if kind == "record":
            records.append(([f["name"] for f in s["fields"]], conv))  # type: ignore[index]
        elif kind == "array" and array is None:
            array = conv
        elif kind == "map" and mapping is None:
            mapping = conv

    def write_union(v: Any) -> Any:
        if isinstance(v, list):
            return array(v) if array is not None else v
        if not isinstance(v, Row | tuple | dict):
            return v
        keys = v._fields if isinstance(v, Row) else list(v) if isinstance(v, dict) else None
        for names, conv in records:
            if set(names) <= set(keys) if keys is not None else len(names) == len(v):
                return conv(v)  # type: ignore[misc]
        return mapping(v) if mapping is not None and isinstance(v, dict) else v

    return write_union


_PRIMITIVES = {
    "boolean": Types.BOOLEAN,
    "int": Types.INT,
    "long": Types.LONG,
    "float": Types.FLOAT,
    "double": Types.DOUBLE,
    "string": Types.STRING,
}
_LOGICAL = {
    "decimal": Types.BIG_DEC,
    "date": Types.SQL_DATE,
    "time-millis": Types.SQL_TIME,
    "time-micros": Types.SQL_TIME,
    "timestamp-millis": Types.SQL_TIMESTAMP,
    "timestamp-micros": Types.SQL_TIMESTAMP,
    "local-timestamp-millis": Types.SQL_TIMESTAMP,
    "local-timestamp-micros": Types.SQL_TIMESTAMP,
    "uuid": Types.STRING,
}


def avro_row_type(parsed: dict[str, Any]) -> RowTypeInfo:
    """The tidegate type of the Rows read with the record schema `parsed`: a ROW_NAMED of its
    fields; what no tidegate type holds as read (bytes, fixed, a union of several types, a
    record inside itself) is PICKLED_BYTE_ARRAY, carried as it is."""
    named = parsed.get("__named_schemas", {})

    def type_of(s: Any, open_records: frozenset[str]) -> TypeInformation:
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return _PRIMITIVES[s]()
            if s in named and s not in open_records:
                return type_of(named[s], open_records)
            return Types.PICKLED_BYTE_ARRAY()  # null, bytes, a record inside itself
        if isinstance(s, list):
            branches = [b for b in s if b != "null"]
            if len(branches) == 1:
                return type_of(branches[0], open_records)
            return Types.PICKLED_BYTE_ARRAY()
        kind, logical = s.get("type"), s.get("logicalType")
        if logical in _LOGICAL:
            return _LOGICAL[logical]()
        if kind == "record":
            inner = open_records | {s["name"]}
            fields = s["fields"]
            return Types.ROW_NAMED(
                [f["name"] for f in fields], [type_of(f["type"], inner) for f in fields]
            )
        if kind == "array":
            return Types.LIST(type_of(s["items"], open_records))
        if kind == "map":
            return Types.MAP(Types.STRING(), type_of(s["values"], open_records))
        if kind == "enum":
            return Types.STRING()
        if kind == "fixed":
            return Types.PICKLED_BYTE_ARRAY()  # bytes as read
        return type_of(kind, open_records)  # {"type": "long"} and the like

    row = type_of(parsed, frozenset())
    assert isinstance(row, RowTypeInfo)
    return row


def avro_reader(writer: dict[str, Any], reader: dict[str, Any] | None) -> Callable[[Any], Any]:
    """message (bytes) -> Row, written with `writer`, read as `reader` (None: the writer's)."""
    fastavro = _fastavro()
    schemaless_reader = fastavro.schemaless_reader
    resolution_error = fastavro.read.SchemaResolutionError
    schema = reader if reader is not None else writer
    to_row = _Compiler(schema, reading=True).compile(schema)
    assert to_row is not None  # a record always converts
    resolve = reader if reader is not None and reader is not writer else None

    def read(message: Any) -> Any:
        stream = io.BytesIO(message)
        try:
            datum = schemaless_reader(stream, writer, resolve, return_record_name=True,
                                      return_record_name_override=True)  # fmt: skip
        except _READ_ERRORS as e:
            reason = f"cannot be read with the schema: {type(e).__name__}: {e}".rstrip(": ")
            position = f"byte {stream.tell()}"
            raise FormatError("Avro", reason, message, position=position) from None
        except resolution_error as e:  # the reader schema cannot read the writer's
            raise FormatError("Avro", f"{type(e).__name__}: {e}", message) from None
        left = len(message) - stream.tell()
        if left:
            raise FormatError(
                "Avro",
                f"{left} bytes left over after the record (written with another schema?)",
                message,
                position=f"byte {stream.tell()}",
            )
        return to_row(datum)

    return read


def avro_writer(schema: dict[str, Any]) -> Callable[[Any], bytes]:
    """record -> its schemaless binary encoding; FormatError naming the field if it does not
    fit the schema."""
    fastavro = _fastavro()
    schemaless_writer, validate = fastavro.schemaless_writer, fastavro.validation.validate
    to_dict = _Compiler(schema, reading=False).compile(schema)
    assert to_dict is not None

    def write(record: Any) -> bytes:
        try:
            datum = to_dict(record)
        except FieldError as e:
            raise FormatError("Avro", e.reason, record, field=e.dotted()) from None
        stream = io.BytesIO()
        try:
            schemaless_writer(stream, schema, datum)
        except (ValueError, TypeError, AttributeError, OverflowError, KeyError) as e:
            try:
                validate(datum, schema, raise_errors=True)
            except fastavro.validation.ValidationError as invalid:
                last = invalid.errors[-1]  # the innermost mismatch: the most precise field
                reason = "; ".join(
                    f"{err.datum!r:.60} does not fit {err.schema}" for err in invalid.errors
                )
                raise FormatError("Avro", reason, record, field=last.field) from None
            raise FormatError("Avro", f"{type(e).__name__}: {e}", record) from None
        return stream.getvalue()

    return write
