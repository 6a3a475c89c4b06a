"""The windows themselves (PyFlink's `TimeWindow`, `CountWindow`, `GlobalWindow`) and the
`TimestampedValue` that evictors see.

Windows are named tuples: they are keys of keyed map state (window contents, trigger state,
timers), so they must hash, compare and pickle stably on every backend (and a tuple's hash and
equality run in C: the window operator hashes windows several times per element).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

#: Flink's Long.MAX_VALUE (the maximum timestamp of global and count windows)
MAX_TIMESTAMP = 2**63 - 1


class TimeWindow(NamedTuple):
    """The interval `[start, end)` in milliseconds."""

    start: int
    end: int

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        # one class reference instead of a namedtuple's two (the class and copyreg's
        # __newobj__), each costing an import lookup: half the pickling time of a state entry
        return (TimeWindow, (self.start, self.end))

    def max_timestamp(self) -> int:
        """The largest timestamp inside the window (`end - 1`)."""
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """True if the windows overlap or touch (so session windows merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window covering both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """The start of the `window_size` window (shifted by `offset`) holding `timestamp`."""
        return timestamp - (timestamp - offset + window_size) % window_size

    @staticmethod
    def merge_windows(
        windows: Iterable[TimeWindow], callback: Callable[[set[TimeWindow], TimeWindow], Any]
    ) -> None:
        """Merge overlapping windows: `callback(merged_windows, result)` for each group of two
        or more windows that overlap (Flink's `TimeWindow.mergeWindows`)."""
        current: TimeWindow | None = None
        group: set[TimeWindow] = set()
        for candidate in sorted(windows):
            if current is not None and current.intersects(candidate):
                current = current.cover(candidate)
                group.add(candidate)
                continue
            if current is not None and len(group) > 1:
                callback(group, current)
            current, group = candidate, {candidate}
        if current is not None and len(group) > 1:
            callback(group, current)


class CountWindow(NamedTuple):
    """A count window, identified by its id."""

    id: int

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP


class GlobalWindow(NamedTuple):
    """The one window of `GlobalWindows`: every element of a key is in it."""

    @staticmethod
    def get() -> GlobalWindow:
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP


@dataclass(frozen=True, slots=True)
class TimestampedValue:
    """An element of a window with its timestamp (None: the element had none)."""

    value: Any
    timestamp: int | None

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None
