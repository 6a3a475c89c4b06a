"""Window assigners, triggers, evictors and the merging window set, each on its own: exact
windows, trigger results and timers, evicted elements, merge results and state windows."""

from __future__ import annotations

import pytest

from tidegate.common.time import Duration, Time
from tidegate.datastream.window import (
    CountEvictor,
    CountTrigger,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimestampedValue,
    TimeWindow,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from tidegate.runtime.windows.merging import MERGING_STATE, MergingWindowSet
from tidegate.runtime.windows.window_state import WindowScope
from tidegate.state.heap import HeapKeyedStateBackend


class Clock:
    def __init__(self, now: int = 0, watermark: int = -(2**63)) -> None:
        self.now, self.watermark = now, watermark

    def get_current_processing_time(self) -> int:
        return self.now


def test_tumbling_windows_align_to_the_epoch_plus_the_offset():
    assigner = TumblingEventTimeWindows.of(Time.seconds(1))
    assert assigner.assign_windows("x", 1_500, None) == [TimeWindow(1_000, 2_000)]
    assert assigner.assign_windows("x", -1, None) == [TimeWindow(-1_000, 0)]
    shifted = TumblingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(30))
    assert shifted.assign_windows("x", 129, None) == [TimeWindow(30, 130)]
    assert shifted.assign_windows("x", 130, None) == [TimeWindow(130, 230)]
    assert assigner.is_event_time() and isinstance(assigner.get_default_trigger(), EventTimeTrigger)


def test_processing_time_assigners_use_the_clock_not_the_timestamp():
    clock = Clock(now=250)
    assigner = TumblingProcessingTimeWindows.of(Duration.of_millis(100))
    assert assigner.assign_windows("x", 9_999, clock) == [TimeWindow(200, 300)]
    assert not assigner.is_event_time()
    assert isinstance(assigner.get_default_trigger(), ProcessingTimeTrigger)
    sliding = SlidingProcessingTimeWindows.of(100, 50)
    assert sliding.assign_windows("x", None, clock) == [TimeWindow(250, 350), TimeWindow(200, 300)]


def test_sliding_windows_give_every_window_that_holds_the_timestamp():
    assigner = SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(3))
    assert assigner.assign_windows("x", 7, None) == [
        TimeWindow(6, 16),
        TimeWindow(3, 13),
        TimeWindow(0, 10),
    ]
    assert len(SlidingEventTimeWindows.of(10, 5).assign_windows("x", 5, None)) == 2


def test_session_windows_start_at_the_element_and_last_one_gap():
    assert EventTimeSessionWindows.with_gap(Time.milliseconds(10)).assign_windows("x", 5, None) == [
        TimeWindow(5, 15)
    ]
    dynamic = EventTimeSessionWindows.with_dynamic_gap(lambda e: e["gap"])
    assert dynamic.assign_windows({"gap": 3}, 5, None) == [TimeWindow(5, 8)]
    clock = Clock(now=100)
    assert ProcessingTimeSessionWindows.with_gap(5).assign_windows("x", None, clock) == [
        TimeWindow(100, 105)
    ]


def test_global_windows_put_everything_in_one_window_that_never_fires_by_default():
    assigner = GlobalWindows.create()
    assert assigner.assign_windows("x", None, None) == [GlobalWindow()]
    assert isinstance(assigner.get_default_trigger(), NeverTrigger)
    assert GlobalWindow().max_timestamp() == CountWindow(3).max_timestamp() == 2**63 - 1


def test_bad_sizes_fail_with_clear_errors():
    with pytest.raises(ValueError, match="size > 0"):
        TumblingEventTimeWindows.of(Time.milliseconds(0))
    with pytest.raises(ValueError, match="offset"):
        SlidingEventTimeWindows.of(10, 5, 5)
    with pytest.raises(TypeError, match=r"Time\.seconds"):
        TumblingEventTimeWindows.of("5s")
    with pytest.raises(ValueError, match="gap"):
        EventTimeSessionWindows.with_gap(0)
    with pytest.raises(ValueError, match="timestamps"):
        TumblingEventTimeWindows.of(10).assign_windows("x", None, None)


def test_time_windows_merge_when_they_overlap_or_touch():
    merges = []
    windows = [TimeWindow(0, 5), TimeWindow(5, 8), TimeWindow(10, 12), TimeWindow(11, 20)]
    windows.append(TimeWindow(30, 31))
    TimeWindow.merge_windows(windows, lambda merged, result: merges.append((merged, result)))
    assert merges == [
        ({TimeWindow(0, 5), TimeWindow(5, 8)}, TimeWindow(0, 8)),
        ({TimeWindow(10, 12), TimeWindow(11, 20)}, TimeWindow(10, 20)),
    ]


# triggers -----------------------------------------------------------------------------------
class TriggerCtx:
    """A trigger context over real window-scoped state, recording timer calls."""

    def __init__(self, window, watermark=-(2**63), now=0) -> None:
        backend = HeapKeyedStateBackend(128, range(128))
        backend.current_key = "k"
        self.scope = WindowScope(backend, "__trigger__")
        self.scope.window = window
        self.watermark, self.now, self.calls = watermark, now, []
        self.merged_windows: list = []

    def get_current_watermark(self):
        return self.watermark

    def get_current_processing_time(self):
        return self.now

    def register_event_time_timer(self, t):
        self.calls.append(("+E", t))

    def delete_event_time_timer(self, t):
        self.calls.append(("-E", t))

    def register_processing_time_timer(self, t):
        self.calls.append(("+P", t))

    def delete_processing_time_timer(self, t):
        self.calls.append(("-P", t))

    def get_partitioned_state(self, descriptor):
        return self.scope.get_state(descriptor)

    def merge_partitioned_state(self, descriptor):
        self.scope.merge_into(descriptor, self.scope.window, self.merged_windows)


def test_the_event_time_trigger_sets_a_timer_at_the_window_end_and_fires_on_it():
    w, trigger = TimeWindow(0, 10), EventTimeTrigger.create()
    ctx = TriggerCtx(w)
    assert trigger.on_element("x", 3, w, ctx) is TriggerResult.CONTINUE
    assert ctx.calls == [("+E", 9)]
    assert trigger.on_event_time(9, w, ctx) is TriggerResult.FIRE
    assert trigger.on_event_time(14, w, ctx) is TriggerResult.CONTINUE  # a cleanup timer
    late = TriggerCtx(w, watermark=9)
    assert trigger.on_element("x", 3, w, late) is TriggerResult.FIRE
    trigger.clear(w, ctx)
    assert ctx.calls[-1] == ("-E", 9)


def test_the_processing_time_trigger_fires_on_its_processing_time_timer():
    w, trigger = TimeWindow(0, 10), ProcessingTimeTrigger.create()
    ctx = TriggerCtx(w)
    assert trigger.on_element("x", None, w, ctx) is TriggerResult.CONTINUE
    assert ctx.calls == [("+P", 9)]
    assert trigger.on_processing_time(9, w, ctx) is TriggerResult.FIRE
    assert trigger.on_event_time(9, w, ctx) is TriggerResult.CONTINUE


def test_the_count_trigger_fires_every_n_elements_and_counts_per_window():
    w, trigger = GlobalWindow(), CountTrigger.of(3)
    ctx = TriggerCtx(w)
    results = [trigger.on_element(i, None, w, ctx) for i in range(7)]
    assert [r.is_fire() for r in results] == [False, False, True, False, False, True, False]
    purging = PurgingTrigger.of(CountTrigger.of(2))
    assert purging.on_element(0, None, w, TriggerCtx(w)) is TriggerResult.CONTINUE
    ctx2 = TriggerCtx(w)
    purging.on_element(0, None, w, ctx2)
    assert purging.on_element(1, None, w, ctx2) is TriggerResult.FIRE_AND_PURGE


def test_the_count_trigger_merges_the_counts_of_merged_windows():
    a, b, merged = TimeWindow(0, 5), TimeWindow(4, 9), TimeWindow(0, 9)
    trigger, ctx = CountTrigger.of(4), TriggerCtx(a)
    trigger.on_element(1, 0, a, ctx)
    ctx.scope.window = b
    trigger.on_element(2, 4, b, ctx)
    trigger.on_element(3, 5, b, ctx)
    ctx.scope.window, ctx.merged_windows = merged, [a, b]
    trigger.on_merge(merged, ctx)
    assert trigger.on_element(4, 6, merged, ctx) is TriggerResult.FIRE


def test_trigger_results_say_whether_they_fire_and_purge():
    assert [(r.is_fire(), r.is_purge()) for r in TriggerResult] == [
        (False, False),
        (True, True),
        (True, False),
        (False, True),
    ]


# evictors -----------------------------------------------------------------------------------
def stamped(*pairs):
    return [TimestampedValue(v, t) for v, t in pairs]


def test_the_count_evictor_keeps_the_last_elements_before_or_after_the_function():
    elements = stamped(*[(i, i) for i in range(5)])
    CountEvictor.of(2).evict_before(elements, 5, None, None)
    assert [e.value for e in elements] == [3, 4]
    after = stamped(*[(i, i) for i in range(5)])
    evictor = CountEvictor.of(2, do_evict_after=True)
    evictor.evict_before(after, 5, None, None)
    assert len(after) == 5
    evictor.evict_after(after, 5, None, None)
    assert [e.value for e in after] == [3, 4]


def test_the_time_evictor_keeps_the_elements_within_its_size_of_the_newest():
    elements = stamped(("a", 1), ("b", 5), ("c", 9), ("d", 10))
    TimeEvictor.of(Time.milliseconds(5)).evict_before(elements, 4, None, None)
    assert [e.value for e in elements] == ["c", "d"]
    untimed = stamped(("a", None), ("b", None))
    TimeEvictor.of(5).evict_before(untimed, 2, None, None)
    assert len(untimed) == 2


# merging window set -------------------------------------------------------------------------
def merging_set():
    backend = HeapKeyedStateBackend(128, range(128))
    backend.current_key = "k"
    return MergingWindowSet(EventTimeSessionWindows.with_gap(10), backend), backend


def test_a_window_that_merges_nothing_is_its_own_state_window():
    windows, _ = merging_set()
    calls = []
    assert windows.add_window(TimeWindow(0, 10), lambda *a: calls.append(a)) == TimeWindow(0, 10)
    assert windows.get_state_window(TimeWindow(0, 10)) == TimeWindow(0, 10)
    assert calls == []


def test_merged_windows_keep_one_state_window_and_report_the_others():
    windows, backend = merging_set()
    calls = []
    windows.add_window(TimeWindow(0, 10), lambda *a: calls.append(a))
    windows.add_window(TimeWindow(20, 30), lambda *a: calls.append(a))
    result = windows.add_window(TimeWindow(8, 22), lambda *a: calls.append(a))
    assert result == TimeWindow(0, 30)
    assert windows.windows() == [TimeWindow(0, 30)]
    assert windows.get_state_window(result) == TimeWindow(0, 10)
    [(merge_result, merged, state_window, merged_states)] = calls
    assert merge_result == TimeWindow(0, 30)
    assert merged == {TimeWindow(0, 10), TimeWindow(20, 30)}
    assert (state_window, merged_states) == (TimeWindow(0, 10), [TimeWindow(20, 30)])
    assert backend.entries(MERGING_STATE) == [("k", {TimeWindow(0, 30): TimeWindow(0, 10)})]


def test_a_window_inside_an_existing_one_changes_nothing():
    windows, _ = merging_set()
    windows.add_window(TimeWindow(0, 10), lambda *a: None)
    calls = []
    assert windows.add_window(TimeWindow(2, 8), lambda *a: calls.append(a)) == TimeWindow(0, 10)
    assert calls == [] and windows.windows() == [TimeWindow(0, 10)]
    windows.retire_window(TimeWindow(0, 10))
    assert windows.windows() == []
