"""Barrier handlers: pure decision logic for checkpoint barriers on a subtask's input channels.

A handler takes the events of one input gate (barriers, cancel markers, end of partition, each
tagged with its channel index) and returns the actions the task loop must apply, in list
order. It does no I/O, keeps no clock and starts no thread (the shape of Flink's
``SingleCheckpointBarrierHandler`` / ``CheckpointBarrierTracker`` state and dask's
``handle_stimulus``).

Two handlers, one per checkpointing mode (DESIGN.md section 2, step 3):

- ``SingleCheckpointBarrierHandler`` (EXACTLY_ONCE), one checkpoint at a time, in the kind each
  barrier's options ask for:

  * aligned: a channel that delivered barrier n is blocked until barrier n arrived on every
    open channel; then the subtask snapshots and the channels are released;
  * unaligned: the first of the driver's trigger (``on_trigger``, which overtakes everything
    queued) and the first barrier n snapshots at once; nothing is blocked, and the channels
    that have not delivered barrier n yet are named in ``TriggerCheckpoint.unaligned_channels``:
    their records up to barrier n are the in-flight data the task persists as channel state;
  * aligned with a timeout (``options.aligned_timeout_ms``): aligned, but once the checkpoint
    has been waited for that long (noticed by ``on_timer`` or by the next barrier, whichever
    comes first) it switches to unaligned. The clock starts at the driver's trigger, which
    reaches every subtask ahead of the barriers as an announcement (``on_trigger``), so a
    barrier stuck behind backpressured records times out too, as in Flink. Never for
    savepoints, never once the last barrier came.

- ``TrackingBarrierHandler`` (AT_LEAST_ONCE): barriers are only counted; nothing is blocked.

Contract for the task loop:

1. Feed every event in channel order; ``handle_event`` dispatches an ``Event`` by type.
2. Apply the returned actions in order. ``TriggerCheckpoint`` always precedes the ``Unblock``
   of the same decision, so the snapshot is taken before any post-barrier record is processed.
3. While ``is_blocked(channel)`` holds, hand none of that channel's frames to the operators or
   to the handler: leave them unread or stash them; ``Unblock`` lists the channels to replay.
4. Protocol violations (a barrier on a blocked or ended channel, a duplicate barrier, any
   event after ``EndOfPartition``, a channel index out of range) raise ``ValueError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tidegate.runtime.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
    Event,
)

__all__ = [
    "AbortCheckpoint",
    "Action",
    "BarrierHandler",
    "SingleCheckpointBarrierHandler",
    "TrackingBarrierHandler",
    "TriggerCheckpoint",
    "Unblock",
    "handle_event",
]

NO_CHECKPOINT = -1
"""``current_checkpoint_id`` before any barrier or cancel marker was seen."""


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """Snapshot now, then forward the barrier.

    Aligned (``unaligned_channels`` is None): every open input delivered the barrier.
    Unaligned: the channels listed have not delivered it yet; their records up to the barrier
    are in flight and must be persisted with the snapshot (and still processed).
    """

    barrier: CheckpointBarrier
    unaligned_channels: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class AbortCheckpoint:
    """Forward a ``CancelCheckpointMarker`` downstream and decline to the coordinator."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Unblock:
    """Replay the frames stashed for these channels (each in order) and read them again."""

    channels: tuple[int, ...]


Action = TriggerCheckpoint | AbortCheckpoint | Unblock


class BarrierHandler(Protocol):
    """What the task loop needs from either handler."""

    @property
    def current_checkpoint_id(self) -> int: ...

    @property
    def is_aligning(self) -> bool: ...

    @property
    def blocked_channels(self) -> frozenset[int]: ...

    @property
    def alignment_deadline(self) -> float | None: ...

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> list[Action]: ...

    def on_trigger(self, barrier: CheckpointBarrier) -> list[Action]: ...

    def on_timer(self) -> list[Action]: ...

    def on_cancel_marker(self, channel: int, checkpoint_id: int) -> list[Action]: ...

    def on_end_of_partition(self, channel: int) -> list[Action]: ...

    def is_blocked(self, channel: int) -> bool: ...

    def abort_current(self, reason: str) -> list[Action]: ...


def handle_event(handler: BarrierHandler, channel: int, event: Event) -> list[Action]:
    """Dispatch one channel event to ``handler``; ``EndOfData`` needs no barrier decision."""
    match event:
        case CheckpointBarrier():
            return handler.on_barrier(channel, event)
        case CancelCheckpointMarker(checkpoint_id=checkpoint_id):
            return handler.on_cancel_marker(channel, checkpoint_id)
        case EndOfPartition():
            return handler.on_end_of_partition(channel)
        case EndOfData():
            return []
        case _:
            raise TypeError(f"not a channel event: {event!r}")


def _require_positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _require_open(num_channels: int, open_channels: set[int], channel: int, what: str) -> None:
    if not 0 <= channel < num_channels:
        raise ValueError(f"{what} on channel {channel}: only {num_channels} input channels")
    if channel not in open_channels:
        raise ValueError(f"{what} on channel {channel} after its EndOfPartition")


class SingleCheckpointBarrierHandler:
    """Exactly-once barrier handling of one checkpoint at a time over ``num_channels`` inputs.

    States: *idle* (``is_aligning`` false) and *aligning checkpoint n* (aligned barriers only;
    an unaligned checkpoint triggers at once). Ids only grow: an event for an id below
    ``current_checkpoint_id``, or for the current id once it was triggered or aborted, is late
    and ignored. A channel that delivered barrier n and then ended still counts as having
    delivered it (and is released with the others). ``clock`` (monotonic seconds) times the
    alignment for ``aligned_timeout_ms``.
    """

    def __init__(self, num_channels: int, clock: Callable[[], float] = time.monotonic) -> None:
        _require_positive("num_channels", num_channels)
        self._num_channels = num_channels
        self._clock = clock
        self._open: set[int] = set(range(num_channels))
        self._current_id = NO_CHECKPOINT
        self._aligning = False
        self._barrier: CheckpointBarrier | None = None
        #: when the current alignment started (clock seconds)
        self._started = 0.0
        #: open channels that have not delivered the current barrier yet
        self._waiting: set[int] = set()
        #: blocked channels in the order their barrier arrived (a dict as an ordered set)
        self._blocked: dict[int, None] = {}
        #: an aligned-with-timeout checkpoint announced by the trigger, and when
        self._announced: tuple[CheckpointBarrier, float] | None = None

    @property
    def current_checkpoint_id(self) -> int:
        """The id being aligned, else the last one triggered or aborted (-1 before any)."""
        return self._current_id

    @property
    def is_aligning(self) -> bool:
        return self._aligning

    @property
    def blocked_channels(self) -> frozenset[int]:
        return frozenset(self._blocked)

    @property
    def alignment_deadline(self) -> float | None:
        """Clock time at which the current alignment switches to unaligned (None: never)."""
        if self._aligning:
            barrier, started = self._barrier, self._started
        elif self._announced is not None:
            barrier, started = self._announced
        else:
            return None
        if barrier is None or not _may_switch(barrier):
            return None
        return started + barrier.options.aligned_timeout_ms / 1000  # type: ignore[operator]

    def is_blocked(self, channel: int) -> bool:
        return channel in self._blocked

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "barrier")
        checkpoint_id = barrier.checkpoint_id
        if channel in self._blocked:
            kind = "duplicate barrier" if checkpoint_id == self._current_id else "barrier"
            raise ValueError(
                f"{kind} {checkpoint_id} on channel {channel}, which is blocked on "
                f"checkpoint {self._current_id} and must not be read"
            )
        if self._is_late(checkpoint_id):
            return []
        actions: list[Action] = []
        if checkpoint_id > self._current_id:
            # Step 1: a newer barrier subsumes an unfinished alignment, then starts its own.
            actions += self._subsume(f"barrier {checkpoint_id}")
            if barrier.options.unaligned:
                return actions + self._trigger_unaligned(barrier, self._open - {channel})
            self._start(barrier)
            if self._announced is not None:
                if self._announced[0].checkpoint_id == checkpoint_id:
                    self._started = self._announced[1]  # the timeout runs from the trigger
                self._announced = None
        # Step 2: the channel has delivered; the last one triggers, the others block...
        self._waiting.discard(channel)
        if not self._waiting:
            return actions + self._trigger()
        # ... unless the alignment took too long: then the checkpoint goes unaligned now.
        deadline = self.alignment_deadline
        if deadline is not None and self._clock() >= deadline:
            return actions + self._switch_to_unaligned()
        self._blocked[channel] = None
        return actions

    def on_trigger(self, barrier: CheckpointBarrier) -> list[Action]:
        """The driver's trigger, which overtakes queued records: an unaligned checkpoint
        snapshots now; an aligned one with a timeout starts its clock (an announcement)."""
        checkpoint_id = barrier.checkpoint_id
        if self._is_late(checkpoint_id):
            return []
        if not barrier.options.unaligned:
            if _may_switch(barrier) and checkpoint_id > self._current_id:
                announced = self._announced
                if announced is None or announced[0].checkpoint_id < checkpoint_id:
                    self._announced = (barrier, self._clock())
            return []
        if checkpoint_id == self._current_id:  # unreachable in practice: never aligned
            return self._switch_to_unaligned()
        actions = self._subsume(f"checkpoint {checkpoint_id}")
        return actions + self._trigger_unaligned(barrier, set(self._open))

    def on_timer(self) -> list[Action]:
        """Switch to unaligned if the current checkpoint's timeout has passed: the alignment
        in progress, or an announced checkpoint none of whose barriers arrived yet."""
        deadline = self.alignment_deadline
        if deadline is None or self._clock() < deadline:
            return []
        if self._aligning:
            return self._switch_to_unaligned()
        assert self._announced is not None
        barrier = self._announced[0]
        return self._trigger_unaligned(barrier, set(self._open))

    def on_cancel_marker(self, channel: int, checkpoint_id: int) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "cancel marker")
        if self._is_late(checkpoint_id):
            return []
        reason = f"checkpoint {checkpoint_id} cancelled upstream (channel {channel})"
        if checkpoint_id == self._current_id:
            return self._finish(AbortCheckpoint(checkpoint_id, reason))
        actions = self._subsume(f"cancel marker {checkpoint_id}")
        # Remember the cancelled id as done so that its later barriers are ignored.
        self._current_id = checkpoint_id
        if self._announced is not None and self._announced[0].checkpoint_id <= checkpoint_id:
            self._announced = None
        actions.append(AbortCheckpoint(checkpoint_id, reason))
        return actions

    def on_end_of_partition(self, channel: int) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "EndOfPartition")
        self._open.discard(channel)
        if not self._aligning or channel not in self._waiting:
            return []
        self._waiting.discard(channel)
        return [] if self._waiting else self._trigger()

    def abort_current(self, reason: str) -> list[Action]:
        """Abort the checkpoint being aligned (e.g. the task declines it) and unblock."""
        if not self._aligning:
            return []
        return self._finish(AbortCheckpoint(self._current_id, reason))

    def _is_late(self, checkpoint_id: int) -> bool:
        if checkpoint_id == self._current_id:
            return not self._aligning
        return checkpoint_id < self._current_id

    def _subsume(self, by: str) -> list[Action]:
        if not self._aligning:
            return []
        return self._finish(AbortCheckpoint(self._current_id, f"subsumed by {by}"))

    def _start(self, barrier: CheckpointBarrier) -> None:
        self._current_id = barrier.checkpoint_id
        self._aligning = True
        self._barrier = barrier
        self._started = self._clock()
        self._waiting = set(self._open)

    def _trigger(self) -> list[Action]:
        assert self._barrier is not None
        return self._finish(TriggerCheckpoint(self._barrier))

    def _trigger_unaligned(self, barrier: CheckpointBarrier, waiting: set[int]) -> list[Action]:
        self._current_id = barrier.checkpoint_id
        if self._announced is not None and self._announced[0].checkpoint_id <= self._current_id:
            self._announced = None
        return [TriggerCheckpoint(barrier, tuple(sorted(waiting)))]

    def _switch_to_unaligned(self) -> list[Action]:
        """Snapshot the alignment in progress now; blocked channels already delivered the
        barrier (their stashed records come after it), the waiting ones are in flight."""
        assert self._barrier is not None
        waiting = tuple(sorted(self._waiting))
        return self._finish(TriggerCheckpoint(self._barrier, waiting))

    def _finish(self, outcome: TriggerCheckpoint | AbortCheckpoint) -> list[Action]:
        """End the current alignment: the outcome first, then release every blocked channel."""
        self._aligning = False
        self._barrier = None
        self._waiting = set()
        actions: list[Action] = [outcome]
        if self._blocked:
            actions.append(Unblock(tuple(self._blocked)))
            self._blocked = {}
        return actions


def _may_switch(barrier: CheckpointBarrier) -> bool:
    options = barrier.options
    return options.aligned_timeout_ms is not None and not options.is_savepoint


@dataclass(slots=True)
class _Pending:
    barrier: CheckpointBarrier
    seen: set[int] = field(default_factory=set)


class TrackingBarrierHandler:
    """At-least-once barrier counting over ``num_channels`` inputs; never blocks.

    Keeps up to ``max_tracked`` pending checkpoints (ascending ids), each with the channels
    that delivered its barrier. A pending id triggers once every open channel delivered it;
    pending ids below it are then aborted as subsumed. A barrier for an id that is neither
    pending nor newer than every id seen so far cannot complete any more and is ignored.
    """

    def __init__(self, num_channels: int, max_tracked: int = 50) -> None:
        _require_positive("num_channels", num_channels)
        _require_positive("max_tracked", max_tracked)
        self._num_channels = num_channels
        self._max_tracked = max_tracked
        self._open: set[int] = set(range(num_channels))
        self._latest_id = NO_CHECKPOINT
        self._pending: dict[int, _Pending] = {}

    @property
    def current_checkpoint_id(self) -> int:
        """The newest id seen in a barrier or cancel marker (-1 before any)."""
        return self._latest_id

    @property
    def is_aligning(self) -> bool:
        """Whether some checkpoint is pending (has barriers from only some channels)."""
        return bool(self._pending)

    @property
    def blocked_channels(self) -> frozenset[int]:
        return frozenset()

    @property
    def pending_checkpoint_ids(self) -> tuple[int, ...]:
        return tuple(self._pending)

    def is_blocked(self, channel: int) -> bool:
        return False

    @property
    def alignment_deadline(self) -> float | None:
        return None

    def on_trigger(self, barrier: CheckpointBarrier) -> list[Action]:
        """At-least-once checkpoints are never unaligned: the trigger is not for this task."""
        return []

    def on_timer(self) -> list[Action]:
        return []

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "barrier")
        checkpoint_id = barrier.checkpoint_id
        actions: list[Action] = []
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            if checkpoint_id <= self._latest_id:
                return []
            # Step 1: first barrier of a new id; evict the oldest beyond the bound.
            self._latest_id = checkpoint_id
            pending = self._pending[checkpoint_id] = _Pending(barrier)
            while len(self._pending) > self._max_tracked:
                oldest = next(iter(self._pending))
                del self._pending[oldest]
                actions.append(
                    AbortCheckpoint(
                        oldest, f"too many pending checkpoints (max_tracked={self._max_tracked})"
                    )
                )
        elif channel in pending.seen:
            raise ValueError(f"duplicate barrier {checkpoint_id} on channel {channel}")
        # Step 2: count the channel; only this id can have become complete.
        pending.seen.add(channel)
        if self._open <= pending.seen:
            actions += self._complete(checkpoint_id)
        return actions

    def on_cancel_marker(self, channel: int, checkpoint_id: int) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "cancel marker")
        reason = f"checkpoint {checkpoint_id} cancelled upstream (channel {channel})"
        if self._pending.pop(checkpoint_id, None) is not None:
            return [AbortCheckpoint(checkpoint_id, reason)]
        if checkpoint_id > self._latest_id:
            self._latest_id = checkpoint_id
            return [AbortCheckpoint(checkpoint_id, reason)]
        return []

    def on_end_of_partition(self, channel: int) -> list[Action]:
        _require_open(self._num_channels, self._open, channel, "EndOfPartition")
        self._open.discard(channel)
        actions: list[Action] = []
        for checkpoint_id in list(self._pending):  # ascending; completed ones drop older ids
            pending = self._pending.get(checkpoint_id)
            if pending is not None and self._open <= pending.seen:
                actions += self._complete(checkpoint_id)
        return actions

    def abort_current(self, reason: str) -> list[Action]:
        """Abort every pending checkpoint, oldest first; their later barriers are ignored."""
        actions: list[Action] = [AbortCheckpoint(i, reason) for i in self._pending]
        self._pending.clear()
        return actions

    def _complete(self, checkpoint_id: int) -> list[Action]:
        actions: list[Action] = []
        for older in [i for i in self._pending if i < checkpoint_id]:
            del self._pending[older]
            actions.append(AbortCheckpoint(older, f"subsumed by checkpoint {checkpoint_id}"))
        actions.append(TriggerCheckpoint(self._pending.pop(checkpoint_id).barrier))
        return actions
