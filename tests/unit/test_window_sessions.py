"""Event-time session windows with the default trigger and no evictor: pre-aggregated ones
without allowed lateness take the batched path (runtime/windows/sessions.py), the others the
inlined merging path of runtime/windows/operator.py (`_process_plain_session`). On out-of-order
input with late data both give the generic per-element path's outputs (values, timestamps,
order), late data and `clear` calls, hold the same keyed state after every step (the batched
path: after every batch, without the window-timer map it does not need), and checkpoints of
either path restore into the generic one and back, also rescaled."""

from __future__ import annotations

import pytest
from test_window_slicing import ListAcc, PerWindowTrigger, SumCount, Windowed
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
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.windows import mirror
from tidegate.runtime.windows.assigners import EventTimeSessionWindows, MergingWindowAssigner
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.evictors import CountEvictor
from tidegate.runtime.windows.operator import WindowSpec
from tidegate.runtime.windows.sessions import SessionWindows
from tidegate.runtime.windows.window_timers import WINDOW_TIMERS_STATE

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


KINDS = ["reduce", "aggregate", "in-place", "process"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("assigner", list(ASSIGNERS))
def test_inlined_sessions_give_the_generic_paths_results_and_state(assigner, kind):
    """With allowed lateness (without, sessions are batched)."""
    lateness = 15
    for seed in range(2):
        steps = script(seed, 200)
        fast = Harness(spec(assigner, kind, lateness))
        reference = Harness(spec(assigner, kind, lateness, PerWindowTrigger()))
        assert fast.op._plain_session and fast.op.batched is None
        assert not reference.op._plain_session
        for i, (batch, watermark) in enumerate(steps):
            for h in (fast, reference):
                h.add(*batch)
                h.watermark(watermark)
            assert state_of(fast) == state_of(reference), f"seed {seed}, step {i}"
        for h in (fast, reference):
            h.watermark(MAX_WATERMARK)
        assert_same_results(fast, reference, cleared=kind != "reduce")


def without_window_timers(state: dict) -> dict:
    """`state_of` without the window-timer map (the batched path finds a timer's window in the
    merging set)."""
    return {name: entries for name, entries in state.items() if name != WINDOW_TIMERS_STATE}


@pytest.mark.parametrize("per_batch", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("assigner", list(ASSIGNERS))
def test_batched_sessions_give_the_generic_paths_results_and_state(assigner, kind, per_batch):
    """`per_batch` script steps in one batch (a watermark after each batch): several elements
    of a key merge within one batch, windows are made and merged away before it ends."""
    for seed in range(2):
        steps = script(seed, 300)
        steps = [
            (
                [e for batch, _ in steps[i : i + per_batch] for e in batch],
                steps[i : i + per_batch][-1][1],
            )
            for i in range(0, len(steps), per_batch)
        ]
        fast = Harness(spec(assigner, kind, 0))
        reference = Harness(spec(assigner, kind, 0, PerWindowTrigger()))
        assert isinstance(fast.op.batched, SessionWindows) and reference.op.batched is None
        for i, (batch, watermark) in enumerate(steps):
            for h in (fast, reference):
                h.add(*batch)
            assert state_of(fast) == without_window_timers(state_of(reference)), (seed, i)
            for h in (fast, reference):
                h.watermark(watermark)
            assert state_of(fast) == without_window_timers(state_of(reference)), (seed, i)
            assert fast.out.records == reference.out.records, (seed, i)
        assert WINDOW_TIMERS_STATE not in state_of(fast)
        for h in (fast, reference):
            h.watermark(MAX_WATERMARK)
        assert_same_results(fast, reference, cleared=kind != "reduce")


def test_batched_sessions_with_few_merging_sets_mirrored_give_the_same_results(monkeypatch):
    """On rocksdb the batched path mirrors the keys' merging sets in memory, at most
    `MAX_MIRRORED_KEYS` keys (then the older half is forgotten and read again when needed):
    with 2 for 5 keys, most reads go to the state."""
    monkeypatch.setattr(mirror, "MAX_MIRRORED_KEYS", 2)
    steps = script(3, 300)
    fast = Harness(spec("dynamic", "process", 0))
    reference = Harness(spec("dynamic", "process", 0, PerWindowTrigger()))
    for i, (batch, watermark) in enumerate(steps):
        for h in (fast, reference):
            h.add(*batch)
            h.watermark(watermark)
        assert state_of(fast) == without_window_timers(state_of(reference)), i
        if fast.op.batched._mirror is not None:
            assert len(fast.op.batched._mirror._keys) <= 2
    for h in (fast, reference):
        h.watermark(MAX_WATERMARK)
    assert_same_results(fast, reference, cleared=True)


def test_batched_sessions_merge_many_windows_of_a_key_in_one_batch():
    """Out-of-order elements of one key: three separate windows (gap 10), then in the next
    batch one element whose window touches two of them, one that touches the result and the
    third, one inside."""
    elements = [("a", v, t) for v, t in [(1, 0), (2, 20), (3, 40), (4, 10), (5, 30), (6, 25)]]
    fast = Harness(spec("gap", "in-place", 0))
    reference = Harness(spec("gap", "in-place", 0, PerWindowTrigger()))
    for h in (fast, reference):
        h.add(*elements[:3])
        h.add(*elements[3:])
    assert state_of(fast) == without_window_timers(state_of(reference))
    for h in (fast, reference):
        h.watermark(MAX_WATERMARK)
    assert fast.out.values() == reference.out.values() == [("a", 0, 50, (21, 6))]


@pytest.mark.parametrize("kind", ["in-place", "process"])
@pytest.mark.parametrize("direction", ["generic to batched", "batched to generic"])
def test_batched_session_checkpoints_restore_into_the_generic_path_and_back(
    tmp_path, direction, kind
):
    """The per-element path's window-timer entries restored into the batched path go as their
    timers fire or their windows merge; the per-element path finds the windows of the batched
    path's timers in the merging set (WindowOperator._unmapped). No state is left."""
    steps = script(8)
    make = {
        "generic": lambda: spec("gap", kind, 0, PerWindowTrigger()),
        "batched": lambda: spec("gap", kind, 0),
    }
    reference = run(Harness(make["generic"]()), steps)
    first, then = direction.split(" to ")
    for middle in (len(steps) // 3, len(steps) // 2):
        h = Harness(make[first]())
        for batch, watermark in steps[:middle]:
            h.add(*batch)
            h.watermark(watermark)
        assert (WINDOW_TIMERS_STATE in state_of(h)) == (first != "batched")
        restored = h.snapshot_to(tmp_path / f"{middle}.state")
        rest = run(Harness(make[then](), restored=restored), steps[middle:])
        assert sorted(h.out.records + rest.out.records, key=repr) == sorted(
            reference.out.records, key=repr
        )
        assert state_of(rest) == {}


@pytest.mark.parametrize("kind", ["in-place", "process"])
def test_sessions_kept_for_an_allowed_lateness_go_when_restored_into_a_job_without(tmp_path, kind):
    """A checkpoint of a job with allowed lateness (windows past their end, kept until their
    cleanup timers) restored into the same job without it (batched): the first part's windows
    that had ended go when their cleanup timers fire (or fire once more, late, if an element
    merges into them); no state is left."""
    steps = script(6)
    h = Harness(spec("gap", kind, 15))
    assert h.op.batched is None
    middle = len(steps) // 2
    for batch, watermark in steps[:middle]:
        h.add(*batch)
        h.watermark(watermark)
    ended = [w for k in "abcde" for w in _windows_of(h, k) if w.end - 1 <= h.op.current_watermark]
    assert ended, "the script leaves windows kept for the allowed lateness"
    rest = Harness(spec("gap", kind, 0), restored=h.snapshot_to(tmp_path / "lateness.state"))
    assert isinstance(rest.op.batched, SessionWindows)
    run(rest, steps[middle:])
    assert state_of(rest) == {}


def _windows_of(h: Harness, key: str) -> list:
    h.op.keyed_backend.current_key = key
    return list(h.op.merging.mapping.keys())


@pytest.mark.parametrize("kind", ["in-place", "process"])
def test_batched_sessions_restore_and_rescale_with_their_keys(tmp_path, kind):
    """p=2 until a checkpoint in the middle of the script, then p=3 from it: the results of
    one uninterrupted run (the snapshot is written after the subtasks went on)."""
    make = lambda: spec("dynamic", kind, 0)  # noqa: E731
    steps = script(9)
    fired = rescaled_run(make, steps, tmp_path)
    reference = run(Harness(spec("dynamic", kind, 0, PerWindowTrigger())), steps)
    assert sorted(fired, key=repr) == sorted(reference.out.records, key=repr)


def test_every_snapshot_of_a_batched_session_run_holds_its_moment(tmp_path):
    """Accumulators changed in place after a snapshot (copy on write): snapshots taken after
    several steps, each restored into the generic path running the rest of the script, give
    the reference's results."""
    steps = script(5)
    reference = run(Harness(spec("gap", "in-place", 0, PerWindowTrigger())), steps)
    h = Harness(spec("gap", "in-place", 0))
    for i, (batch, watermark) in enumerate(steps):
        h.add(*batch)
        h.watermark(watermark)
        if i % 7 == 3:
            restored = h.snapshot_to(tmp_path / f"{i}.state")
            rest = run(
                Harness(spec("gap", "in-place", 0, PerWindowTrigger()), restored=restored),
                steps[i + 1 :],
            )
            assert sorted(h.out.records + rest.out.records, key=repr) == sorted(
                reference.out.records, key=repr
            ), f"restored after step {i}"


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


def test_only_default_sessions_take_the_inlined_or_batched_path():
    def path(**kw) -> str:
        kw.setdefault("aggregation", Aggregation(add_values))
        op = Harness(WindowSpec(kw.pop("assigner", ASSIGNERS["gap"]()), **kw)).op
        if op.batched is not None:
            return type(op.batched).__name__
        return "inlined" if op._plain_session else "generic"

    assert path() == "SessionWindows"
    assert path(assigner=ASSIGNERS["dynamic"]()) == "SessionWindows"
    assert path(allowed_lateness=1) == "inlined"
    process = InternalWindowFunction("process", Windowed())
    assert path(aggregation=None, function=process) == "SessionWindows"
    assert path(aggregation=None, function=process, allowed_lateness=1) == "inlined"
    assert path(trigger=PerWindowTrigger()) == "generic"
    assert path(evictor=CountEvictor.of(2)) == "generic"
    assert path(assigner=_OwnMerge()) == "generic"
