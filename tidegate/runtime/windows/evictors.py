"""Evictors (Flink's `CountEvictor`, `TimeEvictor`): remove elements from a window's contents
before and/or after its function runs. `elements` is a list of `TimestampedValue` that the
evictor changes in place; `size` is its length.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.time import to_millis
from tidegate.runtime.windows.windows import TimestampedValue


class Evictor:
    """Base of evictors: override `evict_before` and/or `evict_after`."""

    def evict_before(
        self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any
    ) -> None:
        pass

    def evict_after(
        self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any
    ) -> None:
        pass


class CountEvictor(Evictor):
    """Keeps the last `max_count` elements (before the function runs, or after it)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if not isinstance(max_count, int) or max_count <= 0:
            raise ValueError(f"CountEvictor needs max_count > 0, got {max_count!r}")
        self.max_count = max_count
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        if len(elements) > self.max_count:
            del elements[: len(elements) - self.max_count]

    def evict_before(self, elements: list, size: int, window: Any, ctx: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list, size: int, window: Any, ctx: Any) -> None:
        if self.do_evict_after:
            self._evict(elements)


class TimeEvictor(Evictor):
    """Keeps the elements whose timestamp is within `window_size` of the newest one's."""

    def __init__(self, window_size: Any, do_evict_after: bool = False) -> None:
        self.window_size = to_millis(window_size, "TimeEvictor's window size")
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(window_size: Any, do_evict_after: bool = False) -> TimeEvictor:
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        stamped = [e.timestamp for e in elements if e.timestamp is not None]
        if not stamped:
            return  # Flink: elements without timestamps are never evicted by time
        cutoff = max(stamped) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def evict_before(self, elements: list, size: int, window: Any, ctx: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list, size: int, window: Any, ctx: Any) -> None:
        if self.do_evict_after:
            self._evict(elements)
