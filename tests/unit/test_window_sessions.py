"""Event-time session windows with the default trigger and no evictor (the inlined merging path
of runtime/windows/operator.py, `_process_plain_session`): on out-of-order input with late
data they give the generic per-element path's outputs (values, timestamps, order), late data
and `clear` calls, hold the same keyed state after every step, and checkpoints of either path
restore into the other."""

from __future__ import annotations

import pytest
from test_window_slicing import ListAcc, PerWindowTrigger, SumCount, Windowed
from window_harness import (
    Harness,
    add_values,
    assert_same_results,
    run,
    script,
    window_state_backend,  # noqa: F401 (autouse: both state backends)
)

from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.windows.assigners import EventTimeSessionWindows, MergingWindowAssigner
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.evictors import CountEvictor
from tidegate.runtime.windows.operator import WindowSpec

ASSIGNERS = {
    "gap": lambda: EventTimeSessionWindows.with_gap(10),
    # 3 to 17 ms by value: windows of different lengths, some inside others
    "dynamic": lambda: EventTimeSessionWindows.with_dynamic_gap(lambda e: 3 + 2 * (e[1] - 1)),
}


def spec(assigner: str, kind: str, lateness: int, trigger=None) -> WindowSpec:
    """kind: "reduce", "aggregate" (new accumulators), "in-place" (accumulators changed in
    place), "process" (the elements kept)."""
    function, aggregation = InternalWindowFunction("process", Windowed()), None
    if kind == "reduce":
        function, aggregation = InternalWindowFunction("pass"), Aggregation(add_values)
    elif kind != "process":
        agg = SumCount() if kind == "aggregate" else ListAcc()
        aggregation = Aggregation(aggregate_function=agg, mergeable=True)
    return WindowSpec(
        ASSIGNERS[assigner](),
        trigger=trigger,
        allowed_lateness=lateness,
        late_data_tag=OutputTag("late"),
        aggregation=aggregation,
        function=function,
    )


def state_of(h: Harness) -> dict:
    """Every keyed state entry of the operator, by state name (the timers' too); a map's
    entries in any order (the generic path re-inserts a window it merges with itself)."""
    backend = h.op.keyed_backend

    def entry(key, value) -> str:
        items = sorted(map(repr, value.items())) if isinstance(value, dict) else value
        return repr((key, items))

    return {
        name: sorted(entry(*e) for e in backend.entries(name))
        for name in backend._kinds
        if list(backend.entries(name))
    }


@pytest.mark.parametrize("lateness", [0, 15])
@pytest.mark.parametrize("kind", ["reduce", "aggregate", "in-place", "process"])
@pytest.mark.parametrize("assigner", list(ASSIGNERS))
def test_inlined_sessions_give_the_generic_paths_results_and_state(assigner, kind, lateness):
    for seed in range(2):
        steps = script(seed, 200)
        fast = Harness(spec(assigner, kind, lateness))
        reference = Harness(spec(assigner, kind, lateness, PerWindowTrigger()))
        assert fast.op._plain_session and not reference.op._plain_session
        for i, (batch, watermark) in enumerate(steps):
            for h in (fast, reference):
                h.add(*batch)
                h.watermark(watermark)
            assert state_of(fast) == state_of(reference), f"seed {seed}, step {i}"
        for h in (fast, reference):
            h.watermark(MAX_WATERMARK)
        assert_same_results(fast, reference, cleared=kind != "reduce")


@pytest.mark.parametrize("direction", ["generic to inlined", "inlined to generic"])
def test_checkpoints_of_either_session_path_restore_into_the_other(tmp_path, direction):
    steps = script(4)
    reference = run(Harness(spec("gap", "process", 15, PerWindowTrigger())), steps)
    make = {
        "generic": lambda: spec("gap", "process", 15, PerWindowTrigger()),
        "inlined": lambda: spec("gap", "process", 15),
    }
    first, then = (make[name] for name in direction.split(" to "))
    for middle in (len(steps) // 3, len(steps) // 2):
        h = Harness(first())
        for batch, watermark in steps[:middle]:
            h.add(*batch)
            h.watermark(watermark)
        restored = h.snapshot_to(tmp_path / f"{middle}.state")
        rest = run(Harness(then(), restored=restored), steps[middle:])
        # (timers of one timestamp fire in key order after a restore: compare as multisets)
        assert sorted(h.out.records + rest.out.records, key=repr) == sorted(
            reference.out.records, key=repr
        )
        assert state_of(rest) == {}


class _OwnMerge(MergingWindowAssigner):
    """A merging assigner with its own merge rule: not inlined."""

    def __init__(self) -> None:
        self.inner = EventTimeSessionWindows.with_gap(10)

    def assign_windows(self, element, timestamp, context):
        return self.inner.assign_windows(element, timestamp, context)

    def merge_windows(self, windows, callback):
        self.inner.merge_windows(windows, callback)

    def get_default_trigger(self, env=None):
        return self.inner.get_default_trigger(env)

    def is_event_time(self):
        return True


def test_only_default_sessions_take_the_inlined_path():
    def inlined(**kw) -> bool:
        kw.setdefault("aggregation", Aggregation(add_values))
        return Harness(WindowSpec(kw.pop("assigner", ASSIGNERS["gap"]()), **kw)).op._plain_session

    assert inlined()
    assert inlined(assigner=ASSIGNERS["dynamic"]())
    assert not inlined(trigger=PerWindowTrigger())
    assert not inlined(evictor=CountEvictor.of(2))
    assert not inlined(assigner=_OwnMerge())
