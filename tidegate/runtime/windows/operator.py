"""The window operator (Flink's `WindowOperator` and `EvictingWindowOperator` in one).

For each element, on the element's key:
1. the assigner gives its windows (for merging assigners, each is added to the key's
   MergingWindowSet, which may merge it with windows in flight: trigger state and contents
   merge, the merged windows' timers are deleted);
2. a window whose cleanup time (`max_timestamp + allowed_lateness`, event time) is at or below
   the watermark is skipped; an element all of whose windows were skipped is late: it goes to
   the late-data side output if one is set, else it is dropped (`num_late_records_dropped`);
3. the element is added to the window's contents, the trigger's `on_element` decides whether
   the window fires (the window function runs on the contents) and/or purges;
4. a cleanup timer is registered at the cleanup time.
Timers fire the trigger's `on_event_time` / `on_processing_time`; at a window's cleanup time
its contents, trigger state and merging-set entry are dropped.

Event-time tumbling and sliding windows with the default trigger take a batched path with the
same behaviour: slicing.py when pre-aggregated (reduce / aggregate), kept.py when they keep
their elements (process / apply, or an evictor); so do event-time session windows with the
default trigger, no evictor and no allowed lateness (sessions.py). Other event-time session
windows with the default trigger and no evictor take the steps above with the trigger and the
merging inlined (`_process_plain_session`, `_on_plain_session_timer`): the same state changes,
a fraction of the calls.

Everything is keyed state of the operator's backend (contents, trigger state, window state,
merging sets, timers), so windows checkpoint, restore and rescale with their keys. Outputs
carry the window's `max_timestamp()` as their timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.runtime.internal_timers import MAX_WATERMARK, TimeDomain, processing_time_ms
from tidegate.runtime.operators import StreamOperator
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction, make_contents
from tidegate.runtime.windows.contexts import ClockContext, TriggerContext, WindowContext
from tidegate.runtime.windows.kept import KeptWindows, kept_fits
from tidegate.runtime.windows.merging import MergingWindowSet
from tidegate.runtime.windows.sessions import SessionWindows, plain_sessions, sessions_fit
from tidegate.runtime.windows.slicing import SlicedWindows, sliced_size
from tidegate.runtime.windows.triggers import EventTimeTrigger
from tidegate.runtime.windows.window_state import WindowScope
from tidegate.runtime.windows.window_timers import WindowTimers
from tidegate.runtime.windows.windows import TimeWindow

#: module constants (an Enum member lookup costs an attribute descriptor call)
EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


@dataclass
class WindowSpec:
    """Everything `WindowedStream` collects before its function is given."""

    assigner: Any
    trigger: Any = None  # None: the assigner's default trigger
    evictor: Any = None
    allowed_lateness: int = 0
    late_data_tag: Any = None
    aggregation: Aggregation | None = None
    function: InternalWindowFunction = field(default_factory=lambda: InternalWindowFunction("pass"))


class WindowOperator(StreamOperator):
    """Windows on a keyed stream (window_all: one constant key, parallelism 1)."""

    tagged_outputs = True  # `yield tag, value` goes to a side output

    keyed = True

    def __init__(
        self,
        spec: WindowSpec,
        key_selector: Callable[[Any], Any],
        *,
        clock: Callable[[], int] = processing_time_ms,
        **kw: Any,
    ) -> None:
        user_function = spec.function.function
        if user_function is None and spec.aggregation is not None:
            user_function = spec.aggregation.function
        super().__init__(user_function, **kw)
        #: `yield tag, value` of a window function goes to a side output (no function: the
        #: pre-aggregated results themselves are emitted, never tagged)
        self.tagged_outputs = spec.function.kind != "pass"
        self.spec = spec
        self.key_selector = key_selector
        self.assigner = spec.assigner
        self.trigger = spec.trigger or spec.assigner.get_default_trigger()
        self.lateness = spec.allowed_lateness
        self._event_time = bool(self.assigner.is_event_time())
        self._plain_event_time = (
            self._event_time
            and type(self.trigger) is EventTimeTrigger
            and spec.evictor is None
            and not hasattr(self.assigner, "merge_windows")
        )
        #: event-time sessions (the merge rule of TimeWindow.merge_windows) with the default
        #: trigger and no evictor: merging and trigger inlined
        self._plain_session = plain_sessions(spec, self.trigger)
        slice_size = sliced_size(spec, self.trigger)
        #: tumbling/sliding event-time windows with pre-aggregation: one slice per element
        self.sliced = SlicedWindows(self, slice_size) if slice_size is not None else None
        #: the same windows keeping their elements (process/apply): batched, see kept.py
        self.kept = KeptWindows(self) if kept_fits(spec, self.trigger) else None
        #: event-time sessions without allowed lateness: batched, see sessions.py
        self.sessions = SessionWindows(self) if sessions_fit(spec, self.trigger) else None
        #: the batched path taken (sliced, kept or sessions), None: element by element
        self.batched: SlicedWindows | KeptWindows | SessionWindows | None = (
            self.sliced or self.kept or self.sessions
        )
        self.clock = clock
        self.merging: MergingWindowSet | None = None
        self.num_late_records_dropped = 0
        self._out: list[Any] = []
        self._out_ts: list[int] = []
        if hasattr(self.assigner, "merge_windows") and not self.trigger.can_merge():
            raise ValueError(
                f"{type(self.assigner).__name__} merges windows, but the trigger "
                f"{type(self.trigger).__name__} cannot merge: give it can_merge() and on_merge()"
            )

    def open(self) -> None:
        backend = self.keyed_backend
        batched = self.batched
        on_timer = self._on_plain_session_timer if self._plain_session else self._on_timer
        if batched is not None:
            on_timer = None
        derived = None if batched is None else batched.on_timer
        self.timers = WindowTimers(
            backend, on_timer, self._flush, self.clock, derived=derived, unmapped=self._unmapped
        )
        self.timers.internal.batch = self.ctx.batch
        self.timers.internal.current_watermark = self.current_watermark  # a restored one
        spec = self.spec
        if hasattr(self.assigner, "merge_windows"):
            self.merging = MergingWindowSet(self.assigner, backend)
        if batched is not None:
            batched.open()
        else:
            self.contents = make_contents(backend, spec.aggregation, spec.evictor is not None)
        self.trigger_scope = WindowScope(backend, "__trigger__")
        self.window_state_scope = WindowScope(backend, "__window_state__")
        self.trigger_ctx = TriggerContext(self)
        self.window_ctx = WindowContext(self)
        self.clock_ctx = ClockContext(self)
        super().open()

    # elements ----------------------------------------------------------------------------------
    def process_batch(self, records: list) -> None:
        backend, select = self.keyed_backend, self.key_selector
        timestamps = timestamps_of(records)
        if self.batched is not None:
            if timestamps is None and records:  # the assigner raises: records need timestamps
                self.assigner.assign_windows(records[0], None, self.clock_ctx)
            self.batched.process(records, timestamps or [])
        elif timestamps is None:
            for r in records:
                backend.current_key = select(r)
                self._process_element(r, None)
        else:
            for r, t in zip(records, timestamps, strict=True):
                backend.current_key = select(r)
                self._process_element(r, t)
        self._flush()

    def _process_element(self, value: Any, timestamp: int | None) -> None:
        if self._plain_event_time:
            self._process_plain_event_time(value, timestamp)
            return
        if self._plain_session:
            self._process_plain_session(value, timestamp)
            return
        windows = self.assigner.assign_windows(value, timestamp, self.clock_ctx)
        skipped = True
        for window in windows:
            if self.merging is not None:
                window = self.merging.add_window(window, self._merge)
                if self._is_window_late(window):
                    self.merging.retire_window(window)
                    continue
                state_window = self.merging.get_state_window(window)
            elif self._is_window_late(window):
                continue
            else:
                state_window = window
            skipped = False
            self.contents.add(state_window, value, timestamp)
            ctx = self.trigger_ctx
            ctx.window = window
            result = self.trigger.on_element(value, timestamp, window, ctx)
            self._act(result, window, state_window)
            self._register_cleanup_timer(window)
        if skipped and self._is_element_late(timestamp):
            self.late_element(value, timestamp)

    def late_element(self, value: Any, timestamp: int | None) -> None:
        """An element too late for all its windows: to the late-data output, or dropped."""
        if self.spec.late_data_tag is not None:
            self.side_outputs.collect(self.spec.late_data_tag, value, timestamp)
        else:
            self.num_late_records_dropped += 1

    def _process_plain_event_time(self, value: Any, timestamp: int | None) -> None:
        """`_process_element` for the most common windows, with the default EventTimeTrigger
        inlined (same behaviour, a fraction of the calls): event-time assigner, no merging, no
        evictor. Its trigger timer and the cleanup timer are one timer when there is no
        allowed lateness."""
        watermark, lateness = self.current_watermark, self.lateness
        register, add = self.timers.register, self.contents.add
        skipped = True
        for window in self.assigner.assign_windows(value, timestamp, self.clock_ctx):
            end = window.max_timestamp()
            if end + lateness <= watermark:
                continue  # late for this window
            skipped = False
            add(window, value, timestamp)
            if end <= watermark:
                self._fire(window, window)  # a late firing within the allowed lateness
            else:
                register(EVENT, end, window)
            if lateness:
                register(EVENT, min(end + lateness, MAX_WATERMARK), window)
        if skipped and self._is_element_late(timestamp):
            self.late_element(value, timestamp)

    def _process_plain_session(self, value: Any, timestamp: int | None) -> None:
        """`_process_element` for event-time sessions with the default trigger and no evictor:
        MergingWindowSet.add_window, `_merge` and EventTimeTrigger inlined, with the same
        state changes. In-flight windows of a key never touch each other (any that did were
        merged), so the new window merges with exactly those it touches, into their cover."""
        watermark, lateness = self.current_watermark, self.lateness
        mapping, timers = self.merging.mapping, self.timers  # type: ignore[union-attr]
        skipped = True
        for new in self.assigner.assign_windows(value, timestamp, self.clock_ctx):
            start, end = new
            touched = [w for w in mapping if w[0] <= end and w[1] >= start]
            merged = False  # whether windows merged (the trigger's on_merge set the timer)
            if not touched:
                if min(end - 1 + lateness, MAX_WATERMARK) <= watermark:
                    continue  # late for its only window
                mapping.put(new, new)
                window = state_window = new
            else:
                touched.sort()
                window = TimeWindow(min(start, touched[0][0]), max(end, max(w[1] for w in touched)))
                if len(touched) == 1 and touched[0] == window:  # inside an in-flight window
                    state_window = mapping.get(window)
                else:
                    merged = True
                    # the merged contents stay under the earliest merged window's state window
                    state_windows = [mapping.get(w) for w in touched]
                    state_window = state_windows[0]
                    for w in touched:
                        mapping.remove(w)
                    mapping.put(window, state_window)
                    # the trigger's on_merge and clear, the cleanup timers, the contents (the
                    # result cannot be late: it covers a window in flight)
                    if window[1] - 1 > watermark:
                        timers.register(EVENT, window[1] - 1, window)
                    for w in touched:
                        timers.delete(EVENT, w[1] - 1, w)
                        if lateness and w[1] - 1 + lateness < MAX_WATERMARK:
                            timers.delete(EVENT, w[1] - 1 + lateness, w)
                    self.contents.merge(state_window, state_windows[1:])
            skipped = False
            self.contents.add(state_window, value, timestamp)
            last = window[1] - 1
            if last <= watermark:
                self._fire(window, state_window)  # a late firing within the allowed lateness
            elif not merged:
                timers.register(EVENT, last, window)
            if lateness and last + lateness < MAX_WATERMARK:
                timers.register(EVENT, last + lateness, window)
        if skipped and self._is_element_late(timestamp):
            self.late_element(value, timestamp)

    def _act(self, result: Any, window: Any, state_window: Any) -> None:
        if result.is_fire():
            self._fire(window, state_window)
        if result.is_purge():
            self.contents.clear(state_window)

    def _merge(self, result: Any, merged: set[Any], state_window: Any, merged_states: list) -> None:
        """MergingWindowSet's merge function: trigger and contents follow the merge."""
        if self._event_time and self._cleanup_time(result) <= self.current_watermark:
            raise RuntimeError(
                f"merging windows {sorted(merged)} into {result} would put its end at or below "
                f"the watermark {self.current_watermark}; a merging assigner must not shrink "
                "windows"
            )
        ctx = self.trigger_ctx
        ctx.window, ctx.merged_windows = result, sorted(merged)
        self.trigger.on_merge(result, ctx)
        ctx.merged_windows = []
        for window in sorted(merged):
            ctx.window = window
            self.trigger.clear(window, ctx)
            self._delete_cleanup_timer(window)
        self.contents.merge(state_window, merged_states)

    # firing ------------------------------------------------------------------------------------
    def _fire(self, window: Any, state_window: Any) -> None:
        evictor = self.spec.evictor
        inputs = self.contents.inputs(state_window, evictor, self.clock_ctx)
        if inputs is None:
            return  # an empty window does not fire (as in Flink)
        self.emit_window(window, inputs)
        self.contents.after_fire(state_window, evictor, self.clock_ctx)

    def emit_window(self, window: Any, inputs: list[Any]) -> None:
        """The window function on `inputs`; its outputs carry the window's max timestamp."""
        ctx = self.window_ctx
        ctx._set_window(window)
        produced = self.spec.function(self.keyed_backend.current_key, window, ctx, inputs)
        if produced is not None:
            out = self._out
            before = len(out)
            out.extend(produced)
            self._out_ts.extend([window.max_timestamp()] * (len(out) - before))

    def _on_timer(self, window: Any, timestamp: int, domain: TimeDomain) -> None:
        """A timer of `window` fired, with the timer's key current."""
        if self.merging is not None:
            state_window = self.merging.get_state_window(window)
            if state_window is None:
                return  # the window merged into another or is gone: a stale timer
        else:
            state_window = window
        ctx = self.trigger_ctx
        ctx.window = window
        event_time = domain is EVENT
        if event_time:
            result = self.trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timestamp, window, ctx)
        self._act(result, window, state_window)
        if event_time == self._event_time and timestamp == self._cleanup_time(window):
            self._clear_all(window, state_window)

    def _on_plain_session_timer(self, window: Any, timestamp: int, domain: TimeDomain) -> None:
        """`_on_timer` of `_process_plain_session`'s windows, EventTimeTrigger inlined: fire at
        the window's max timestamp, clear at its cleanup time. (The trigger's `clear` would
        delete the timer at the max timestamp, which has fired by then.)"""
        if domain is not EVENT:
            return  # the trigger ignores processing time; cleanup is in event time
        state_window = self.merging.mapping.get(window)  # type: ignore[union-attr]
        if state_window is None:
            return  # the window merged into another or is gone: a stale timer
        last = window[1] - 1
        if timestamp == last:
            self._fire(window, state_window)
        if timestamp == min(last + self.lateness, MAX_WATERMARK):
            self.contents.clear(state_window)
            self.clear_window_function(window)
            self.merging.mapping.remove(window)  # type: ignore[union-attr]

    def _unmapped(self, timestamp: int, domain: TimeDomain) -> tuple[Any, ...]:
        """The windows of a restored timer of a batched path (no window-timer entry): for
        tumbling/sliding assigners, the window ending at `timestamp` and the one whose cleanup
        time it is, if the key has contents in them; for sessions, the key's windows in flight
        ending or cleaned up then."""
        if domain is not EVENT:
            return ()
        if self.merging is not None:
            return tuple(
                w
                for w in self.merging.windows()
                if w.max_timestamp() == timestamp or self._cleanup_time(w) == timestamp
            )
        size = getattr(self.assigner, "size", None)
        if size is None:
            return ()
        slide, offset = getattr(self.assigner, "slide", size), self.assigner.offset
        starts = dict.fromkeys(
            s for s in (timestamp + 1 - size, timestamp + 1 - size - self.lateness)
        )
        return tuple(
            w
            for w in (TimeWindow(s, s + size) for s in starts if (s - offset) % slide == 0)
            if self.contents.contains(w)
        )

    def _clear_all(self, window: Any, state_window: Any) -> None:
        self.contents.clear(state_window)
        ctx = self.trigger_ctx
        ctx.window = window
        self.trigger.clear(window, ctx)
        self.clear_window_function(window)
        if self.merging is not None:
            self.merging.retire_window(window)

    def clear_window_function(self, window: Any) -> None:
        """`window` is gone: ProcessWindowFunction.clear(context)."""
        self.window_ctx._set_window(window)
        self.spec.function.clear(self.window_ctx)

    def _flush(self) -> None:
        if self._out:
            out, out_ts = self._out, self._out_ts
            self._out, self._out_ts = [], []
            self.emit(TimestampedBatch(out, out_ts))
        self.side_outputs.flush()

    # time --------------------------------------------------------------------------------------
    def _cleanup_time(self, window: Any) -> int:
        end = window.max_timestamp()
        if not self._event_time:
            return end
        return min(end + self.lateness, MAX_WATERMARK)

    def _is_window_late(self, window: Any) -> bool:
        return self._event_time and self._cleanup_time(window) <= self.current_watermark

    def _is_element_late(self, timestamp: int | None) -> bool:
        return (
            self._event_time
            and timestamp is not None
            and timestamp + self.lateness <= self.current_watermark
        )

    def _cleanup_timer(self, window: Any) -> tuple[TimeDomain, int] | None:
        """(domain, time) of `window`'s cleanup timer; None for global/count windows."""
        time = self._cleanup_time(window)
        if time == MAX_WATERMARK:
            return None
        return (EVENT if self._event_time else PROCESSING), time

    def _register_cleanup_timer(self, window: Any) -> None:
        timer = self._cleanup_timer(window)
        if timer is not None:
            self.timers.register(*timer, window)

    def _delete_cleanup_timer(self, window: Any) -> None:
        timer = self._cleanup_timer(window)
        if timer is not None:
            self.timers.delete(*timer, window)

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int, savepoint: bool = False) -> Any:
        # before the keyed snapshot shares the accumulators
        (self.contents if self.batched is None else self.batched).on_snapshot()
        return super().snapshot_state(checkpoint_id, timestamp_ms, savepoint)

    def on_watermark(self, watermark: int) -> None:
        if self.batched is None:
            self.timers.advance_watermark(watermark)
        else:
            self.batched.advance(watermark)
            self._flush()

    def finish(self) -> None:
        if self.batched is None:
            self.timers.end_of_input()  # processing-time timers stay pending, as in Flink
        else:  # only event-time timers: the end of input fires them all
            self.timers.internal.quiesced = True
            self.batched.advance(MAX_WATERMARK)
            self._flush()
        super().finish()
