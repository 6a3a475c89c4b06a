"""What kind of snapshot a checkpoint is and how subtasks take it; chosen by the coordinator,
carried to every subtask inside the barrier."""

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
