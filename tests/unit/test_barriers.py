"""Scripted and randomized tests for the barrier handlers (tidegate.runtime.barriers)."""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tidegate.runtime.barriers import (
    AbortCheckpoint,
    Action,
    BarrierHandler,
    SingleCheckpointBarrierHandler,
    TrackingBarrierHandler,
    TriggerCheckpoint,
    Unblock,
    handle_event,
)
from tidegate.runtime.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
    Event,
)


def barrier(checkpoint_id: int) -> CheckpointBarrier:
    return CheckpointBarrier(checkpoint_id, timestamp_ms=1000 * checkpoint_id)


def trigger(checkpoint_id: int) -> TriggerCheckpoint:
    return TriggerCheckpoint(barrier(checkpoint_id))


def outcomes(actions: list[Action]) -> list[tuple[str, int]]:
    """Triggers and aborts as (kind, id), ignoring reasons and unblocks."""
    result = []
    for action in actions:
        match action:
            case TriggerCheckpoint(barrier=b):
                result.append(("trigger", b.checkpoint_id))
            case AbortCheckpoint(checkpoint_id=checkpoint_id):
                result.append(("abort", checkpoint_id))
    return result


# --------------------------------------------------------------------------- aligned: scripts


def test_barriers_on_all_channels_trigger_the_checkpoint_exactly_once() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    assert handler.on_barrier(0, barrier(1)) == []
    assert handler.on_barrier(2, barrier(1)) == []
    assert handler.on_barrier(1, barrier(1)) == [trigger(1), Unblock((0, 2))]
    assert handler.current_checkpoint_id == 1
    assert not handler.is_aligning
    assert handler.on_barrier(0, barrier(2)) == []
    assert handler.on_barrier(1, barrier(2)) == []
    assert handler.on_barrier(2, barrier(2)) == [trigger(2), Unblock((0, 1))]


def test_each_channel_is_blocked_from_its_barrier_until_the_checkpoint_triggers() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    assert handler.blocked_channels == frozenset()
    handler.on_barrier(1, barrier(7))
    assert handler.blocked_channels == {1}
    assert handler.is_aligning and handler.current_checkpoint_id == 7
    assert [handler.is_blocked(c) for c in range(3)] == [False, True, False]
    handler.on_barrier(0, barrier(7))
    assert handler.blocked_channels == {0, 1}
    actions = handler.on_barrier(2, barrier(7))
    assert actions == [trigger(7), Unblock((1, 0))]
    assert handler.blocked_channels == frozenset()
    assert not any(handler.is_blocked(c) for c in range(3))


def test_the_snapshot_is_triggered_before_blocked_channels_are_released() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    actions = handler.on_barrier(1, barrier(1))
    assert [type(a) for a in actions] == [TriggerCheckpoint, Unblock]


def test_a_single_channel_input_triggers_immediately_without_blocking() -> None:
    handler = SingleCheckpointBarrierHandler(1)
    assert handler.on_barrier(0, barrier(1)) == [trigger(1)]
    assert not handler.is_blocked(0)
    assert handler.on_barrier(0, barrier(2)) == [trigger(2)]


def test_a_newer_barrier_subsumes_an_unfinished_alignment() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(1))
    actions = handler.on_barrier(2, barrier(2))
    assert actions == [AbortCheckpoint(1, "subsumed by barrier 2"), Unblock((0, 1))]
    assert handler.current_checkpoint_id == 2
    assert handler.blocked_channels == {2}
    assert handler.on_barrier(0, barrier(1)) == []  # late: already aborted
    handler.on_barrier(0, barrier(2))
    assert handler.on_barrier(1, barrier(2)) == [trigger(2), Unblock((2, 0))]


def test_an_older_barrier_during_alignment_is_ignored_and_does_not_block() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(5))
    assert handler.on_barrier(1, barrier(4)) == []
    assert handler.blocked_channels == {0}
    assert handler.current_checkpoint_id == 5


def test_end_of_partition_mid_alignment_completes_it() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(1))
    assert handler.on_end_of_partition(2) == [trigger(1), Unblock((0, 1))]
    # the ended channel no longer counts for later checkpoints
    handler.on_barrier(0, barrier(2))
    assert handler.on_barrier(1, barrier(2)) == [trigger(2), Unblock((0,))]


def test_end_of_partition_of_a_channel_still_owing_the_barrier_keeps_aligning() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    assert handler.on_end_of_partition(1) == []
    assert handler.is_aligning and handler.blocked_channels == {0}
    assert handler.on_barrier(2, barrier(1)) == [trigger(1), Unblock((0,))]


def test_a_channel_that_delivered_the_barrier_and_then_ended_still_counts() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    assert handler.on_end_of_partition(0) == []
    handler.on_barrier(1, barrier(1))
    # channel 0 stays listed so that whatever the loop stashed for it is replayed
    assert handler.on_barrier(2, barrier(1)) == [trigger(1), Unblock((0, 1))]


def test_when_every_channel_ends_mid_alignment_the_delivered_barrier_triggers() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(3))
    handler.on_end_of_partition(0)
    assert handler.on_end_of_partition(1) == [trigger(3), Unblock((0,))]


def test_end_of_partition_on_every_channel_while_idle_does_nothing() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    assert [handler.on_end_of_partition(c) for c in range(3)] == [[], [], []]
    assert not handler.is_aligning
    assert handler.current_checkpoint_id == -1


def test_a_newer_barrier_on_the_only_open_channel_subsumes_and_triggers_at_once() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.on_end_of_partition(0)
    assert outcomes(handler.on_barrier(1, barrier(2))) == [("abort", 1), ("trigger", 2)]
    assert handler.blocked_channels == frozenset()


def test_a_cancel_marker_on_the_first_channel_aborts_before_anything_blocks() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    assert outcomes(handler.on_cancel_marker(0, 1)) == [("abort", 1)]
    assert not handler.is_aligning and handler.current_checkpoint_id == 1
    assert [handler.on_barrier(c, barrier(1)) for c in (1, 2)] == [[], []]
    assert handler.blocked_channels == frozenset()


def test_a_cancel_marker_on_the_last_channel_aborts_and_unblocks() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(1))
    actions = handler.on_cancel_marker(2, 1)
    assert actions == [
        AbortCheckpoint(1, "checkpoint 1 cancelled upstream (channel 2)"),
        Unblock((0, 1)),
    ]
    assert handler.blocked_channels == frozenset()


def test_cancel_markers_on_several_channels_abort_only_once() -> None:
    handler = SingleCheckpointBarrierHandler(4)
    handler.on_barrier(0, barrier(1))
    assert outcomes(handler.on_cancel_marker(1, 1)) == [("abort", 1)]
    assert handler.on_cancel_marker(2, 1) == []
    assert handler.on_cancel_marker(3, 1) == []
    assert handler.on_barrier(3, barrier(2)) == []
    assert handler.blocked_channels == {3}


def test_a_cancel_marker_for_a_newer_checkpoint_aborts_the_current_one_and_the_newer_one() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    actions = handler.on_cancel_marker(1, 2)
    assert outcomes(actions) == [("abort", 1), ("abort", 2)]
    assert Unblock((0,)) in actions
    assert handler.current_checkpoint_id == 2 and not handler.is_aligning
    assert handler.on_barrier(0, barrier(2)) == []  # remembered as done
    assert handler.blocked_channels == frozenset()


def test_late_barriers_and_cancel_markers_for_an_aborted_checkpoint_are_ignored() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.abort_current("snapshot failed")
    assert handler.on_barrier(1, barrier(1)) == []
    assert handler.on_cancel_marker(1, 1) == []
    assert handler.on_cancel_marker(1, 0) == []
    assert handler.blocked_channels == frozenset()


def test_a_late_cancel_marker_for_a_triggered_checkpoint_is_ignored() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(1))
    assert handler.on_cancel_marker(0, 1) == []


def test_abort_current_aborts_the_alignment_and_unblocks() -> None:
    handler = SingleCheckpointBarrierHandler(3)
    handler.on_barrier(2, barrier(4))
    handler.on_barrier(0, barrier(4))
    assert handler.abort_current("snapshot failed") == [
        AbortCheckpoint(4, "snapshot failed"),
        Unblock((2, 0)),
    ]
    assert not handler.is_aligning and handler.blocked_channels == frozenset()
    assert handler.abort_current("again") == []


@pytest.mark.parametrize(
    "script",
    [
        [("b", 0, 1), ("b", 1, 1), ("b", 2, 1)],
        [("b", 0, 1), ("b", 1, 1), ("b", 2, 2), ("b", 0, 2), ("b", 1, 2)],
        [("b", 0, 1), ("b", 1, 1), ("c", 2, 1)],
        [("b", 0, 1), ("c", 2, 5)],
        [("b", 0, 1), ("b", 1, 1), ("e", 2, 0)],
        [("b", 0, 1), ("e", 0, 0), ("e", 1, 0), ("e", 2, 0)],
        [("b", 0, 1), ("b", 1, 1), ("a", 0, 0)],
    ],
    ids=["trigger", "subsume-then-trigger", "cancel", "newer-cancel", "end", "all-end", "abort"],
)
def test_nothing_stays_blocked_after_the_last_trigger_or_abort(
    script: list[tuple[str, int, int]],
) -> None:
    handler = SingleCheckpointBarrierHandler(3)
    last: list[Action] = []
    for kind, channel, checkpoint_id in script:
        match kind:
            case "b":
                last = handler.on_barrier(channel, barrier(checkpoint_id))
            case "c":
                last = handler.on_cancel_marker(channel, checkpoint_id)
            case "e":
                last = handler.on_end_of_partition(channel)
            case "a":
                last = handler.abort_current("declined")
    assert outcomes(last), "the script must end with a trigger or an abort"
    assert handler.blocked_channels == frozenset()
    assert not handler.is_aligning


def test_a_barrier_on_an_ended_channel_is_a_protocol_error() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_end_of_partition(1)
    with pytest.raises(ValueError, match="after its EndOfPartition"):
        handler.on_barrier(1, barrier(1))
    with pytest.raises(ValueError, match="after its EndOfPartition"):
        handler.on_end_of_partition(1)


def test_a_duplicate_barrier_on_a_blocked_channel_is_a_protocol_error() -> None:
    handler = SingleCheckpointBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    with pytest.raises(ValueError, match="duplicate barrier 1"):
        handler.on_barrier(0, barrier(1))
    with pytest.raises(ValueError, match="blocked"):
        handler.on_barrier(0, barrier(2))


def test_channels_out_of_range_and_empty_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        SingleCheckpointBarrierHandler(0)
    with pytest.raises(ValueError, match="only 2 input channels"):
        SingleCheckpointBarrierHandler(2).on_barrier(2, barrier(1))
    with pytest.raises(ValueError):
        TrackingBarrierHandler(2, max_tracked=0)


@pytest.mark.parametrize("make", [SingleCheckpointBarrierHandler, TrackingBarrierHandler])
def test_handle_event_dispatches_each_channel_event(
    make: Callable[[int], BarrierHandler],
) -> None:
    handler = make(2)
    assert handle_event(handler, 0, EndOfData()) == []
    assert handle_event(handler, 0, barrier(1)) == []
    assert outcomes(handle_event(handler, 1, CancelCheckpointMarker(1))) == [("abort", 1)]
    assert handle_event(handler, 1, EndOfPartition()) == []
    assert handle_event(handler, 0, barrier(2)) == [trigger(2)]
    with pytest.raises(TypeError):
        handle_event(handler, 0, "not an event")  # type: ignore[arg-type]


# -------------------------------------------------------------------------- tracking: scripts


def test_tracking_never_blocks_and_triggers_when_every_channel_delivered() -> None:
    handler = TrackingBarrierHandler(3)
    assert handler.on_barrier(0, barrier(1)) == []
    assert handler.on_barrier(1, barrier(1)) == []
    assert handler.is_aligning and not any(handler.is_blocked(c) for c in range(3))
    assert handler.blocked_channels == frozenset()
    assert handler.on_barrier(2, barrier(1)) == [trigger(1)]
    assert not handler.is_aligning
    assert handler.on_barrier(0, barrier(1)) == []  # late: already triggered


def test_older_pending_checkpoints_survive_later_barriers() -> None:
    handler = TrackingBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(0, barrier(2))
    handler.on_barrier(0, barrier(3))
    assert handler.pending_checkpoint_ids == (1, 2, 3)
    assert handler.on_barrier(1, barrier(1)) == [trigger(1)]
    assert handler.on_barrier(1, barrier(2)) == [trigger(2)]
    assert handler.pending_checkpoint_ids == (3,)


def test_completing_a_checkpoint_aborts_older_pending_ones_as_subsumed() -> None:
    handler = TrackingBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(2))
    assert handler.on_barrier(0, barrier(2)) == [
        AbortCheckpoint(1, "subsumed by checkpoint 2"),
        trigger(2),
    ]
    assert handler.on_barrier(1, barrier(1)) == []  # can no longer complete


def test_tracking_is_bounded_and_aborts_the_oldest_pending_checkpoint() -> None:
    handler = TrackingBarrierHandler(2, max_tracked=3)
    for checkpoint_id in (1, 2, 3):
        assert handler.on_barrier(0, barrier(checkpoint_id)) == []
    assert outcomes(handler.on_barrier(0, barrier(4))) == [("abort", 1)]
    assert handler.pending_checkpoint_ids == (2, 3, 4)
    assert handler.on_barrier(1, barrier(1)) == []


def test_tracking_end_of_partition_completes_pending_checkpoints_oldest_first() -> None:
    handler = TrackingBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(1, barrier(1))
    handler.on_barrier(0, barrier(2))
    handler.on_barrier(1, barrier(2))
    handler.on_barrier(0, barrier(3))
    assert handler.on_end_of_partition(2) == [trigger(1), trigger(2)]
    assert handler.pending_checkpoint_ids == (3,)
    assert handler.on_barrier(1, barrier(3)) == [trigger(3)]


def test_tracking_counts_a_channel_that_delivered_and_then_ended() -> None:
    handler = TrackingBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    assert handler.on_end_of_partition(0) == []
    assert handler.on_barrier(1, barrier(1)) == [trigger(1)]


def test_tracking_cancel_marker_aborts_once_and_ignores_later_barriers() -> None:
    handler = TrackingBarrierHandler(3)
    handler.on_barrier(0, barrier(1))
    assert outcomes(handler.on_cancel_marker(1, 1)) == [("abort", 1)]
    assert handler.on_cancel_marker(2, 1) == []
    assert handler.on_barrier(2, barrier(1)) == []
    assert outcomes(handler.on_cancel_marker(0, 4)) == [("abort", 4)]
    assert handler.on_barrier(1, barrier(4)) == []
    assert not handler.is_aligning


def test_tracking_abort_current_aborts_every_pending_checkpoint() -> None:
    handler = TrackingBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    handler.on_barrier(0, barrier(2))
    assert outcomes(handler.abort_current("declined")) == [("abort", 1), ("abort", 2)]
    assert handler.on_barrier(1, barrier(2)) == []


def test_tracking_rejects_duplicate_barriers_and_events_after_end() -> None:
    handler = TrackingBarrierHandler(2)
    handler.on_barrier(0, barrier(1))
    with pytest.raises(ValueError, match="duplicate barrier 1"):
        handler.on_barrier(0, barrier(1))
    handler.on_end_of_partition(1)
    with pytest.raises(ValueError, match="after its EndOfPartition"):
        handler.on_cancel_marker(1, 1)


# ------------------------------------------------------------------- randomized model runs

SEEDS = range(200)
EVENTS_PER_RUN = 500


@dataclass(eq=False)
class Upstream:
    """One input channel's frames: ("rec", None) records and events, plus the model's facts."""

    frames: list[tuple[str, Event | None]] = field(default_factory=list)
    records_before: dict[int, int] = field(default_factory=dict)  # barrier id -> records ahead
    records: int = 0


def generate_upstreams(rng: random.Random) -> list[Upstream]:
    """N upstream channels; each emits ids in increasing order, sometimes cancels, skips, ends.

    About EVENTS_PER_RUN events (barriers, cancel markers, ends) with records between them.
    """
    upstreams = [Upstream() for _ in range(rng.randint(1, 5))]
    live = list(upstreams)
    checkpoint_id = 0
    events = 0
    while live and events < EVENTS_PER_RUN:
        checkpoint_id += rng.randint(1, 2)
        for up in list(live):
            for _ in range(rng.randint(0, 3)):
                up.frames.append(("rec", None))
                up.records += 1
            roll = rng.random()
            if roll < 0.1:
                up.frames.append(("evt", CancelCheckpointMarker(checkpoint_id)))
                events += 1
            elif roll < 0.15:
                pass  # this upstream never saw the checkpoint
            else:
                up.records_before[checkpoint_id] = up.records
                up.frames.append(("evt", barrier(checkpoint_id)))
                events += 1
            if rng.random() < 0.002:
                live.remove(up)
                up.frames.append(("evt", EndOfPartition()))
                events += 1
    for up in live:
        up.frames.append(("evt", EndOfPartition()))
    return upstreams


@dataclass
class Run:
    """The task loop around a handler, checking invariants after every decision."""

    handler: BarrierHandler
    upstreams: list[Upstream]
    exactly_once: bool
    processed: list[int] = field(init=False)
    ended: set[int] = field(default_factory=set)
    delivered: dict[int, set[int]] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)
    triggered: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.processed = [0] * len(self.upstreams)

    def blocked(self) -> set[int]:
        blocked = set(self.handler.blocked_channels)
        n = len(self.upstreams)
        assert blocked == {c for c in range(n) if self.handler.is_blocked(c)}
        assert not blocked or self.handler.is_aligning
        return blocked

    def run(self, rng: random.Random) -> None:
        queues = [deque(up.frames) for up in self.upstreams]
        while readable := [c for c, q in enumerate(queues) if q and not self.handler.is_blocked(c)]:
            channel = rng.choice(readable)
            kind, event = queues[channel].popleft()
            if kind == "rec":
                self.processed[channel] += 1
                continue
            before = self.blocked()
            match event:
                case CheckpointBarrier(checkpoint_id=checkpoint_id):
                    self.delivered.setdefault(checkpoint_id, set()).add(channel)
                case CancelCheckpointMarker(checkpoint_id=checkpoint_id):
                    self.cancelled.add(checkpoint_id)
                case EndOfPartition():
                    self.ended.add(channel)
            assert event is not None
            self.check(channel, before, handle_event(self.handler, channel, event))
        # No deadlock: every frame was read, so every blocked channel was released.
        assert all(not q for q in queues), "a channel stayed blocked with frames to deliver"
        assert self.blocked() == set()
        assert not self.handler.is_aligning

    def check(self, channel: int, before: set[int], actions: list[Action]) -> None:
        after = self.blocked()
        released: list[int] = []
        for i, action in enumerate(actions):
            match action:
                case TriggerCheckpoint(barrier=b):
                    self.check_trigger(b.checkpoint_id)
                case AbortCheckpoint(checkpoint_id=checkpoint_id):
                    assert checkpoint_id not in self.triggered + self.aborted
                    self.aborted.append(checkpoint_id)
                    self.stats["aborts"] += 1
                case Unblock(channels=channels):
                    assert i > 0 and isinstance(actions[i - 1], TriggerCheckpoint | AbortCheckpoint)
                    released += channels
                    self.stats["unblocks"] += 1
        assert len(released) == len(set(released)) and set(released) <= before
        assert before - after == set(released), "a channel was unblocked silently"
        assert after - before <= {channel}
        if outcomes(actions):
            assert after <= {channel}, "channels stayed blocked after a trigger or abort"
        if not self.exactly_once:
            assert after == set()

    def check_trigger(self, checkpoint_id: int) -> None:
        assert not self.triggered or checkpoint_id > self.triggered[-1]
        assert checkpoint_id not in self.aborted
        assert checkpoint_id not in self.cancelled, "triggered a checkpoint cancelled upstream"
        self.triggered.append(checkpoint_id)
        self.stats["triggers"] += 1
        delivered = self.delivered.get(checkpoint_id, set())
        assert delivered, "triggered a checkpoint no channel delivered"
        for channel, up in enumerate(self.upstreams):
            if channel not in delivered:
                assert channel in self.ended, f"open channel {channel} lacks barrier"
                self.stats["triggers with ended channels"] += 1
            elif self.exactly_once:  # the snapshot holds exactly the pre-barrier records
                assert self.processed[channel] == up.records_before[checkpoint_id]
            else:
                assert self.processed[channel] >= up.records_before[checkpoint_id]


def run_model(seed: int, exactly_once: bool) -> Run:
    rng = random.Random(seed)
    upstreams = generate_upstreams(rng)
    n = len(upstreams)
    handler: BarrierHandler = (
        SingleCheckpointBarrierHandler(n)
        if exactly_once
        else TrackingBarrierHandler(n, max_tracked=rng.choice([2, 4, 50]))
    )
    run = Run(handler, upstreams, exactly_once)
    run.run(rng)
    return run


@pytest.mark.parametrize("seed", SEEDS)
def test_aligned_random_runs_keep_every_invariant(seed: int) -> None:
    run_model(seed, exactly_once=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_tracking_random_runs_keep_every_invariant(seed: int) -> None:
    run_model(seed, exactly_once=False)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["aligned", "tracking"])
def test_the_random_model_exercises_triggers_aborts_unblocks_and_ends(exactly_once: bool) -> None:
    stats: Counter[str] = Counter()
    for seed in SEEDS:
        stats += run_model(seed, exactly_once).stats
    assert stats["triggers"] > 1000
    assert stats["aborts"] > 500
    assert stats["triggers with ended channels"] > 50
    if exactly_once:
        assert stats["unblocks"] > 1000
