"""In-flight data of an unaligned checkpoint: the records each input channel delivers after the
subtask's snapshot and before that channel's barrier (Chandy-Lamport channel state).

``InFlightRecorder`` is pure bookkeeping; the input gate feeds it every frame in arrival order,
under its lock, so a frame is recorded exactly when it is in flight whether it was already
queued when the snapshot was taken or arrives later. Recorded frames are still processed
normally: channel state is replayed only when the job restores from this checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidegate.runtime.events import CancelCheckpointMarker, CheckpointBarrier, EndOfPartition


def ends_in_flight_data(payload: Any, checkpoint_id: int) -> bool:
    """Whether `payload` closes a channel's in-flight data for `checkpoint_id`: its barrier (or
    a newer one), a cancel marker for it (or newer: the checkpoint cannot complete), or the
    end of the channel."""
    match payload:
        case CheckpointBarrier(checkpoint_id=cid) | CancelCheckpointMarker(checkpoint_id=cid):
            return cid >= checkpoint_id
        case EndOfPartition():
            return True
    return False


@dataclass
class InFlightRecorder:
    """Collects the in-flight frames of one checkpoint on one subtask's input channels."""

    checkpoint_id: int
    #: channels whose barrier has not arrived yet (their frames are in flight)
    recording: set[int]
    #: (channel, frame) in arrival order; a frame is a list of records, pickled or not
    frames: list[tuple[int, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.recording

    def is_recording(self, channel: int) -> bool:
        return channel in self.recording

    def offer(self, channel: int, payload: Any, stored: Any = None) -> bool:
        """Feed one frame in channel order; returns True when it was recorded (as `stored`,
        e.g. its pickled form, when given)."""
        if channel not in self.recording:
            return False
        if isinstance(payload, list):
            self.frames.append((channel, payload if stored is None else stored))
            return True
        if ends_in_flight_data(payload, self.checkpoint_id):
            self.recording.discard(channel)
        return False
