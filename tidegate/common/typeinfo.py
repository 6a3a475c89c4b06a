"""PyFlink-compatible `Types`: accepted wherever PyFlink takes type information.

tidegate moves Python objects, so a type is only a hint (it names the record shape in the job
graph and docs); it never changes how records are serialized.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TypeInformation:
    name: str
    params: tuple = ()

    def __repr__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(map(repr, self.params))})"


def _simple(name: str):
    return staticmethod(lambda: TypeInformation(name))


class Types:
    """Factory of type hints with PyFlink's names (`Types.STRING()`, `Types.TUPLE([...])`)."""

    STRING = _simple("STRING")
    BYTE = _simple("BYTE")
    BOOLEAN = _simple("BOOLEAN")
    SHORT = _simple("SHORT")
    INT = _simple("INT")
    LONG = _simple("LONG")
    FLOAT = _simple("FLOAT")
    DOUBLE = _simple("DOUBLE")
    CHAR = _simple("CHAR")
    BIG_INT = _simple("BIG_INT")
    BIG_DEC = _simple("BIG_DEC")
    SQL_DATE = _simple("SQL_DATE")
    SQL_TIME = _simple("SQL_TIME")
    SQL_TIMESTAMP = _simple("SQL_TIMESTAMP")
    INSTANT = _simple("INSTANT")
    PICKLED_BYTE_ARRAY = _simple("PICKLED_BYTE_ARRAY")
    PRIMITIVE_ARRAY = staticmethod(lambda elem: TypeInformation("PRIMITIVE_ARRAY", (elem,)))
    BASIC_ARRAY = staticmethod(lambda elem: TypeInformation("BASIC_ARRAY", (elem,)))
    OBJECT_ARRAY = staticmethod(lambda elem: TypeInformation("OBJECT_ARRAY", (elem,)))
    LIST = staticmethod(lambda elem: TypeInformation("LIST", (elem,)))
    TUPLE = staticmethod(lambda types: TypeInformation("TUPLE", tuple(types)))
    MAP = staticmethod(lambda k, v: TypeInformation("MAP", (k, v)))

    @staticmethod
    def ROW(field_types) -> TypeInformation:
        return TypeInformation("ROW", tuple(field_types))

    @staticmethod
    def ROW_NAMED(field_names, field_types) -> TypeInformation:
        return TypeInformation("ROW_NAMED", (tuple(field_names), tuple(field_types)))
