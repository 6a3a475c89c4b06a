"""Windows keeping their elements, batched (runtime/windows/kept.py): event-time tumbling and
sliding windows with process/apply give exactly the per-window operator's outputs (values,
timestamps, order), late data, late firings and `clear` calls, on out-of-order input; their
state restores and rescales, and checkpoints of either path restore into the other."""

from __future__ import annotations

import pytest
from test_window_slicing import PerWindowTrigger, Windowed
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
from tidegate.runtime.windows.assigners import (
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.evictors import CountEvictor, TimeEvictor
from tidegate.runtime.windows.operator import WindowSpec


class Applied:
    """A WindowFunction (apply): the window's elements in the order it got them."""

    def apply(self, key, window, elements):
        yield (key, window.start, window.end, tuple(elements))


def spec(assigner, kind: str, lateness: int, trigger=None) -> WindowSpec:
    """kind: "process", "apply", "evict" (a CountEvictor before and a TimeEvictor after the
    function), "evict-reduce" (an evictor, then a reduce over what it left)."""
    evictor, aggregation = None, None
    if kind == "evict":
        evictor = Evictors(CountEvictor.of(3), TimeEvictor.of(5, do_evict_after=True))
    elif kind == "evict-reduce":
        evictor, aggregation = CountEvictor.of(2), Aggregation(add_values)
    function = InternalWindowFunction("apply" if kind == "apply" else "process", Windowed())
    if kind == "apply":
        function = InternalWindowFunction("apply", Applied())
    return WindowSpec(
        assigner,
        trigger=trigger,
        evictor=evictor,
        allowed_lateness=lateness,
        late_data_tag=OutputTag("late"),
        aggregation=aggregation,
        function=function,
    )


class Evictors:
    """One evictor before the function and another after it."""

    def __init__(self, before, after) -> None:
        self.before, self.after = before, after

    def evict_before(self, elements, size, window, ctx):
        self.before.evict_before(elements, size, window, ctx)

    def evict_after(self, elements, size, window, ctx):
        self.after.evict_after(elements, size, window, ctx)


ASSIGNERS = {
    "tumbling": TumblingEventTimeWindows.of(20),
    "tumbling-offset": TumblingEventTimeWindows.of(20, 7),
    "sliding": SlidingEventTimeWindows.of(30, 10),
    "sliding-uneven": SlidingEventTimeWindows.of(30, 12, 5),  # 2 or 3 windows per element
    "sliding-gaps": SlidingEventTimeWindows.of(10, 25),  # some elements are in no window
}


CASES = [  # (assigner, kind, allowed lateness)
    *((a, k, lateness) for a in ASSIGNERS for k in ("process", "evict") for lateness in (0, 15)),
    ("tumbling", "apply", 0),
    ("sliding", "apply", 15),
    ("tumbling-offset", "evict-reduce", 15),
    ("sliding-uneven", "evict-reduce", 0),
]


@pytest.mark.parametrize(("assigner", "kind", "lateness"), CASES)
def test_kept_windows_give_the_per_window_operators_results_in_its_order(assigner, kind, lateness):
    steps = script(3, 200)
    kept = run(Harness(spec(ASSIGNERS[assigner], kind, lateness)), steps)
    reference = run(Harness(spec(ASSIGNERS[assigner], kind, lateness, PerWindowTrigger())), steps)
    assert kept.op.kept is not None and reference.op.kept is None
    assert_same_results(kept, reference, cleared=kind != "apply")


def test_the_kept_path_is_used_only_where_the_results_stay_the_per_window_ones():
    def kept(assigner, **kw):
        return Harness(WindowSpec(assigner, **kw)).op.kept

    assert kept(TumblingEventTimeWindows.of(30)) is not None
    assert kept(SlidingEventTimeWindows.of(30, 10)) is not None
    assert kept(TumblingEventTimeWindows.of(30), trigger=PerWindowTrigger()) is None
    assert kept(TumblingEventTimeWindows.of(30), evictor=CountEvictor.of(2)) is not None
    with_evictor = {"evictor": CountEvictor.of(2), "aggregation": Aggregation(add_values)}
    assert kept(SlidingEventTimeWindows.of(30, 10), **with_evictor) is not None
    # pre-aggregated without an evictor: sliced (or one accumulator per window)
    assert kept(TumblingEventTimeWindows.of(30), aggregation=Aggregation(add_values)) is None


def test_kept_windows_restore_and_rescale_with_their_keys(tmp_path):
    """p=2 until a checkpoint in the middle of the script, then p=3 from it: the results of
    one uninterrupted run (the snapshot is written after the subtasks went on)."""
    make = lambda: spec(SlidingEventTimeWindows.of(30, 10), "process", 15)  # noqa: E731
    steps = script(7)
    fired = rescaled_run(make, steps, tmp_path)
    reference = run(Harness(make()), steps)
    assert sorted(fired, key=repr) == sorted(reference.out.records, key=repr)


@pytest.mark.parametrize("lateness", [15, 20])
@pytest.mark.parametrize("direction", ["per-window to kept", "kept to per-window"])
def test_checkpoints_of_either_path_restore_into_the_other(tmp_path, direction, lateness):
    """The element list is one layout; the per-window operator's window-timer entries are
    removed as their timers fire, and it finds the windows of the kept path's timers (which
    have no window-timer entry: WindowOperator._unmapped). With a lateness that is a multiple
    of the slide, a restored window's end timer shares its timestamp with another window's
    cleanup timer, which the per-window operator registers after the restore with an entry:
    both windows' timers run then (the restored one's window was lost)."""
    steps = script(11)
    middle = len(steps) // 2
    per_window = spec(SlidingEventTimeWindows.of(30, 10), "process", lateness, PerWindowTrigger())
    kept = spec(SlidingEventTimeWindows.of(30, 10), "process", lateness)
    first, then = (per_window, kept) if direction == "per-window to kept" else (kept, per_window)
    h = Harness(first)
    for batch, watermark in steps[:middle]:
        h.add(*batch)
        h.watermark(watermark)
    restored = h.snapshot_to(tmp_path / "first.state")
    again = run(Harness(then, restored=restored), steps[middle:])
    reference = run(Harness(per_window), steps)
    # (timers of one timestamp fire in key order after a restore: compare as multisets)
    assert sorted(h.out.records + again.out.records, key=repr) == sorted(
        reference.out.records, key=repr
    )
    backend = again.op.keyed_backend
    assert [n for n in backend._kinds if list(backend.entries(n))] == []


@pytest.mark.parametrize("assigner", ["tumbling", "sliding-uneven"])
def test_every_snapshot_of_one_run_holds_the_windows_of_its_moment(tmp_path, assigner):
    """Snapshots of one kept run after several steps (keys changed, emptied, refilled between
    them; on the heap the list state is written when a snapshot is taken), each restored into
    the per-window operator running the rest of the script: the reference's results."""
    steps = script(5)
    make = lambda trigger=None: spec(ASSIGNERS[assigner], "process", 15, trigger)  # noqa: E731
    reference = run(Harness(make(PerWindowTrigger())), steps)
    h = Harness(make())
    for i, (batch, watermark) in enumerate(steps):
        h.add(*batch)
        h.watermark(watermark)
        if i % 7 == 3:
            restored = h.snapshot_to(tmp_path / f"{i}.state")
            rest = run(Harness(make(PerWindowTrigger()), restored=restored), steps[i + 1 :])
            assert sorted(h.out.records + rest.out.records, key=repr) == sorted(
                reference.out.records, key=repr
            ), f"restored after step {i}"
