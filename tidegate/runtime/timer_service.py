"""What user functions see of timers (PyFlink's TimerService and on_timer context), and the glue
between an operator, its InternalTimerService (runtime/internal_timers.py) and the task's loop.

* `TimerService`: `ctx.timer_service()` of a keyed process function, for the current key.
* `NonKeyedTimerService`: the same on a non-keyed stream; reading the clocks works, setting a
  timer fails clearly (timers need a keyed stream, as in Flink).
* `OnTimerContext`: the `ctx` of `on_timer(timestamp, ctx)`.
* `OperatorTimers`: the timers of one keyed process operator; calls `on_timer` and sends its
  outputs downstream like those of `process_element`.
* `ChainTimers`: the task's hook: fires the chain's due processing-time timers between batches
  and says how long the loop may wait for input before the next one is due.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidegate.runtime.internal_timers import (
    MIN_WATERMARK,
    InternalTimerService,
    TimeDomain,
    processing_time_ms,
)
from tidegate.runtime.records import TimestampedBatch


class TimerService:
    """`ctx.timer_service()` in KeyedProcessFunction: timers of the current key (PyFlink's
    names). Timestamps are int milliseconds; a processing-time timer fires once the wall clock
    reaches it, an event-time timer once the watermark does."""

    __slots__ = ("_internal",)

    def __init__(self, internal: InternalTimerService) -> None:
        self._internal = internal

    def current_processing_time(self) -> int:
        return self._internal.clock()

    def current_watermark(self) -> int:
        return self._internal.current_watermark

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._internal.register(TimeDomain.PROCESSING_TIME, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._internal.register(TimeDomain.EVENT_TIME, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._internal.delete(TimeDomain.PROCESSING_TIME, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._internal.delete(TimeDomain.EVENT_TIME, timestamp)


class NonKeyedTimerService:
    """`ctx.timer_service()` of a ProcessFunction on a non-keyed stream."""

    __slots__ = ("_operator",)

    def __init__(self, operator: Any = None) -> None:
        self._operator = operator

    def current_processing_time(self) -> int:
        return processing_time_ms()

    def current_watermark(self) -> int:
        return getattr(self._operator, "current_watermark", MIN_WATERMARK)

    def _no_timers(self, *_args: Any) -> None:
        raise RuntimeError(
            "timers need a keyed stream: setting or deleting a timer is only supported in a "
            "KeyedProcessFunction (or a process function on a KeyedStream) — call "
            "key_by(...) before process(...)"
        )

    register_processing_time_timer = _no_timers
    register_event_time_timer = _no_timers
    delete_processing_time_timer = _no_timers
    delete_event_time_timer = _no_timers


class OnTimerContext:
    """The `ctx` of `on_timer(timestamp, ctx)`; one object, reused for every firing."""

    __slots__ = ("_backend", "_domain", "_service", "_side", "_timestamp")

    def __init__(self, backend: Any, service: TimerService, side: Any = None) -> None:
        self._backend = backend
        self._service = service
        self._side = side  # the operator's SideOutputCollector
        self._timestamp = 0
        self._domain = TimeDomain.PROCESSING_TIME

    def timestamp(self) -> int:
        """The firing timer's timestamp."""
        return self._timestamp

    def time_domain(self) -> TimeDomain:
        return self._domain

    def get_current_key(self) -> Any:
        return self._backend.current_key

    def timer_service(self) -> TimerService:
        return self._service

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit `value` to the side output `output_tag`; an event-time timer's outputs carry
        its timestamp, a processing-time timer's none (as in Flink)."""
        timestamp = self._timestamp if self._domain is TimeDomain.EVENT_TIME else None
        self._side.collect(output_tag, value, timestamp)


class OperatorTimers:
    """The timers of one keyed process operator subtask (`operator.keyed_backend` stores them).

    `operator.function.on_timer(timestamp, ctx)` runs with the timer's key current, so keyed
    state is the key's; what it yields goes to `operator.emit`, one batch per firing round.
    """

    def __init__(self, operator: Any, context_type: type[OnTimerContext] = OnTimerContext) -> None:
        """`context_type`: the class of `on_timer`'s ctx (a broadcast operator's adds its
        read-only broadcast state)."""
        self._operator = operator
        self._on_timer = getattr(operator.function, "on_timer", None)
        self._out: list[Any] = []
        #: timestamps of `_out` (event-time firings: each output has its timer's timestamp)
        self._out_ts: list[int] = []
        self.internal = InternalTimerService(operator.keyed_backend, self._trigger)
        self.internal.batch = operator.ctx.batch
        self.internal.current_watermark = operator.current_watermark  # timers below it fired
        self.service = TimerService(self.internal)
        self.context = context_type(operator.keyed_backend, self.service, _SideOf(operator))
        self.internal.restore()

    def _trigger(self, timestamp: int, domain: TimeDomain) -> None:
        if self._on_timer is None:
            return
        ctx = self.context
        ctx._timestamp, ctx._domain = timestamp, domain
        produced = self._on_timer(timestamp, ctx)
        if produced is not None:
            before = len(self._out)
            self._out.extend(produced)
            if domain is TimeDomain.EVENT_TIME:
                self._out_ts.extend([timestamp] * (len(self._out) - before))

    def _emit(self) -> None:
        """Send one firing round's outputs (one time domain per round, so the batch is either
        all timestamped or not at all), then its side outputs."""
        if self._out:
            out, self._out = self._out, []
            out_ts, self._out_ts = self._out_ts, []
            self._operator.emit(TimestampedBatch(out, out_ts) if out_ts else out)
        self._operator.side_outputs.flush()

    def fire_processing_timers(self) -> None:
        if self.internal.fire_processing_timers():
            self._emit()

    def advance_watermark(self, watermark: int) -> None:
        """Issue 5's entry point: the operator's watermark moved to `watermark`."""
        if self.internal.advance_watermark(watermark):
            self._emit()

    def end_of_input(self) -> None:
        if self.internal.end_of_input():
            self._emit()

    def next_processing_time(self) -> int | None:
        return self.internal.next_processing_time()


class _SideOf:
    """The side-output collector of an operator, looked up when used (the operator sets it up
    in `open`, after its timers exist)."""

    __slots__ = ("_operator",)

    def __init__(self, operator: Any) -> None:
        self._operator = operator

    def collect(self, tag: Any, value: Any, timestamp: int | None) -> None:
        self._operator.side_outputs.collect(tag, value, timestamp)


class ChainTimers:
    """The timers of a task's operator chain, for the task's input loop."""

    def __init__(self, operators: Sequence[Any]) -> None:
        self._timers: list[OperatorTimers] = [
            t for t in (getattr(op, "timers", None) for op in operators) if t is not None
        ]

    def __bool__(self) -> bool:
        return bool(self._timers)

    def fire_due(self) -> float | None:
        """Fire the chain's due processing-time timers; returns the seconds until the next one
        is due (0 if one already is), or None if no processing-time timer is pending."""
        next_due: int | None = None
        for timers in self._timers:
            timers.fire_processing_timers()
            due = timers.next_processing_time()
            if due is not None and (next_due is None or due < next_due):
                next_due = due
        if next_due is None:
            return None
        return max(next_due - self._timers[0].internal.clock(), 0) / 1000
