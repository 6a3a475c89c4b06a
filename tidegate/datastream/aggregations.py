"""The rolling field aggregations of a KeyedStream (`sum`, `min`, `max`, `min_by`, `max_by`),
as reduce functions with Flink's semantics:

* `sum(p)` adds field `p`; the other fields are the key's first record's;
* `min(p)` / `max(p)` keep the smallest / largest value of field `p`; the other fields are the
  key's first record's (Flink's `min`, not the record that holds the minimum);
* `min_by(p)` / `max_by(p)` keep the whole record with the smallest / largest field `p`, the
  first such record on ties.

A record is a tuple, a list or a `Row` (field `p` by position, or by name for a named Row), or
a basic value such as an int (then `p` must be 0: the value itself). A tuple result is a new
tuple; a list or Row result is the first record, changed in place (as PyFlink does).
"""

from __future__ import annotations

import enum
from typing import Any

from tidegate.datastream.core_functions import ReduceFunction

__all__ = ["Aggregation", "FieldAggregation"]


class Aggregation(enum.Enum):
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    MIN_BY = "min_by"
    MAX_BY = "max_by"


class FieldAggregation(ReduceFunction):
    """One of the aggregations of field `position` (an int, or a field name of a named Row)."""

    def __init__(self, aggregation: Aggregation, position: int | str = 0) -> None:
        if not isinstance(position, int | str) or isinstance(position, bool):
            raise TypeError(
                f"{aggregation.value}() takes a field position (int) or a field name (str), got "
                f"{type(position).__name__}"
            )
        self.aggregation = aggregation
        self.position = position

    def reduce(self, value1: Any, value2: Any) -> Any:
        if _is_basic(value1):
            return self._reduce_basic(value1, value2)
        a, b = self._field(value1), self._field(value2)
        match self.aggregation:
            case Aggregation.SUM:
                return self._with_field(value1, a + b)
            case Aggregation.MIN:
                return value1 if a <= b else self._with_field(value1, b)
            case Aggregation.MAX:
                return value1 if a >= b else self._with_field(value1, b)
            case Aggregation.MIN_BY:
                return value1 if a <= b else value2
            case Aggregation.MAX_BY:
                return value1 if a >= b else value2

    def _reduce_basic(self, value1: Any, value2: Any) -> Any:
        if self.position != 0:
            raise TypeError(
                f"{self.aggregation.value}({self.position!r}) selects a field of a basic value "
                f"({type(value1).__name__} {value1!r}); on a basic value only field 0, the value "
                "itself, can be aggregated"
            )
        match self.aggregation:
            case Aggregation.SUM:
                return value1 + value2
            case Aggregation.MIN | Aggregation.MIN_BY:
                return value1 if value1 <= value2 else value2
            case Aggregation.MAX | Aggregation.MAX_BY:
                return value1 if value1 >= value2 else value2

    def _field(self, value: Any) -> Any:
        try:
            return value[self.position]
        except (IndexError, KeyError, TypeError, ValueError):
            raise TypeError(
                f"{self.aggregation.value}({self.position!r}): the record "
                f"{value!r} ({type(value).__name__}) has no field {self.position!r}; give the "
                "position of a field of a tuple, list or Row, or the name of a named Row's field"
            ) from None

    def _with_field(self, value: Any, field: Any) -> Any:
        if isinstance(value, tuple) and not hasattr(value, "as_dict"):
            if not isinstance(self.position, int):
                self._field(value)  # a name on a tuple: the error saying so
            changed = list(value)
            changed[self.position] = field
            return type(value)(changed) if type(value) is tuple else type(value)(*changed)
        value[self.position] = field
        return value


def _is_basic(value: Any) -> bool:
    return not isinstance(value, tuple | list) and not hasattr(value, "as_dict")
