"""What TTL state stores (`TtlValue`) and the processing-time clock it is checked against."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "TtlTimeProvider",
    "TtlValue",
    "current_timestamp",
    "set_time_provider",
]

#: returns the current processing time in epoch milliseconds
TtlTimeProvider = Callable[[], int]


class TtlValue(NamedTuple):
    """A user value (a list element, a map value) with the time it was last accessed.

    This is what TTL states store in the backend and what checkpoints hold; its module path
    (`tidegate.state.ttl.value.TtlValue`) is part of the checkpoint format.
    """

    value: Any
    last_access_timestamp: int


def wall_clock(_time: Callable[[], float] = time.time) -> int:
    return int(_time() * 1000)


_provider: TtlTimeProvider = wall_clock


def set_time_provider(provider: TtlTimeProvider | None) -> TtlTimeProvider:
    """Replace the processing-time clock of TTL states of this process (None: the wall clock).

    For tests and simulations: a keyed function may install a clock it advances from its records
    (in `open()`), so that expiry is deterministic. Returns the previous provider, to put back
    in `close()`. A TTL backend given its own provider (`ttl_states(backend, provider)`) ignores
    this one.
    """
    global _provider
    previous = _provider
    _provider = wall_clock if provider is None else provider
    return previous


def current_timestamp() -> int:
    """Processing time now, from the installed provider."""
    return _provider()
