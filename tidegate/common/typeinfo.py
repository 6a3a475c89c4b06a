"""PyFlink's type information (`pyflink.common.typeinfo`): `Types` and the TypeInformation
classes it returns, as frozen dataclasses (equal and hashable by value, picklable).

A stream's type is declared where PyFlink declares it (`map(f, output_type)`,
`from_collection(c, type_info)`, ...; `DataStream.get_type()`, PICKLED_BYTE_ARRAY when none
was declared) and it decides how `DataStream.print()` writes each record, as Flink's Java
`toString` of that type (tidegate/common/type_format.py), and how records cross from one task
to the next: checked and converted by the type's codec (tidegate/common/record_codec.py)
instead of pickled as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "BasicArrayTypeInfo",
    "BasicType",
    "BasicTypeInfo",
    "DateTypeInfo",
    "ListTypeInfo",
    "MapTypeInfo",
    "ObjectArrayTypeInfo",
    "PickledBytesTypeInfo",
    "PrimitiveArrayTypeInfo",
    "RowTypeInfo",
    "TimeTypeInfo",
    "TimestampTypeInfo",
    "TupleTypeInfo",
    "TypeInformation",
    "Types",
    "as_type_info",
]


class TypeInformation:
    """The base of every type information."""

    __slots__ = ()


class BasicType(Enum):
    """The basic types, valued by their Java class names (PyFlink's repr of them)."""

    STRING = "String"
    BYTE = "Byte"
    BOOLEAN = "Boolean"
    SHORT = "Short"
    INT = "Integer"
    LONG = "Long"
    FLOAT = "Float"
    DOUBLE = "Double"
    CHAR = "Char"
    BIG_INT = "BigInteger"
    BIG_DEC = "BigDecimal"
    INSTANT = "Instant"


#: the element types of a primitive array (Java's primitives)
PRIMITIVE_TYPES = frozenset(
    (
        BasicType.BOOLEAN,
        BasicType.BYTE,
        BasicType.SHORT,
        BasicType.INT,
        BasicType.LONG,
        BasicType.FLOAT,
        BasicType.DOUBLE,
        BasicType.CHAR,
    )
)


@dataclass(frozen=True)
class BasicTypeInfo(TypeInformation):
    """String, the boxed primitives, BigInteger, BigDecimal and Instant."""

    basic_type: BasicType

    def __repr__(self) -> str:
        return self.basic_type.value


@dataclass(frozen=True)
class DateTypeInfo(TypeInformation):
    """`Types.SQL_DATE()`: a `datetime.date` (Java's java.sql.Date)."""

    def __repr__(self) -> str:
        return "DateTypeInfo"


@dataclass(frozen=True)
class TimeTypeInfo(TypeInformation):
    """`Types.SQL_TIME()`: a `datetime.time` (Java's java.sql.Time)."""

    def __repr__(self) -> str:
        return "TimeTypeInfo"


@dataclass(frozen=True)
class TimestampTypeInfo(TypeInformation):
    """`Types.SQL_TIMESTAMP()`: a `datetime.datetime` (Java's java.sql.Timestamp)."""

    def __repr__(self) -> str:
        return "TimestampTypeInfo"


@dataclass(frozen=True)
class PickledBytesTypeInfo(TypeInformation):
    """Any Python object (PyFlink pickles it): the type of a stream that declared none."""

    def __repr__(self) -> str:
        return "PickledByteArrayTypeInfo"


def _element(element_type: Any, what: str) -> TypeInformation:
    if not isinstance(element_type, TypeInformation):
        raise TypeError(f"{what} takes a TypeInformation (e.g. Types.INT()), got {element_type!r}")
    return element_type


@dataclass(frozen=True)
class PrimitiveArrayTypeInfo(TypeInformation):
    """An array of a Java primitive (`Types.PRIMITIVE_ARRAY(Types.INT())`): a list."""

    element_type: TypeInformation

    def __post_init__(self) -> None:
        _element(self.element_type, "PRIMITIVE_ARRAY")
        if getattr(self.element_type, "basic_type", None) not in PRIMITIVE_TYPES:
            raise TypeError(
                "PRIMITIVE_ARRAY takes BOOLEAN, BYTE, SHORT, INT, LONG, FLOAT, DOUBLE or CHAR, "
                f"got {self.element_type!r}"
            )

    def __repr__(self) -> str:
        return f"PrimitiveArrayTypeInfo<{self.element_type!r}>"


@dataclass(frozen=True)
class BasicArrayTypeInfo(TypeInformation):
    """An array of boxed primitives or strings (`Types.BASIC_ARRAY(Types.STRING())`): a list
    whose elements may be None."""

    element_type: TypeInformation

    def __post_init__(self) -> None:
        _element(self.element_type, "BASIC_ARRAY")
        basic = getattr(self.element_type, "basic_type", None)
        if basic not in PRIMITIVE_TYPES and basic is not BasicType.STRING:
            raise TypeError(
                "BASIC_ARRAY takes BOOLEAN, BYTE, SHORT, INT, LONG, FLOAT, DOUBLE, CHAR or "
                f"STRING, got {self.element_type!r}"
            )

    def __repr__(self) -> str:
        return f"BasicArrayTypeInfo<{self.element_type!r}>"


@dataclass(frozen=True)
class ObjectArrayTypeInfo(TypeInformation):
    """An array of any type (`Types.OBJECT_ARRAY(Types.ROW([...]))`): a list."""

    element_type: TypeInformation

    def __post_init__(self) -> None:
        _element(self.element_type, "OBJECT_ARRAY")

    def __repr__(self) -> str:
        return f"ObjectArrayTypeInfo<{self.element_type!r}>"


@dataclass(frozen=True)
class ListTypeInfo(TypeInformation):
    """`Types.LIST(element_type)`: a list (Java's java.util.List)."""

    element_type: TypeInformation

    def __post_init__(self) -> None:
        _element(self.element_type, "LIST")

    @property
    def elem_type(self) -> TypeInformation:
        """PyFlink's name of the element type."""
        return self.element_type

    def __repr__(self) -> str:
        return f"ListTypeInfo<{self.element_type!r}>"


@dataclass(frozen=True)
class MapTypeInfo(TypeInformation):
    """`Types.MAP(key_type, value_type)`: a dict (Java's java.util.Map)."""

    key_type: TypeInformation
    value_type: TypeInformation

    def __post_init__(self) -> None:
        _element(self.key_type, "MAP's key type")
        _element(self.value_type, "MAP's value type")

    def __repr__(self) -> str:
        return f"MapTypeInfo<{self.key_type!r}, {self.value_type!r}>"


def _field_types(field_types: Any, what: str) -> tuple[TypeInformation, ...]:
    if isinstance(field_types, TypeInformation) or not isinstance(field_types, Sequence):
        raise TypeError(f"{what} takes a list of field types, got {field_types!r}")
    for i, t in enumerate(field_types):
        if not isinstance(t, TypeInformation):
            raise TypeError(f"{what}: field {i}'s type is not a TypeInformation: {t!r}")
    return tuple(field_types)


@dataclass(frozen=True)
class TupleTypeInfo(TypeInformation):
    """`Types.TUPLE([...])`: a tuple (or list, or Row) of exactly these fields (Flink's
    Tuple1..Tuple25)."""

    field_types: tuple[TypeInformation, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_types", _field_types(self.field_types, "TUPLE"))
        if not 1 <= len(self.field_types) <= 25:
            raise ValueError(f"a TUPLE has 1 to 25 fields (Flink's Tuple1..Tuple25), got {self}")

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def __repr__(self) -> str:
        return "TupleTypeInfo({})".format(", ".join(map(repr, self.field_types)))


@dataclass(frozen=True)
class RowTypeInfo(TypeInformation):
    """`Types.ROW([...])` / `Types.ROW_NAMED(names, [...])`: a Row (or tuple, list, dict) of
    these fields; unnamed fields are named f0, f1, ... (`names`)."""

    field_types: tuple[TypeInformation, ...]
    field_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        types = _field_types(self.field_types, "ROW")
        object.__setattr__(self, "field_types", types)
        if self.field_names is None:
            return
        names = self.field_names
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise TypeError(f"ROW_NAMED takes a list of field names, got {names!r}")
        names = tuple(names)
        bad = [n for n in names if not isinstance(n, str) or not n]
        if bad:
            raise TypeError(f"ROW_NAMED: field names are non-empty strings, got {bad!r}")
        if len(names) != len(types):
            raise ValueError(
                f"ROW_NAMED got {len(names)} field names {list(names)} for {len(types)} types"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"ROW_NAMED: field names must be unique, got {list(names)}")
        object.__setattr__(self, "field_names", names)

    @property
    def names(self) -> tuple[str, ...]:
        """The field names: the declared ones, or f0, f1, ..."""
        if self.field_names is not None:
            return self.field_names
        return tuple(f"f{i}" for i in range(len(self.field_types)))

    def get_field_names(self) -> list[str]:
        return list(self.names)

    def get_field_index(self, field_name: str) -> int:
        """The index of `field_name`, -1 if there is none (PyFlink's answer)."""
        names = self.names
        return names.index(field_name) if field_name in names else -1

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def __repr__(self) -> str:
        if self.field_names is None:
            return "RowTypeInfo({})".format(", ".join(map(repr, self.field_types)))
        pairs = zip(self.field_names, self.field_types, strict=True)
        return "RowTypeInfo({})".format(", ".join(f"{n}: {t!r}" for n, t in pairs))


def _basic(basic_type: BasicType) -> Any:
    return staticmethod(lambda: BasicTypeInfo(basic_type))


class Types:
    """PyFlink's type factories: `Types.STRING()`, `Types.TUPLE([Types.STRING(), Types.INT()])`,
    `Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])`, ..."""

    STRING = _basic(BasicType.STRING)
    BYTE = _basic(BasicType.BYTE)
    BOOLEAN = _basic(BasicType.BOOLEAN)
    SHORT = _basic(BasicType.SHORT)
    INT = _basic(BasicType.INT)
    LONG = _basic(BasicType.LONG)
    FLOAT = _basic(BasicType.FLOAT)
    DOUBLE = _basic(BasicType.DOUBLE)
    CHAR = _basic(BasicType.CHAR)
    BIG_INT = _basic(BasicType.BIG_INT)
    BIG_DEC = _basic(BasicType.BIG_DEC)
    INSTANT = _basic(BasicType.INSTANT)

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return DateTypeInfo()

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return TimeTypeInfo()

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TimestampTypeInfo()

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return PickledBytesTypeInfo()

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> RowTypeInfo:
        return RowTypeInfo(tuple(_field_types(field_types, "ROW")))

    @staticmethod
    def ROW_NAMED(
        field_names: Sequence[str], field_types: Sequence[TypeInformation]
    ) -> RowTypeInfo:
        names = field_names
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise TypeError(f"ROW_NAMED takes a list of field names, got {names!r}")
        return RowTypeInfo(tuple(_field_types(field_types, "ROW_NAMED")), tuple(names))

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TupleTypeInfo:
        return TupleTypeInfo(tuple(_field_types(field_types, "TUPLE")))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return PrimitiveArrayTypeInfo(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return BasicArrayTypeInfo(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ObjectArrayTypeInfo(element_type)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return ListTypeInfo(element_type_info)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        return MapTypeInfo(key_type_info, value_type_info)


def as_type_info(value: Any, what: str) -> TypeInformation | None:
    """`value` if it is a TypeInformation (None stays None); a clear error otherwise."""
    if value is None or isinstance(value, TypeInformation):
        return value
    raise TypeError(
        f"{what} takes a TypeInformation from tidegate.common.typeinfo.Types (e.g. "
        f"Types.TUPLE([Types.STRING(), Types.INT()])), got {value!r}"
    )
