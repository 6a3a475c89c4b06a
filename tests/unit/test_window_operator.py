"""The window operator with scripted elements, watermarks and processing time: exact fired
results of every window function, triggers, evictors, lateness, late data, session merging,
and window state kept in keyed state across a snapshot and restore (real heap backend)."""

from __future__ import annotations

import pytest
from window_harness import Harness

from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.timers import MAX_WATERMARK
from tidegate.runtime.windows.assigners import (
    EventTimeSessionWindows,
    GlobalWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.evictors import CountEvictor
from tidegate.runtime.windows.operator import WindowSpec
from tidegate.runtime.windows.triggers import CountTrigger, PurgingTrigger
from tidegate.runtime.windows.windows import GlobalWindow, TimeWindow


def add_values(a, b):
    return (a[0], a[1] + b[1])


def sum_spec(assigner, **kw) -> WindowSpec:
    return WindowSpec(assigner, aggregation=Aggregation(add_values), **kw)


class SumProcess:
    """A ProcessWindowFunction: (key, window start, window end, sum, count)."""

    def process(self, key, context, elements):
        w = context.window()
        values = [v for _, v in elements]
        yield (key, w.start, w.end, sum(values), len(values))


def test_a_tumbling_event_time_window_fires_once_when_the_watermark_passes_its_end():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10)))
    h.add(("a", 1, 1), ("a", 2, 9), ("b", 5, 3), ("a", 4, 10))
    h.watermark(8)
    assert h.out.records == []
    h.watermark(9)
    assert sorted(h.out.records) == [(("a", 3), 9), (("b", 5), 9)]
    h.watermark(25)
    assert h.out.records[2:] == [(("a", 4), 19)]


def test_sliding_windows_each_get_every_element_in_their_range():
    h = Harness(sum_spec(SlidingEventTimeWindows.of(10, 5)))
    h.add(("k", 1, 3), ("k", 10, 7), ("k", 100, 12))
    h.watermark(MAX_WATERMARK)
    # windows [-5,5) [0,10) [5,15) [10,20): sums 1, 11, 110, 100
    assert [r for r, _ in sorted(h.out.records, key=lambda r: r[1])] == [
        ("k", 1),
        ("k", 11),
        ("k", 110),
        ("k", 100),
    ]


def test_a_process_window_function_sees_the_window_and_all_its_elements():
    h = Harness(
        WindowSpec(
            TumblingEventTimeWindows.of(10),
            function=InternalWindowFunction("process", SumProcess()),
        )
    )
    h.add(("a", 1, 1), ("a", 2, 2), ("b", 7, 15))
    h.watermark(MAX_WATERMARK)
    assert sorted(h.out.values()) == [("a", 0, 10, 3, 2), ("b", 10, 20, 7, 1)]


def test_incremental_aggregation_hands_the_window_function_only_the_aggregate():
    class Avg:
        def create_accumulator(self):
            return (0, 0)

        def add(self, value, acc):
            return (acc[0] + value[1], acc[1] + 1)

        def get_result(self, acc):
            return acc[0] / acc[1]

        def merge(self, a, b):
            return (a[0] + b[0], a[1] + b[1])

    class Tag:
        def apply(self, key, window, inputs):
            assert len(inputs) == 1
            yield (key, window.end, inputs[0])

    spec = WindowSpec(
        TumblingEventTimeWindows.of(10),
        aggregation=Aggregation(aggregate_function=Avg()),
        function=InternalWindowFunction("apply", Tag()),
    )
    h = Harness(spec)
    h.add(("a", 1, 1), ("a", 2, 2), ("a", 6, 3))
    h.watermark(9)
    assert h.out.values() == [("a", 10, 3.0)]


def test_late_elements_within_the_allowed_lateness_fire_the_window_again():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), allowed_lateness=5))
    h.add(("a", 1, 1))
    h.watermark(9)
    h.add(("a", 2, 4))  # late but within lateness: a late firing with the updated sum
    assert h.out.values() == [("a", 1), ("a", 3)]
    h.watermark(14)  # cleanup time 9 + 5: the window is gone
    h.add(("a", 4, 5))
    assert h.out.values() == [("a", 1), ("a", 3)]
    assert h.op.num_late_records_dropped == 1


def test_late_elements_go_to_the_late_data_side_output_with_their_timestamps():
    tag = OutputTag("late")
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), late_data_tag=tag))
    h.add(("a", 1, 1))
    h.watermark(20)
    h.add(("a", 2, 5), ("a", 3, 25))
    assert h.late.records == [(("a", 2), 5)]
    h.watermark(29)
    assert h.out.values() == [("a", 1), ("a", 3)]


def test_windows_of_several_keys_with_the_same_end_all_fire_and_their_state_is_cleaned():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10)))
    h.add(*[(f"k{i}", i, 5) for i in range(50)])
    h.watermark(9)
    assert sorted(h.out.values()) == sorted((f"k{i}", i) for i in range(50))
    backend = h.op.keyed_backend
    leftover = [n for n in backend._tables if backend.entries(n)]
    assert leftover == []


def test_processing_time_windows_fire_when_the_clock_passes_their_end():
    h = Harness(sum_spec(TumblingProcessingTimeWindows.of(100)))
    h.clock.now = 150
    h.add(("a", 1, None), ("a", 2, None))
    h.processing_time(198)
    assert h.out.values() == []
    h.processing_time(199)
    assert h.out.records == [(("a", 3), 199)]
    h.clock.now = 250
    h.add(("a", 5, None))
    h.processing_time(400)
    assert h.out.values() == [("a", 3), ("a", 5)]


def test_count_windows_fire_and_purge_every_n_elements_per_key():
    h = Harness(sum_spec(GlobalWindows.create(), trigger=PurgingTrigger.of(CountTrigger.of(3))))
    h.add(*[("a", i, None) for i in range(1, 8)], ("b", 10, None))
    assert h.out.values() == [("a", 6), ("a", 15)]
    assert h.out.records[0][1] == GlobalWindow().max_timestamp()


def test_a_sliding_count_window_keeps_the_last_n_elements_with_a_count_evictor():
    spec = WindowSpec(
        GlobalWindows.create(),
        trigger=CountTrigger.of(2),
        evictor=CountEvictor.of(3),
        aggregation=Aggregation(add_values),
    )
    h = Harness(spec)
    h.add(*[("a", i, None) for i in range(1, 8)])
    # fires after 2, 4, 6 elements on the last 3: 1+2, 2+3+4, 4+5+6
    assert h.out.values() == [("a", 3), ("a", 9), ("a", 15)]


def test_session_windows_merge_elements_closer_than_the_gap():
    spec = WindowSpec(
        EventTimeSessionWindows.with_gap(10),
        function=InternalWindowFunction("process", SumProcess()),
    )
    h = Harness(spec)
    h.add(("a", 1, 0), ("a", 2, 18), ("a", 4, 9))  # [9,19) bridges [0,10) and [18,28)
    h.add(("b", 7, 100))
    h.watermark(26)
    assert h.out.values() == []
    h.watermark(27)
    assert h.out.values() == [("a", 0, 28, 7, 3)]
    h.watermark(MAX_WATERMARK)
    assert h.out.values()[-1] == ("b", 100, 110, 7, 1)


def test_session_windows_merge_correctly_across_a_snapshot_and_restore(tmp_path):
    spec = sum_spec(EventTimeSessionWindows.with_gap(10))
    h = Harness(spec)
    h.add(("a", 1, 0), ("a", 2, 5))  # merged into [0,15): its state window stays [0,10)
    h.add(("a", 8, 22))  # a second session, [22,32)
    h.watermark(5)
    restored = h.snapshot_to(tmp_path / "sessions.state")
    again = Harness(spec, restored=restored)
    again.add(("a", 4, 14))  # [14,24) merges [0,15) and [22,32) after the restore
    again.watermark(MAX_WATERMARK)
    assert again.out.records == [(("a", 15), 31)]
    backend = again.op.keyed_backend
    assert [n for n in backend._tables if backend.entries(n)] == []


def test_a_restored_window_operator_fires_the_windows_that_were_open(tmp_path):
    spec = sum_spec(SlidingEventTimeWindows.of(10, 5))
    h = Harness(spec)
    h.add(("a", 1, 1), ("b", 2, 7))
    h.watermark(4)
    assert h.out.values() == [("a", 1)]
    restored = h.snapshot_to(tmp_path / "w.state")
    again = Harness(spec, restored=restored)
    again.watermark(MAX_WATERMARK)
    assert sorted(again.out.records, key=repr) == sorted(
        [(("a", 1), 9), (("b", 2), 9), (("b", 2), 14)], key=repr
    )


def test_rescaling_moves_every_window_to_the_subtask_that_owns_its_key(tmp_path):
    spec = sum_spec(TumblingEventTimeWindows.of(10))
    keys = [f"key-{i}" for i in range(60)]
    files = []
    for i in range(2):
        h = Harness(spec, subtask=i, parallelism=2)
        owned = h.op.keyed_backend.key_group_range
        from tidegate.state.keygroups import KeyGroupAssigner

        kg = KeyGroupAssigner(128)
        mine = [(k, n, 5) for n, k in enumerate(keys) if kg.key_group(k) in owned]
        h.add(*mine)
        files.append(h.snapshot_to(tmp_path / f"old-{i}.state"))

    def restored(key_groups):
        for f in files:
            yield from f(key_groups)

    restored.watermark = files[0].watermark  # type: ignore[attr-defined]
    fired = []
    for j in range(3):
        h = Harness(spec, subtask=j, parallelism=3, restored=restored)
        h.watermark(MAX_WATERMARK)
        fired.extend(h.out.values())
    assert sorted(fired) == sorted((k, n) for n, k in enumerate(keys))


def test_an_event_time_window_without_timestamps_fails_with_a_clear_error():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10)))
    with pytest.raises(ValueError, match="assign_timestamps_and_watermarks"):
        h.add(("a", 1, None))


def test_a_trigger_that_cannot_merge_is_refused_for_session_windows():
    with pytest.raises(ValueError, match="cannot merge"):
        Harness(sum_spec(EventTimeSessionWindows.with_gap(5), trigger=_NoMerge()))


class _NoMerge(CountTrigger):
    def __init__(self):
        super().__init__(1)

    def can_merge(self):
        return False


def test_the_end_of_input_fires_every_event_time_window():
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10)))
    h.add(("a", 1, 1), ("a", 1, 11))
    h.op.process_watermark(MAX_WATERMARK)
    h.op.finish()
    assert h.out.values() == [("a", 1), ("a", 1)]
    assert TimeWindow(0, 10).max_timestamp() == 9


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
    assert backend.entries("__window_state__:firings") == []
    assert backend.entries("total") == [("a", 3)]


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
    assert [n for n in h.op.keyed_backend._tables if h.op.keyed_backend.entries(n)] == []


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
