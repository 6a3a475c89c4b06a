"""The window operator with user code: process window functions and their state, custom and
continuous triggers, evictors, window_all functions, and in-place reduce/aggregate functions
kept apart from snapshots (scripted elements, watermarks and processing time)."""

from __future__ import annotations

from test_window_operator import SumProcess, sum_spec
from window_harness import (
    Harness,
    window_state_backend,  # noqa: F401 (autouse: both state backends)
)

from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.windows.assigners import (
    GlobalWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.operator import WindowSpec
from tidegate.runtime.windows.triggers import CountTrigger
from tidegate.runtime.windows.windows import CountWindow, TimeWindow


class FiringsPerWindow:
    """Counts its firings per window in window_state and per key in global_state; clear()
    drops the window's count."""

    def __init__(self):
        from tidegate.state.descriptors import ValueStateDescriptor

        self.desc = ValueStateDescriptor("firings")
        self.total = ValueStateDescriptor("total")
        self.cleared = []

    def process(self, key, context, elements):
        firings = context.window_state().get_state(self.desc)
        firings.update((firings.value() or 0) + 1)
        total = context.global_state().get_state(self.total)
        total.update((total.value() or 0) + 1)
        yield (key, context.window().start, firings.value(), total.value(), len(elements))
        assert context.current_watermark() >= context.window().max_timestamp()

    def clear(self, context):
        self.cleared.append(context.window())
        context.window_state().get_state(self.desc).clear()


def test_a_process_window_function_keeps_per_window_and_per_key_state_and_clears_it():
    function = FiringsPerWindow()
    spec = WindowSpec(
        TumblingEventTimeWindows.of(10),
        allowed_lateness=100,
        function=InternalWindowFunction("process", function),
    )
    h = Harness(spec)
    h.add(("a", 1, 1))
    h.watermark(9)
    h.add(("a", 2, 2))  # a late firing of [0,10): its second
    h.add(("a", 3, 12))
    h.watermark(19)
    assert h.out.values() == [("a", 0, 1, 1, 1), ("a", 0, 2, 2, 2), ("a", 10, 1, 3, 1)]
    h.watermark(200)
    assert function.cleared == [TimeWindow(0, 10), TimeWindow(10, 20)]
    backend = h.op.keyed_backend
    assert list(backend.entries("__window_state__:firings")) == []
    assert list(backend.entries("total")) == [("a", 3)]


class EveryOtherElement(CountTrigger):
    """A custom trigger: fires on every second element and at the window end."""

    def __init__(self):
        super().__init__(2)

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_event_time_timer(window.max_timestamp())
        return super().on_element(element, timestamp, window, ctx)

    def on_event_time(self, time, window, ctx):
        from tidegate.runtime.windows.triggers import TriggerResult

        return (
            TriggerResult.FIRE_AND_PURGE
            if time == window.max_timestamp()
            else (TriggerResult.CONTINUE)
        )

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())
        super().clear(window, ctx)


def test_a_custom_trigger_fires_early_and_at_the_end_of_the_window():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), trigger=EveryOtherElement()))
    h.add(("a", 1, 1), ("a", 2, 2), ("a", 4, 3))
    assert h.out.values() == [("a", 3)]
    h.watermark(9)
    assert h.out.values() == [("a", 3), ("a", 7)]
    h.watermark(20)
    assert h.out.values() == [("a", 3), ("a", 7)]


def test_a_time_evictor_drops_old_elements_before_the_window_function():
    from tidegate.runtime.windows.evictors import TimeEvictor

    spec = WindowSpec(
        TumblingEventTimeWindows.of(100),
        evictor=TimeEvictor.of(10),
        function=InternalWindowFunction("process", SumProcess()),
    )
    h = Harness(spec)
    h.add(("a", 1, 5), ("a", 2, 50), ("a", 4, 55), ("a", 8, 60))
    h.watermark(99)
    assert h.out.values() == [("a", 0, 100, 12, 2)]  # only 55 and 60 are within 10 of 60


def test_processing_time_sessions_with_a_dynamic_gap_merge_and_fire_on_the_clock():
    from tidegate.runtime.windows.assigners import ProcessingTimeSessionWindows

    spec = WindowSpec(
        ProcessingTimeSessionWindows.with_dynamic_gap(lambda e: e[1] * 10),
        function=InternalWindowFunction("process", SumProcess()),
    )
    h = Harness(spec)
    h.clock.now = 100
    h.add(("a", 2, None))  # [100, 120)
    h.clock.now = 115
    h.add(("a", 1, None))  # [115, 125): merges into [100, 125)
    h.processing_time(123)
    assert h.out.values() == []
    h.processing_time(124)
    assert h.out.values() == [("a", 100, 125, 3, 2)]


def test_window_all_functions_get_no_key():
    class AllSum:
        def process(self, context, elements):
            yield (context.window().start, sum(v for _, v in elements))

    spec = WindowSpec(
        TumblingEventTimeWindows.of(10), function=InternalWindowFunction("all_process", AllSum())
    )
    h = Harness(spec)
    h.add(("a", 1, 1), ("b", 2, 2))
    h.watermark(9)
    assert sorted(h.out.values()) == [(0, 1), (0, 2)]  # the harness keys by r[0]


def test_a_continuous_event_time_trigger_fires_every_interval_and_at_the_window_end():
    from tidegate.runtime.windows.triggers import ContinuousEventTimeTrigger

    spec = WindowSpec(
        TumblingEventTimeWindows.of(10),
        trigger=ContinuousEventTimeTrigger.of(3),
        function=InternalWindowFunction("process", SumProcess()),
    )
    h = Harness(spec)
    h.add(("a", 1, 1), ("a", 2, 2))  # next firing at 0 + 3
    h.watermark(3)
    h.add(("a", 4, 4))
    h.watermark(6)
    h.watermark(9)
    assert h.out.values() == [
        ("a", 0, 10, 3, 2),  # at 3
        ("a", 0, 10, 7, 3),  # at 6
        ("a", 0, 10, 7, 3),  # at 9: the interval timer and the window end are one timer
    ]
    assert [n for n in h.op.keyed_backend._kinds if list(h.op.keyed_backend.entries(n))] == []


def test_a_continuous_processing_time_trigger_fires_every_interval_of_the_clock():
    from tidegate.runtime.windows.triggers import ContinuousProcessingTimeTrigger

    spec = sum_spec(GlobalWindows.create(), trigger=ContinuousProcessingTimeTrigger.of(100))
    h = Harness(spec)
    h.clock.now = 1_050
    h.add(("a", 1, None))
    h.processing_time(1_099)
    assert h.out.values() == []
    h.processing_time(1_100)
    h.add(("a", 2, None))
    h.processing_time(1_200)
    assert h.out.values() == [("a", 1), ("a", 3)]


class InPlaceSum:
    """A ReduceFunction that changes its first argument in place (allowed, as in Flink)."""

    def reduce(self, a, b):
        a[1][0] += b[1][0]
        return a


class ListAccumulator:
    """An AggregateFunction whose accumulator is a list changed in place."""

    def create_accumulator(self):
        return []

    def add(self, value, acc):
        acc.append(value[1])
        return acc

    def get_result(self, acc):
        return sorted(acc)

    def merge(self, a, b):
        a.extend(b)
        return a


def test_in_place_reduce_functions_keep_sliding_windows_apart_and_snapshots_intact(tmp_path):
    spec = WindowSpec(SlidingEventTimeWindows.of(10, 5), aggregation=Aggregation(InPlaceSum()))
    h = Harness(spec)
    h.add(("k", [1], 7))  # one element object in [0,10) and [5,15)
    restored = h.snapshot_to(tmp_path / "before.state")
    h.add(("k", [10], 8), ("k", [100], 12))
    h.watermark(MAX_WATERMARK)
    assert h.out.values() == [("k", [11]), ("k", [111]), ("k", [100])]
    again = Harness(spec, restored=restored)  # the snapshot did not see the later changes
    again.watermark(MAX_WATERMARK)
    assert again.out.values() == [("k", [1]), ("k", [1])]


def test_in_place_accumulators_are_copied_once_per_snapshot_not_per_element(tmp_path):
    spec = WindowSpec(
        TumblingEventTimeWindows.of(100),
        aggregation=Aggregation(aggregate_function=ListAccumulator()),
    )
    h = Harness(spec)
    h.add(("k", 1, 1), ("k", 2, 2))
    restored = h.snapshot_to(tmp_path / "mid.state")
    h.add(("k", 3, 3))
    h.watermark(99)
    assert h.out.values() == [[1, 2, 3]]
    again = Harness(spec, restored=restored)
    again.watermark(99)
    assert again.out.values() == [[1, 2]]


def test_count_windows_number_each_keys_elements_and_fire_full_windows_only():
    from tidegate.runtime.windows.assigners import (
        CountSlidingWindowAssigner,
        CountTumblingWindowAssigner,
    )

    class Ids:
        def apply(self, key, window, inputs):
            yield (key, window.id, [v for _, v in inputs])

    tumbling = Harness(
        WindowSpec(
            CountTumblingWindowAssigner.of(2), function=InternalWindowFunction("apply", Ids())
        )
    )
    tumbling.add(*[("a", i, None) for i in range(5)], ("b", 9, None))
    assert tumbling.out.values() == [("a", 0, [0, 1]), ("a", 1, [2, 3])]
    sliding = Harness(
        WindowSpec(
            CountSlidingWindowAssigner.of(3, 2), function=InternalWindowFunction("apply", Ids())
        )
    )
    sliding.add(*[("a", i, None) for i in range(7)])
    # CountWindow(i) holds elements 2i .. 2i+2
    assert sliding.out.values() == [("a", 0, [0, 1, 2]), ("a", 1, [2, 3, 4]), ("a", 2, [4, 5, 6])]
    backend = sliding.op.keyed_backend
    elements = list(backend.entries("__window_elements__"))
    assert elements == [("a", [(CountWindow(3), ("a", 6), None)])]
