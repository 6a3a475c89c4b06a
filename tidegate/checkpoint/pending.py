"""A checkpoint that was triggered and is collecting acknowledgements (pure state, no I/O)."""

from __future__ import annotations

import enum
from typing import Any

from tidegate.checkpoint.options import CheckpointOptions, CheckpointType

#: (vertex id, subtask index)
SubtaskId = tuple[str, int]


class AckOutcome(enum.Enum):
    SUCCESS = "success"
    #: this subtask already acknowledged this checkpoint; the new state is ignored
    DUPLICATE = "duplicate"
    #: the subtask is not expected to acknowledge this checkpoint (or the id is not known)
    UNKNOWN = "unknown"
    #: the checkpoint was aborted; the ack came too late
    DISCARDED = "discarded"


class AbortReason(enum.Enum):
    """Why a pending checkpoint was aborted; subsumed and stopped ones are not failures."""

    EXPIRED = "expired"
    DECLINED = "declined"
    TRIGGER_FAILED = "trigger failed"
    FINALIZE_FAILED = "finalize failed"
    SUBSUMED = "subsumed"
    STOPPED = "coordinator stopped"

    @property
    def counts_as_failure(self) -> bool:
        match self:
            case AbortReason.SUBSUMED | AbortReason.STOPPED:
                return False
            case _:
                return True


class PendingCheckpoint:
    """Waits for one ack (with its state handles) from every subtask in `tasks_to_ack`.

    Not thread-safe: the coordinator guards it with its lock. `discard()` only marks it; the
    acknowledged states stay readable so that whoever owns the files they name can delete them.
    """

    def __init__(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        options: CheckpointOptions,
        tasks_to_ack: frozenset[SubtaskId],
    ) -> None:
        if not tasks_to_ack:
            raise ValueError("a checkpoint needs at least one subtask to acknowledge it")
        self.checkpoint_id = checkpoint_id
        self.timestamp_ms = timestamp_ms
        self.options = options
        self.tasks_to_ack = tasks_to_ack
        self.acked_states: dict[SubtaskId, dict[str, Any]] = {}
        self._not_yet_acked = set(tasks_to_ack)
        self._discarded = False

    def acknowledge(self, subtask: SubtaskId, state: dict[str, Any]) -> AckOutcome:
        if self._discarded:
            return AckOutcome.DISCARDED
        if subtask in self._not_yet_acked:
            self._not_yet_acked.remove(subtask)
            self.acked_states[subtask] = state
            return AckOutcome.SUCCESS
        if subtask in self.acked_states:
            return AckOutcome.DUPLICATE
        return AckOutcome.UNKNOWN

    @property
    def is_fully_acknowledged(self) -> bool:
        return not self._not_yet_acked and not self._discarded

    @property
    def not_yet_acknowledged(self) -> frozenset[SubtaskId]:
        return frozenset(self._not_yet_acked)

    @property
    def is_savepoint(self) -> bool:
        return self.options.checkpoint_type is CheckpointType.SAVEPOINT

    def discard(self) -> None:
        """Mark as aborted: later acks return DISCARDED. Idempotent."""
        self._discarded = True

    @property
    def is_discarded(self) -> bool:
        return self._discarded

    def __repr__(self) -> str:
        acked = len(self.acked_states)
        return (
            f"PendingCheckpoint(id={self.checkpoint_id}, acked={acked}/{len(self.tasks_to_ack)}"
            f"{', discarded' if self._discarded else ''})"
        )
