"""Events that travel in order with record batches on a channel (never inside a batch)."""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.checkpoint.options import CheckpointOptions


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
