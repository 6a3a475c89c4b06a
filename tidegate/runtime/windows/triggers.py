"""Triggers with PyFlink's names (`pyflink.datastream.window`): when a window's pane fires.

A trigger is stateless; what it must remember lives in state scoped to the key and window
(`ctx.get_partitioned_state(descriptor)`), and its timers go through the context. It returns a
`TriggerResult` from `on_element`, `on_event_time` and `on_processing_time`.
"""

from __future__ import annotations

import enum
from typing import Any

from tidegate.common.time import to_millis
from tidegate.state.descriptors import ReducingStateDescriptor


class TriggerResult(enum.Enum):
    """What happens to a window: fire its function, purge its contents, both or neither."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger:
    """Base of triggers. Override `on_element`, `on_event_time`, `on_processing_time`, `clear`;
    for merging (session) windows also `can_merge` (True) and `on_merge`."""

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: Any) -> None:
        raise TypeError(f"{type(self).__name__} does not support merging (session) windows")

    def clear(self, window: Any, ctx: Any) -> None:
        """The window is purged for good: delete its timers and state."""


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (the event-time assigners' default)."""

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # a late element within the allowed lateness
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires once the processing time passes the window's end (processing-time default)."""

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


def _add(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger):
    """Fires each time the window holds `count` more elements."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or count <= 0:
            raise ValueError(f"CountTrigger needs a count > 0, got {count!r}")
        self.count = count
        self._state = ReducingStateDescriptor("count", _add)

    @staticmethod
    def of(count: int) -> CountTrigger:
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        count = ctx.get_partitioned_state(self._state)
        count.add(1)
        if count.get() >= self.count:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self._state)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self._state).clear()


class PurgingTrigger(Trigger):
    """Wraps a trigger: its FIRE becomes FIRE_AND_PURGE."""

    def __init__(self, nested: Trigger) -> None:
        self.nested = nested

    @staticmethod
    def of(nested: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: Any, ctx: Any) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.nested.clear(window, ctx)


class NeverTrigger(Trigger):
    """Never fires (the default of GlobalWindows)."""

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass


def _min(a: int, b: int) -> int:
    return min(a, b)


class _Continuous(Trigger):
    """Fires every `interval` (aligned to multiples of it) while the window is open; the next
    firing time is trigger state (`fire-time`), so it survives restores and merges."""

    _event_time = True

    def __init__(self, interval: Any) -> None:
        self.interval = to_millis(interval, "the trigger interval")
        if self.interval <= 0:
            raise ValueError(f"a continuous trigger needs an interval > 0 ms, got {self.interval}")
        self._state = ReducingStateDescriptor("fire-time", _min)

    @classmethod
    def of(cls, interval: Any) -> Any:
        return cls(interval)

    def _register(self, ctx: Any, time: int) -> None:
        if self._event_time:
            ctx.register_event_time_timer(time)
        else:
            ctx.register_processing_time_timer(time)

    def _next(self, time: int, window: Any, ctx: Any) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        ctx.get_partitioned_state(self._state).add(next_fire)
        self._register(ctx, next_fire)

    def _on_timer(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self._state)
        if fire_time.get() == time:
            fire_time.clear()
            self._next(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self._state)
        next_fire = ctx.get_partitioned_state(self._state).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window: Any, ctx: Any) -> None:
        fire_time = ctx.get_partitioned_state(self._state)
        next_fire = fire_time.get()
        if next_fire is not None:
            if self._event_time:
                ctx.delete_event_time_timer(next_fire)
            else:
                ctx.delete_processing_time_timer(next_fire)
        fire_time.clear()


class ContinuousEventTimeTrigger(_Continuous):
    """Fires every `interval` of event time while the window is open, and at its end."""

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        if ctx.get_partitioned_state(self._state).get() is None:
            self._next(timestamp - timestamp % self.interval, window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        return self._on_timer(time, window, ctx)

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_Continuous):
    """Fires every `interval` of processing time while the window is open."""

    _event_time = False

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        if ctx.get_partitioned_state(self._state).get() is None:
            now = ctx.get_current_processing_time()
            self._next(now - now % self.interval, window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._on_timer(time, window, ctx)
