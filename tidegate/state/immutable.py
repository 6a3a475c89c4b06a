"""Which values nobody can change in place: a backend may then share them instead of copying
(the hashmap backend's copy-on-write) or keep them as objects instead of pickles (the rocksdb
backend's value cache)."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

from tidegate.state.ttl.value import TtlValue

__all__ = ["ATOMIC", "is_immutable"]

#: types whose instances are immutable and hold nothing else
ATOMIC = frozenset(
    {
        int,
        float,
        complex,
        bool,
        str,
        bytes,
        type(None),
        decimal.Decimal,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
    }
)
#: immutable containers: immutable when their items are
_CONTAINERS = frozenset({tuple, frozenset, TtlValue})


def is_immutable(value: Any) -> bool:
    """Whether `value` cannot be changed in place: atomic, or a tuple (NamedTuples too),
    frozenset or TTL state value of immutable values (at any depth)."""
    kind = type(value)
    if kind in ATOMIC:
        return True
    # a NamedTuple: a tuple subclass without instance attributes
    if kind not in _CONTAINERS and not (
        isinstance(value, tuple) and not hasattr(value, "__dict__")
    ):
        return False
    for item in value:  # noqa: SIM110 (a loop: faster than all() on the state hot path)
        if type(item) not in ATOMIC and not is_immutable(item):
            return False
    return True
