"""Window assigners with PyFlink's names (`pyflink.datastream.window`): which windows an element
belongs to, which trigger fires them by default, and (for sessions) how windows merge.

Sizes, slides, offsets and gaps are `Time`/`Duration` values (`Time.seconds(5)`) or int
milliseconds. `assign_windows(element, timestamp, context)` gets the element's timestamp (ms,
None if it has none) and a context with `get_current_processing_time()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.common.time import to_millis
from tidegate.runtime.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
)
from tidegate.runtime.windows.windows import CountWindow, GlobalWindow, TimeWindow
from tidegate.state.descriptors import ValueStateDescriptor


def _event_timestamp(timestamp: int | None, assigner: str) -> int:
    if timestamp is None:
        raise ValueError(
            f"{assigner} needs event timestamps, but a record has none: assign them with "
            "assign_timestamps_and_watermarks(WatermarkStrategy...) before the window, or use "
            "a processing-time assigner"
        )
    return timestamp


class WindowAssigner:
    """Base of all assigners (PyFlink's `WindowAssigner`)."""

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        raise NotImplementedError

    def get_default_trigger(self, env: Any = None) -> Any:
        raise NotImplementedError

    def is_event_time(self) -> bool:
        raise NotImplementedError


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows merge (sessions): `merge_windows(windows, callback)` calls
    `callback(merged_windows, result)` for each group that merges."""

    def merge_windows(self, windows: Any, callback: Callable[[set[Any], Any], Any]) -> None:
        TimeWindow.merge_windows(windows, callback)


class _Tumbling(WindowAssigner):
    _event_time = True

    def __init__(self, size: Any, offset: Any = 0) -> None:
        self.size = to_millis(size, "the window size")
        self.offset = to_millis(offset or 0, "the window offset")
        if self.size <= 0 or abs(self.offset) >= self.size:
            raise ValueError(
                f"a tumbling window needs size > 0 and |offset| < size, got size {self.size} "
                f"ms and offset {self.offset} ms"
            )

    @classmethod
    def of(cls, size: Any, offset: Any = None) -> Any:
        return cls(size, offset)

    def _time(self, timestamp: int | None, context: Any) -> int:
        if self._event_time:
            return _event_timestamp(timestamp, type(self).__name__)
        return context.get_current_processing_time()

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        t = self._time(timestamp, context)
        start = TimeWindow.get_window_start_with_offset(t, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def get_default_trigger(self, env: Any = None) -> Any:
        return EventTimeTrigger() if self._event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self._event_time

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.offset})"


class TumblingEventTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping event-time windows."""


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping processing-time windows."""

    _event_time = False


class _Sliding(_Tumbling):
    def __init__(self, size: Any, slide: Any, offset: Any = 0) -> None:
        self.size = to_millis(size, "the window size")
        self.slide = to_millis(slide, "the window slide")
        self.offset = to_millis(offset or 0, "the window offset")
        if self.size <= 0 or self.slide <= 0 or abs(self.offset) >= self.slide:
            raise ValueError(
                f"a sliding window needs size > 0, slide > 0 and |offset| < slide, got size "
                f"{self.size} ms, slide {self.slide} ms, offset {self.offset} ms"
            )

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> Any:
        return cls(size, slide, offset)

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        t = self._time(timestamp, context)
        size, slide = self.size, self.slide
        last_start = TimeWindow.get_window_start_with_offset(t, self.offset, slide)
        return [TimeWindow(s, s + size) for s in range(last_start, t - size, -slide)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide}, {self.offset})"


class SlidingEventTimeWindows(_Sliding):
    """Windows of `size` starting every `slide` (they overlap if slide < size), event time."""


class SlidingProcessingTimeWindows(_Sliding):
    """Windows of `size` starting every `slide`, processing time."""

    _event_time = False


class _Session(MergingWindowAssigner):
    _event_time = True

    def __init__(self, gap: Any = None, extractor: Any = None) -> None:
        self.gap = None if gap is None else to_millis(gap, "the session gap")
        if self.gap is not None and self.gap <= 0:
            raise ValueError(f"a session gap must be > 0 ms, got {self.gap}")
        self.extractor = extractor

    @classmethod
    def with_gap(cls, size: Any) -> Any:
        return cls(gap=size)

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> Any:
        """`extractor`: a SessionWindowTimeGapExtractor (`extract(element) -> ms`) or a
        callable element -> ms."""
        if not callable(getattr(extractor, "extract", extractor)):
            raise TypeError("with_dynamic_gap needs a callable or an object with .extract()")
        return cls(extractor=extractor)

    def _gap(self, element: Any) -> int:
        if self.extractor is None:
            return self.gap  # type: ignore[return-value]
        extract = getattr(self.extractor, "extract", self.extractor)
        gap = to_millis(extract(element), "a dynamic session gap")
        if gap <= 0:
            raise ValueError(f"a dynamic session gap must be > 0 ms, got {gap} for {element!r}")
        return gap

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        if self._event_time:
            t = _event_timestamp(timestamp, type(self).__name__)
        else:
            t = context.get_current_processing_time()
        return [TimeWindow(t, t + self._gap(element))]

    def get_default_trigger(self, env: Any = None) -> Any:
        return EventTimeTrigger() if self._event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self._event_time


class EventTimeSessionWindows(_Session):
    """Session windows in event time: a gap of inactivity longer than `gap` closes a session."""


class ProcessingTimeSessionWindows(_Session):
    """Session windows in processing time."""

    _event_time = False


#: PyFlink's names of the dynamic-gap variants (same classes: `with_dynamic_gap` builds them)
DynamicEventTimeSessionWindows = EventTimeSessionWindows
DynamicProcessingTimeSessionWindows = ProcessingTimeSessionWindows


class SessionWindowTimeGapExtractor:
    """Base for dynamic session gaps: `extract(element)` returns the gap in ms."""

    def extract(self, element: Any) -> int:
        raise NotImplementedError


class GlobalWindows(WindowAssigner):
    """Every element in one `GlobalWindow` per key; the default trigger never fires, so use it
    with a custom trigger (e.g. `CountTrigger`)."""

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        return [GlobalWindow()]

    def get_default_trigger(self, env: Any = None) -> Any:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be an int > 0, got {value!r}")
    return value


class CountTumblingWindowAssigner(WindowAssigner):
    """`count_window(size)`: the n-th element of a key goes to `CountWindow(n // size)`; the
    window fires (and is purged) when it holds `size` elements. The per-key count is keyed
    state (`context.get_runtime_context()` is the operator's keyed state)."""

    def __init__(self, window_size: int) -> None:
        self.window_size = _positive(window_size, "a count window's size")
        self._count = ValueStateDescriptor("tumble-count-assigner")

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        count = context.get_runtime_context().get_state(self._count)
        n = count.value() or 0
        count.update(n + 1)
        return [CountWindow(n // self.window_size)]

    def get_default_trigger(self, env: Any = None) -> Any:
        return PurgingTrigger(CountTrigger(self.window_size))

    def is_event_time(self) -> bool:
        return False


class CountSlidingWindowAssigner(WindowAssigner):
    """`count_window(size, slide)`: `CountWindow(i)` holds a key's elements number
    `i * slide` to `i * slide + size - 1`; each fires (and is purged) once it holds `size`."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        self.window_size = _positive(window_size, "a count window's size")
        self.window_slide = _positive(window_slide, "a count window's slide")
        self._count = ValueStateDescriptor("slide-count-assigner")

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Any]:
        count = context.get_runtime_context().get_state(self._count)
        n = count.value() or 0
        count.update(n + 1)
        size, slide = self.window_size, self.window_slide
        last = n // slide
        return [CountWindow(i) for i in range(last, -1, -1) if i * slide <= n < i * slide + size]

    def get_default_trigger(self, env: Any = None) -> Any:
        return PurgingTrigger(CountTrigger(self.window_size))

    def is_event_time(self) -> bool:
        return False
