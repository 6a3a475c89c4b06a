"""Properties of exactly-once barrier handling (hypothesis stateful tests of
tidegate/runtime/barriers.py's SingleCheckpointBarrierHandler), in every checkpoint kind mixed:
aligned, unaligned, and aligned with a timeout that switches to unaligned.

Random event orders obey what the network guarantees (each channel delivers ids in increasing
order, reads nothing while blocked, nothing after its end) and the handler's decisions are
checked against a model: an aligned checkpoint triggers exactly when the last open channel
delivered its barrier, a snapshot never misses a channel (each open channel either delivered
the barrier or is persisted as in flight), blocked channels are released exactly when the
checkpoint triggers or aborts, and no id is both triggered and aborted, or triggered twice.
The scripted cases are in test_barriers.py and test_unaligned_barriers.py.
"""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.scheduling import ManualClock
from tidegate.runtime.barriers import (
    AbortCheckpoint,
    Action,
    SingleCheckpointBarrierHandler,
    TriggerCheckpoint,
    Unblock,
)
from tidegate.runtime.events import CheckpointBarrier

KINDS = {
    "aligned": CheckpointOptions(),
    "unaligned": CheckpointOptions(unaligned=True),
    "timeout": CheckpointOptions(aligned_timeout_ms=50),
}


class BarrierAlignment(RuleBasedStateMachine):
    """One subtask's input gate fed by upstream channels and the driver's trigger."""

    @initialize(channels=st.integers(1, 4))
    def start(self, channels: int) -> None:
        self.clock = ManualClock()
        self.handler = SingleCheckpointBarrierHandler(channels, self.clock.now)
        self.channels = channels
        self.open = set(range(channels))
        #: checkpoint id -> its kind (the coordinator fixes it when it triggers)
        self.kinds: dict[int, str] = {}
        #: the last id each channel delivered (a barrier or a cancel marker)
        self.last_sent = [0] * channels
        self.delivered: dict[int, set[int]] = {}
        self.cancelled: set[int] = set()
        self.triggered: list[int] = []
        self.aborted: set[int] = set()
        self.blocked: set[int] = set()

    # -- events ------------------------------------------------------------------------------

    def barrier_of(self, checkpoint_id: int, kind: str) -> CheckpointBarrier:
        kind = self.kinds.setdefault(checkpoint_id, kind)
        return CheckpointBarrier(checkpoint_id, checkpoint_id * 1000, KINDS[kind])

    def readable(self) -> list[int]:
        return sorted(self.open - self.handler.blocked_channels)

    @precondition(lambda self: self.readable())
    @rule(data=st.data(), step=st.integers(0, 2), kind=st.sampled_from(sorted(KINDS)))
    def barrier(self, data: st.DataObject, step: int, kind: str) -> None:
        channel = data.draw(st.sampled_from(self.readable()))
        checkpoint_id = max(self.last_sent[channel] + 1, self.handler.current_checkpoint_id + step)
        self.last_sent[channel] = checkpoint_id
        self.delivered.setdefault(checkpoint_id, set()).add(channel)
        b = self.barrier_of(checkpoint_id, kind)
        aligned_complete = (
            not b.options.unaligned
            and checkpoint_id > max([*self.triggered, *self.aborted, 0])
            and checkpoint_id not in self.cancelled
            and self.open <= self.delivered[checkpoint_id]
        )
        actions = self.handler.on_barrier(channel, b)
        self.check(actions)
        if aligned_complete:  # the last open channel delivered barrier n: it triggers now
            assert any(
                isinstance(a, TriggerCheckpoint) and a.barrier.checkpoint_id == checkpoint_id
                for a in actions
            )

    @precondition(lambda self: self.readable())
    @rule(data=st.data(), step=st.integers(0, 2))
    def cancel_marker(self, data: st.DataObject, step: int) -> None:
        channel = data.draw(st.sampled_from(self.readable()))
        checkpoint_id = max(self.last_sent[channel] + 1, self.handler.current_checkpoint_id + step)
        self.last_sent[channel] = checkpoint_id
        self.cancelled.add(checkpoint_id)
        self.check(self.handler.on_cancel_marker(channel, checkpoint_id))

    @precondition(lambda self: self.readable())
    @rule(data=st.data())
    def end_of_partition(self, data: st.DataObject) -> None:
        channel = data.draw(st.sampled_from(self.readable()))
        self.open.discard(channel)
        self.check(self.handler.on_end_of_partition(channel))

    @rule(step=st.integers(0, 2), kind=st.sampled_from(sorted(KINDS)))
    def driver_trigger(self, step: int, kind: str) -> None:
        """The driver's trigger overtakes the records queued in front of the barriers."""
        checkpoint_id = self.handler.current_checkpoint_id + step
        if checkpoint_id < 1:
            return
        self.check(self.handler.on_trigger(self.barrier_of(checkpoint_id, kind)))

    @rule(seconds=st.sampled_from([0.01, 0.03, 0.06]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.check(self.handler.on_timer())

    @rule()
    def task_declines(self) -> None:
        self.check(self.handler.abort_current("the snapshot failed"))

    # -- checks ------------------------------------------------------------------------------

    def check(self, actions: list[Action]) -> None:
        before, after = self.blocked, set(self.handler.blocked_channels)
        released: list[int] = []
        for i, action in enumerate(actions):
            match action:
                case TriggerCheckpoint(barrier=b, unaligned_channels=in_flight):
                    self.check_trigger(b, in_flight)
                case AbortCheckpoint(checkpoint_id=checkpoint_id):
                    assert checkpoint_id not in self.triggered, "aborted a triggered checkpoint"
                    assert checkpoint_id not in self.aborted, "aborted twice"
                    self.aborted.add(checkpoint_id)
                case Unblock(channels=channels):
                    assert i > 0 and not isinstance(actions[i - 1], Unblock)
                    released += channels
        assert len(released) == len(set(released)), "a channel released twice"
        assert set(released) == before - after, "blocked channels released silently or not"
        if any(isinstance(a, TriggerCheckpoint | AbortCheckpoint) for a in actions):
            # the outcome ends the alignment: what stays blocked belongs to a newer one
            assert after <= self.delivered.get(self.handler.current_checkpoint_id, set())
        self.blocked = after

    def check_trigger(self, b: CheckpointBarrier, in_flight: tuple[int, ...] | None) -> None:
        n = b.checkpoint_id
        assert not self.triggered or n > self.triggered[-1], "ids must only grow"
        assert n not in self.aborted and n not in self.cancelled
        self.triggered.append(n)
        event(f"trigger {'aligned' if in_flight is None else 'unaligned'} ({self.kinds[n]})")
        delivered = self.delivered.get(n, set())
        if in_flight is None:  # aligned: every open channel delivered the barrier
            assert self.kinds[n] != "unaligned"
            assert self.open <= delivered
        else:  # unaligned: the others' records up to the barrier are persisted
            assert self.kinds[n] != "aligned"
            assert set(in_flight) == self.open - delivered

    @invariant()
    def blocked_channels_delivered_the_current_barrier(self) -> None:
        if not hasattr(self, "handler"):
            return
        blocked = set(self.handler.blocked_channels)
        assert not blocked or self.handler.is_aligning
        current = self.handler.current_checkpoint_id
        assert blocked <= self.delivered.get(current, set()) & self.open | blocked - self.open
        if self.handler.is_aligning:
            assert self.kinds[current] != "unaligned", "an unaligned checkpoint never aligns"
            assert current not in self.triggered and current not in self.aborted


BarrierAlignment.TestCase.settings = settings(max_examples=100, stateful_step_count=40)
test_barrier_alignment = BarrierAlignment.TestCase
