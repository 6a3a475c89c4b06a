"""Completed checkpoints and the store that retains the newest N of them."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.state.shared_registry import CheckpointReferences, SharedStateRegistry


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    """A checkpoint (or savepoint) whose `_metadata` is durable."""

    checkpoint_id: int
    #: wall-clock ms when it was triggered
    timestamp_ms: int
    #: wall-clock ms when its `_metadata` was written
    completed_ms: int
    duration_ms: int
    #: URI of the chk-<n> (or savepoint) directory
    path: str
    size_bytes: int
    is_savepoint: bool
    #: None only for checkpoints made up in tests
    metadata: CheckpointMetadata | None = field(default=None, hash=False, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        pending: PendingCheckpoint,
        *,
        completed_ms: int,
        path: str,
        size_bytes: int,
        metadata: CheckpointMetadata,
    ) -> CompletedCheckpoint:
        """Build the completed form of a fully acknowledged `pending` (for `finalize`)."""
        return cls(
            checkpoint_id=pending.checkpoint_id,
            timestamp_ms=pending.timestamp_ms,
            completed_ms=completed_ms,
            duration_ms=max(completed_ms - pending.timestamp_ms, 0),
            path=path,
            size_bytes=size_bytes,
            is_savepoint=pending.is_savepoint,
            metadata=metadata,
        )


class CompletedCheckpointStore:
    """Retains the newest `max_retained` completed checkpoints, oldest first.

    Only checkpoints are stored. Savepoints are owned by the user: `add` returns them untouched
    and never retains, counts or subsumes them, so a savepoint's files are never deleted here and
    a restore after failure uses the latest *checkpoint*. Thread-safe.

    With a `shared_registry`, the shared files (incremental checkpoints) of every checkpoint
    added are registered, and those of every checkpoint it stops retaining unregistered.
    """

    def __init__(
        self,
        max_retained: int,
        shared_registry: SharedStateRegistry | None = None,
        references: Callable[[CompletedCheckpoint], CheckpointReferences] | None = None,
    ) -> None:
        if max_retained < 1:
            raise ValueError(f"max_retained must be at least 1, got {max_retained}")
        self.max_retained = max_retained
        self.shared_registry = shared_registry
        self._references = references or _references
        self._checkpoints: deque[CompletedCheckpoint] = deque()
        self._lock = threading.Lock()

    def add(self, cp: CompletedCheckpoint) -> list[CompletedCheckpoint]:
        """Add `cp` and return the checkpoints no longer retained (the caller discards them).

        Ids must increase: adding an id not newer than the latest stored one is a bug.
        """
        if cp.is_savepoint:
            return []
        with self._lock:
            if self._checkpoints and cp.checkpoint_id <= self._checkpoints[-1].checkpoint_id:
                raise ValueError(
                    f"checkpoint {cp.checkpoint_id} is not newer than the latest stored "
                    f"checkpoint {self._checkpoints[-1].checkpoint_id}"
                )
            self._checkpoints.append(cp)
            subsumed = []
            while len(self._checkpoints) > self.max_retained:
                subsumed.append(self._checkpoints.popleft())
            self._register(cp, subsumed, restored=False)
            return subsumed

    def add_restored(self, cp: CompletedCheckpoint) -> None:
        """Retain a snapshot the job restored and owns (RestoreMode.CLAIM) before its own
        checkpoints; its shared files are registered, no other checkpoint is subsumed."""
        with self._lock:
            self._checkpoints.append(cp)
            self._register(cp, [], restored=True)

    def _register(
        self, cp: CompletedCheckpoint, subsumed: list[CompletedCheckpoint], restored: bool
    ) -> None:
        registry = self.shared_registry
        if registry is None:
            return
        registry.register(self._references(cp), restored=restored)
        for old in subsumed:
            registry.unregister(old.checkpoint_id)

    def latest(self) -> CompletedCheckpoint | None:
        with self._lock:
            return self._checkpoints[-1] if self._checkpoints else None

    def all(self) -> list[CompletedCheckpoint]:
        """The retained checkpoints, oldest first."""
        with self._lock:
            return list(self._checkpoints)


def _references(cp: CompletedCheckpoint) -> CheckpointReferences:
    if cp.metadata is None:
        return CheckpointReferences(cp.checkpoint_id)
    return cp.metadata.references(cp.path)
