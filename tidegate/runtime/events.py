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


Event = CheckpointBarrier | CancelCheckpointMarker | EndOfData | EndOfPartition
