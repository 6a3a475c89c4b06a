"""Window slicing (runtime/windows/slicing.py): tumbling and sliding event-time windows with
pre-aggregation give exactly the per-window operator's outputs (values, timestamps, order),
late data, late firings and `clear` calls, on out-of-order input; slice state restores,
rescales, and a checkpoint of the per-window operator restores into sliced windows."""

from __future__ import annotations

import pytest
from window_harness import (
    Harness,
    add_values,
    assert_same_results,
    rescaled_run,
    run,
    script,
    window_state_backend,  # noqa: F401 (autouse: both state backends)
)

from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.windows import mirror
from tidegate.runtime.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.operator import WindowSpec
from tidegate.runtime.windows.triggers import EventTimeTrigger


class PerWindowTrigger(EventTimeTrigger):
    """The default trigger, but not slicing: the per-window operator as the reference."""


class SumCount:
    """An AggregateFunction with `merge`: (sum, count), a new tuple per call."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class ListAcc(SumCount):
    """An accumulator changed in place (copy on write must protect snapshots and slices)."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        acc[0] += value[1]
        acc[1] += 1
        return acc

    def get_result(self, acc):
        return tuple(acc)

    def merge(self, a, b):
        a[0] += b[0]
        a[1] += b[1]
        return a


class Windowed:
    """A ProcessWindowFunction recording its clear() calls."""

    def __init__(self) -> None:
        self.cleared: list = []

    def process(self, key, context, elements):
        w = context.window()
        for e in elements:
            yield (key, w.start, w.end, e)

    def clear(self, context):
        self.cleared.append(context.window())


def spec(assigner, kind: str, lateness: int, trigger=None) -> WindowSpec:
    function = InternalWindowFunction("pass")
    if kind == "reduce":
        aggregation = Aggregation(add_values)
    else:
        agg = SumCount() if kind == "aggregate" else ListAcc()
        aggregation = Aggregation(aggregate_function=agg, mergeable=True)
        function = InternalWindowFunction("process", Windowed())
    return WindowSpec(
        assigner,
        trigger=trigger,
        allowed_lateness=lateness,
        late_data_tag=OutputTag("late"),
        aggregation=aggregation,
        function=function,
    )


ASSIGNERS = {
    "tumbling": TumblingEventTimeWindows.of(20),
    "sliding": SlidingEventTimeWindows.of(30, 10),
    "sliding-gcd": SlidingEventTimeWindows.of(30, 12, 5),  # 6 ms slices, offset 5
}


@pytest.mark.parametrize("lateness", [0, 15])
@pytest.mark.parametrize("kind", ["reduce", "aggregate", "in-place"])
@pytest.mark.parametrize("assigner", list(ASSIGNERS))
def test_sliced_windows_give_the_per_window_operators_results_in_its_order(
    assigner, kind, lateness
):
    for seed in range(2):
        steps = script(seed)
        sliced = run(Harness(spec(ASSIGNERS[assigner], kind, lateness)), steps)
        reference = run(
            Harness(spec(ASSIGNERS[assigner], kind, lateness, PerWindowTrigger())), steps
        )
        assert sliced.op.sliced is not None and reference.op.sliced is None
        assert_same_results(sliced, reference, cleared=kind != "reduce")
        assert_mirror_is_the_state(sliced)


def assert_mirror_is_the_state(h: Harness) -> None:
    """On rocksdb, every key the slices' mirror holds has the state's entries there."""
    sliced = h.op.sliced
    if sliced._mirror is None:
        return
    for key, entries in sliced._mirror._keys.items():
        h.op.keyed_backend.current_key = key
        assert entries == dict(sliced.state.items()), key


@pytest.mark.parametrize("lateness", [0, 15])
def test_sliced_windows_with_few_keys_mirrored_give_the_same_results(monkeypatch, lateness):
    """On rocksdb the slices of at most `MAX_MIRRORED_KEYS` keys are mirrored in memory (then
    the older half is forgotten and read again): with 2 for 5 keys, most reads go to the
    state, and accumulators changed in place must be in RocksDB, not only in the mirror."""
    monkeypatch.setattr(mirror, "MAX_MIRRORED_KEYS", 2)
    for seed in range(2):
        steps = script(seed)
        sliced = run(Harness(spec(ASSIGNERS["sliding"], "in-place", lateness)), steps)
        reference = run(
            Harness(spec(ASSIGNERS["sliding"], "in-place", lateness, PerWindowTrigger())), steps
        )
        if sliced.op.sliced._mirror is not None:
            assert len(sliced.op.sliced._mirror._keys) <= 2
        assert_same_results(sliced, reference, cleared=True)
        assert_mirror_is_the_state(sliced)


def test_slicing_is_used_only_where_the_results_stay_the_per_window_ones():
    def sliced(assigner, aggregation=None, **kw):
        s = WindowSpec(assigner, aggregation=aggregation or Aggregation(add_values), **kw)
        return Harness(s).op.sliced

    assert sliced(SlidingEventTimeWindows.of(30, 10)).g == 10
    assert sliced(SlidingEventTimeWindows.of(30, 12)).g == 6
    assert sliced(TumblingEventTimeWindows.of(30)).g == 30
    no_merge = Aggregation(aggregate_function=SumCount())  # mergeable not declared
    assert sliced(TumblingEventTimeWindows.of(30), no_merge) is not None  # nothing merges
    assert sliced(SlidingEventTimeWindows.of(30, 10), no_merge) is None
    assert sliced(SlidingEventTimeWindows.of(1_000, 999)) is None  # 1 ms slices: too many
    assert sliced(SlidingEventTimeWindows.of(10, 30)) is None  # gaps between windows
    assert sliced(SlidingEventTimeWindows.of(30, 10), trigger=PerWindowTrigger()) is None
    elements = WindowSpec(TumblingEventTimeWindows.of(30))  # process(): elements kept
    assert Harness(elements).op.sliced is None


@pytest.mark.parametrize("kind", ["reduce", "in-place"])
def test_slices_restore_and_rescale_with_their_keys(tmp_path, kind):
    """p=2 until a checkpoint in the middle of the script, then p=3 from it: the results of
    one uninterrupted run. The snapshot is written after the subtasks went on (as the async
    phase does): accumulators changed in place after it are not changed in it."""
    make = lambda: spec(SlidingEventTimeWindows.of(30, 10), kind, 15)  # noqa: E731
    steps = script(7)
    fired = rescaled_run(make, steps, tmp_path)
    reference = run(Harness(make()), steps)
    assert sorted(fired, key=repr) == sorted(reference.out.records, key=repr)


def test_a_checkpoint_of_per_window_sliding_windows_restores_into_slices(tmp_path):
    """Contents of whole windows and their window-timer entries (the per-window operator's
    layout, as checkpoints and savepoints of earlier versions hold it) are merged into the
    windows' results and cleaned up."""
    steps = script(11)
    middle = len(steps) // 2
    per_window = spec(SlidingEventTimeWindows.of(30, 10), "aggregate", 15, PerWindowTrigger())
    h = Harness(per_window)
    for batch, watermark in steps[:middle]:
        h.add(*batch)
        h.watermark(watermark)
    fired_before = list(h.out.records)
    restored = h.snapshot_to(tmp_path / "per-window.state")
    again = Harness(spec(SlidingEventTimeWindows.of(30, 10), "aggregate", 15), restored=restored)
    assert again.op.sliced is not None and again.op.sliced.legacy
    run(again, steps[middle:])
    reference = run(Harness(per_window), steps)
    # (timers of one timestamp fire in key order after a restore: compare as multisets)
    assert sorted(fired_before + again.out.records, key=repr) == sorted(
        reference.out.records, key=repr
    )
    backend = again.op.keyed_backend
    assert [n for n in backend._kinds if list(backend.entries(n))] == []
