"""The window operator with scripted elements, watermarks and processing time: exact fired
results of every window function, triggers, evictors, lateness, late data, session merging,
and window state kept in keyed state across a snapshot and restore (real heap backend)."""

from __future__ import annotations

import pytest
from window_harness import (
    Harness,
    SumProcess,
    add_values,
    sum_spec,
    window_state_backend,  # noqa: F401 (autouse: both state backends)
)

from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.internal_timers import MAX_WATERMARK
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
from tidegate.runtime.windows.triggers import CountTrigger, EventTimeTrigger, PurgingTrigger
from tidegate.runtime.windows.windows import GlobalWindow, TimeWindow


class GenericEventTimeTrigger(EventTimeTrigger):
    """The default trigger, but through the operator's generic path (its inlined fast path is
    taken for exactly EventTimeTrigger): both must behave the same."""


#: the default trigger (the operator's fast path) and the same trigger the generic way
EVENT_TIME_TRIGGERS = pytest.mark.parametrize(
    "trigger", [None, GenericEventTimeTrigger()], ids=["inlined", "generic"]
)


@EVENT_TIME_TRIGGERS
def test_a_tumbling_event_time_window_fires_once_when_the_watermark_passes_its_end(trigger):
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), trigger=trigger))
    h.add(("a", 1, 1), ("a", 2, 9), ("b", 5, 3), ("a", 4, 10))
    h.watermark(8)
    assert h.out.records == []
    h.watermark(9)
    assert sorted(h.out.records) == [(("a", 3), 9), (("b", 5), 9)]
    h.watermark(25)
    assert h.out.records[2:] == [(("a", 4), 19)]


@EVENT_TIME_TRIGGERS
def test_sliding_windows_each_get_every_element_in_their_range(trigger):
    h = Harness(sum_spec(SlidingEventTimeWindows.of(10, 5), trigger=trigger))
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


@EVENT_TIME_TRIGGERS
def test_late_elements_within_the_allowed_lateness_fire_the_window_again(trigger):
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), allowed_lateness=5, trigger=trigger))
    h.add(("a", 1, 1))
    h.watermark(9)
    h.add(("a", 2, 4))  # late but within lateness: a late firing with the updated sum
    assert h.out.values() == [("a", 1), ("a", 3)]
    h.watermark(14)  # cleanup time 9 + 5: the window is gone
    h.add(("a", 4, 5))
    assert h.out.values() == [("a", 1), ("a", 3)]
    assert h.op.num_late_records_dropped == 1


@EVENT_TIME_TRIGGERS
def test_late_elements_go_to_the_late_data_side_output_with_their_timestamps(trigger):
    tag = OutputTag("late")
    h = Harness(sum_spec(TumblingEventTimeWindows.of(10), late_data_tag=tag, trigger=trigger))
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
    leftover = [n for n in backend._kinds if list(backend.entries(n))]
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
    assert [n for n in backend._kinds if list(backend.entries(n))] == []


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
