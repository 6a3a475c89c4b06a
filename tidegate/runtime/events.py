"""Events that travel in order with record batches on a channel (never inside a batch)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CheckpointType(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True, slots=True)
class CheckpointOptions:
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT
    #: the checkpoint taken after every source finished (FLIP-147); sinks commit it before exit
    is_final: bool = False
    #: where this snapshot's files go instead of the job's chk-<n> directory (savepoints)
    target_location: str | None = None
    #: unaligned: each subtask snapshots at once and persists its in-flight records as channel
    #: state (exactly-once only; savepoints are always aligned)
    unaligned: bool = False
    #: aligned, but a subtask whose alignment lasts longer than this switches to unaligned
    #: (None: never switch)
    aligned_timeout_ms: int | None = None

    @property
    def is_savepoint(self) -> bool:
        return self.checkpoint_type is CheckpointType.SAVEPOINT


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions = CheckpointOptions()


@dataclass(frozen=True, slots=True)
class CancelCheckpointMarker:
    """Tells downstream that checkpoint `checkpoint_id` was aborted upstream."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class EndOfData:
    """The upstream subtask has emitted its last record (its sources finished)."""


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """The upstream subtask will send nothing more on this channel, not even barriers."""


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time on this channel has reached `timestamp` (ms): no record with a timestamp at
    or below it should follow (later ones are late). Never goes back on a channel."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """The upstream subtask became idle (`idle`: it sends no records or watermarks for a
    while, so its channel must not hold back the downstream watermark) or active again."""

    idle: bool


Event = (
    CheckpointBarrier
    | CancelCheckpointMarker
    | EndOfData
    | EndOfPartition
    | Watermark
    | WatermarkStatus
)
