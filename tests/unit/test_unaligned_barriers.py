"""Scripted tests (injected clock) for unaligned checkpoints and the aligned-checkpoint timeout
in SingleCheckpointBarrierHandler."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.runtime.barriers import (
    AbortCheckpoint,
    SingleCheckpointBarrierHandler,
    TriggerCheckpoint,
    Unblock,
)
from tidegate.runtime.events import CheckpointBarrier

UNALIGNED = CheckpointOptions(unaligned=True)
TIMEOUT_50 = CheckpointOptions(aligned_timeout_ms=50)
SAVEPOINT_WITH_TIMEOUT = CheckpointOptions(
    checkpoint_type=CheckpointType.SAVEPOINT, aligned_timeout_ms=50
)


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000


def barrier(cid: int, options: CheckpointOptions = UNALIGNED) -> CheckpointBarrier:
    return CheckpointBarrier(cid, 1000 * cid, options)


def handler(channels: int = 3) -> tuple[SingleCheckpointBarrierHandler, Clock]:
    clock = Clock()
    return SingleCheckpointBarrierHandler(channels, clock), clock


# ------------------------------------------------------------------------------- unaligned


def test_the_trigger_snapshots_at_once_with_every_open_channel_in_flight() -> None:
    h, _ = handler(3)
    h.on_end_of_partition(1)
    assert h.on_trigger(barrier(1)) == [TriggerCheckpoint(barrier(1), (0, 2))]
    assert not h.is_aligning and h.blocked_channels == frozenset()
    # the barriers that follow on the data path are late: they only end the in-flight data
    assert h.on_barrier(0, barrier(1)) == []
    assert h.on_barrier(2, barrier(1)) == []


def test_a_barrier_overtaking_the_trigger_snapshots_without_its_own_channel() -> None:
    h, _ = handler(3)
    assert h.on_barrier(2, barrier(4)) == [TriggerCheckpoint(barrier(4), (0, 1))]
    assert h.on_trigger(barrier(4)) == []  # the trigger came second: late
    assert h.on_barrier(0, barrier(4)) == []
    assert h.current_checkpoint_id == 4


def test_unaligned_never_blocks_any_channel() -> None:
    h, _ = handler(2)
    h.on_trigger(barrier(1))
    for cid in (1, 2, 3):
        for channel in (0, 1):
            h.on_barrier(channel, barrier(cid))
            assert not h.is_blocked(channel)
    assert h.current_checkpoint_id == 3


def test_an_unaligned_trigger_subsumes_an_aligned_alignment_in_progress() -> None:
    h, _ = handler(2)
    assert h.on_barrier(0, barrier(1, CheckpointOptions())) == []
    assert h.is_blocked(0)
    actions = h.on_trigger(barrier(2))
    assert actions[0] == AbortCheckpoint(1, "subsumed by checkpoint 2")
    assert actions[1:] == [Unblock((0,)), TriggerCheckpoint(barrier(2), (0, 1))]


def test_a_cancel_marker_before_the_trigger_cancels_it() -> None:
    h, _ = handler(2)
    assert h.on_cancel_marker(1, 3) == [
        AbortCheckpoint(3, "checkpoint 3 cancelled upstream (channel 1)")
    ]
    assert h.on_trigger(barrier(3)) == []
    assert h.on_barrier(0, barrier(3)) == []
    assert h.on_trigger(barrier(4)) == [TriggerCheckpoint(barrier(4), (0, 1))]


def test_a_cancel_marker_after_the_trigger_is_late() -> None:
    h, _ = handler(2)
    h.on_trigger(barrier(3))
    assert h.on_cancel_marker(0, 3) == []
    assert h.on_cancel_marker(1, 2) == []


def test_old_triggers_and_barriers_are_ignored() -> None:
    h, _ = handler(2)
    h.on_trigger(barrier(5))
    assert h.on_trigger(barrier(4)) == []
    assert h.on_barrier(0, barrier(3)) == []
    assert h.on_trigger(barrier(5)) == []


def test_the_trigger_of_an_aligned_checkpoint_without_timeout_is_ignored() -> None:
    h, _ = handler(2)
    assert h.on_trigger(barrier(1, CheckpointOptions())) == []
    assert h.alignment_deadline is None
    assert h.on_barrier(0, barrier(1, CheckpointOptions())) == []
    assert h.is_blocked(0)


# --------------------------------------------------------------------- alignment timeout


def test_timer_first_switches_the_alignment_to_unaligned() -> None:
    h, clock = handler(3)
    assert h.on_barrier(0, barrier(1, TIMEOUT_50)) == []
    assert h.on_barrier(2, barrier(1, TIMEOUT_50)) == []
    clock.advance(49)
    assert h.on_timer() == []
    clock.advance(1)
    # blocked channels already delivered the barrier: released, not in flight
    assert h.on_timer() == [TriggerCheckpoint(barrier(1, TIMEOUT_50), (1,)), Unblock((0, 2))]
    assert not h.is_aligning and h.alignment_deadline is None
    assert h.on_barrier(1, barrier(1, TIMEOUT_50)) == []  # late now


def test_next_barrier_first_switches_when_the_timeout_passed() -> None:
    h, clock = handler(3)
    h.on_barrier(0, barrier(1, TIMEOUT_50))
    clock.advance(80)  # the timer has not fired yet
    assert h.on_barrier(2, barrier(1, TIMEOUT_50)) == [
        TriggerCheckpoint(barrier(1, TIMEOUT_50), (1,)),
        Unblock((0,)),
    ]
    assert h.on_timer() == []


def test_no_switch_once_the_last_barrier_came() -> None:
    h, clock = handler(2)
    h.on_barrier(0, barrier(1, TIMEOUT_50))
    clock.advance(500)
    assert h.on_barrier(1, barrier(1, TIMEOUT_50)) == [
        TriggerCheckpoint(barrier(1, TIMEOUT_50)),
        Unblock((0,)),
    ]
    assert h.on_timer() == []


def test_a_savepoint_never_switches() -> None:
    h, clock = handler(2)
    assert h.on_trigger(barrier(1, SAVEPOINT_WITH_TIMEOUT)) == []
    h.on_barrier(0, barrier(1, SAVEPOINT_WITH_TIMEOUT))
    clock.advance(10_000)
    assert h.alignment_deadline is None
    assert h.on_timer() == []
    assert h.on_barrier(1, barrier(1, SAVEPOINT_WITH_TIMEOUT)) == [
        TriggerCheckpoint(barrier(1, SAVEPOINT_WITH_TIMEOUT)),
        Unblock((0,)),
    ]


def test_the_timeout_runs_from_the_trigger_announcement() -> None:
    h, clock = handler(2)
    assert h.on_trigger(barrier(1, TIMEOUT_50)) == []
    assert h.alignment_deadline == pytest.approx(clock.now + 0.05)
    clock.advance(40)  # the barriers are stuck behind backpressured records
    assert h.on_barrier(0, barrier(1, TIMEOUT_50)) == []
    assert h.alignment_deadline == pytest.approx(clock.now + 0.01)
    clock.advance(10)
    assert h.on_timer() == [TriggerCheckpoint(barrier(1, TIMEOUT_50), (1,)), Unblock((0,))]


def test_an_announced_checkpoint_whose_barriers_are_all_late_goes_unaligned_on_the_timer() -> None:
    h, clock = handler(3)
    h.on_end_of_partition(2)
    h.on_trigger(barrier(7, TIMEOUT_50))
    clock.advance(50)
    assert h.on_timer() == [TriggerCheckpoint(barrier(7, TIMEOUT_50), (0, 1))]
    assert h.on_barrier(0, barrier(7, TIMEOUT_50)) == []
    assert h.alignment_deadline is None


def test_a_cancel_marker_drops_the_announcement() -> None:
    h, clock = handler(2)
    h.on_trigger(barrier(2, TIMEOUT_50))
    assert h.on_cancel_marker(0, 2) == [
        AbortCheckpoint(2, "checkpoint 2 cancelled upstream (channel 0)")
    ]
    clock.advance(100)
    assert h.alignment_deadline is None and h.on_timer() == []


def test_a_newer_announcement_replaces_an_older_one() -> None:
    h, clock = handler(2)
    h.on_trigger(barrier(1, TIMEOUT_50))
    clock.advance(30)
    h.on_trigger(barrier(2, TIMEOUT_50))
    clock.advance(30)
    assert h.on_timer() == []
    clock.advance(20)
    assert h.on_timer() == [TriggerCheckpoint(barrier(2, TIMEOUT_50), (0, 1))]


def test_a_barrier_of_another_checkpoint_does_not_inherit_the_announcement_clock() -> None:
    h, clock = handler(2)
    h.on_trigger(barrier(1, TIMEOUT_50))
    clock.advance(45)
    h.on_barrier(0, barrier(2, TIMEOUT_50))  # checkpoint 1 never reached this subtask
    clock.advance(10)
    assert h.on_timer() == []  # 10 ms into checkpoint 2's own alignment
    clock.advance(40)
    assert h.on_timer() == [TriggerCheckpoint(barrier(2, TIMEOUT_50), (1,)), Unblock((0,))]


def test_zero_timeout_switches_at_the_first_barrier_that_does_not_complete() -> None:
    options = CheckpointOptions(aligned_timeout_ms=0)
    h, _ = handler(2)
    assert h.on_barrier(1, barrier(1, options)) == [TriggerCheckpoint(barrier(1, options), (0,))]
