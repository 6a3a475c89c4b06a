"""Checkpoints and savepoints requested by the user (JobClient, CLI, REST) and their futures.

A request is made on any thread and queued to the JobMaster's event queue; the JobMaster
triggers it on its own thread and registers it here under the checkpoint id it got. Completion
and abort are reported by the coordinator's hooks, an abort possibly on the scheduler thread
(a timeout), so the registry is thread-safe.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field

from tidegate.checkpoint.errors import CheckpointTriggerError
from tidegate.checkpoint.store import CompletedCheckpoint

#: outcomes kept for checkpoints whose request was not registered yet (bounded)
_REMEMBERED_OUTCOMES = 16


class SnapshotKind(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"
    #: stop-with-savepoint: a savepoint after which the job finishes
    STOP = "stop-with-savepoint"


@dataclass(frozen=True, eq=False)
class SnapshotRequest:
    """One user request. Its future holds a CompletedCheckpoint (CHECKPOINT) or the savepoint
    directory (SAVEPOINT, STOP), or the exception saying why it was not taken."""

    kind: SnapshotKind
    #: where the savepoint directory is created (None: the configured default)
    target_directory: str | None = None
    #: STOP only: end the sources' input first, so operators flush (--drain)
    drain: bool = False
    future: Future = field(default_factory=Future)

    def succeed(self, cp: CompletedCheckpoint) -> None:
        result = cp if self.kind is SnapshotKind.CHECKPOINT else cp.path
        self._settle(lambda: self.future.set_result(result))

    def fail(self, error: BaseException) -> None:
        self._settle(lambda: self.future.set_exception(error))

    def fail_aborted(self, checkpoint_id: int, reason: str) -> None:
        """The coordinator aborted the snapshot taken for this request."""
        match self.kind:
            case SnapshotKind.CHECKPOINT:
                after = "The job keeps running."
            case SnapshotKind.SAVEPOINT:
                after = "The job keeps running; its files were removed."
            case SnapshotKind.STOP if self.drain:
                after = (
                    "The sources had already been drained, so the job restarts from its latest "
                    "checkpoint or savepoint (nothing is lost or duplicated)."
                )
            case SnapshotKind.STOP:
                after = "The job was not stopped: its sources resume and it keeps running."
        what = "checkpoint" if self.kind is SnapshotKind.CHECKPOINT else "savepoint"
        self.fail(CheckpointTriggerError(f"{what} {checkpoint_id} failed ({reason}). {after}"))

    def _settle(self, set_outcome) -> None:
        with contextlib.suppress(InvalidStateError):  # settled already: the first outcome wins
            set_outcome()


class PendingRequests:
    """Requests by the id of the checkpoint they triggered. An outcome reported before the
    request was registered (an abort racing with the trigger) is applied on registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, SnapshotRequest] = {}
        self._early: OrderedDict[int, CompletedCheckpoint | str] = OrderedDict()

    def register(self, checkpoint_id: int, request: SnapshotRequest) -> None:
        with self._lock:
            early = self._early.pop(checkpoint_id, None)
            if early is None:
                self._by_id[checkpoint_id] = request
                return
        self._apply(checkpoint_id, request, early)

    def complete(self, cp: CompletedCheckpoint) -> SnapshotRequest | None:
        """Settle the request of `cp` (a STOP request is returned unsettled: it succeeds only
        when the job has finished)."""
        return self._report(cp.checkpoint_id, cp)

    def abort(self, checkpoint_id: int, reason: str) -> SnapshotRequest | None:
        return self._report(checkpoint_id, reason)

    def fail_all(self, error: BaseException) -> None:
        with self._lock:
            requests, self._by_id = list(self._by_id.values()), {}
        for request in requests:
            request.fail(error)

    def _report(self, checkpoint_id: int, outcome: CompletedCheckpoint | str):
        with self._lock:
            request = self._by_id.pop(checkpoint_id, None)
            if request is None:
                self._early[checkpoint_id] = outcome
                while len(self._early) > _REMEMBERED_OUTCOMES:
                    self._early.popitem(last=False)
                return None
        self._apply(checkpoint_id, request, outcome)
        return request

    @staticmethod
    def _apply(checkpoint_id: int, request: SnapshotRequest, outcome) -> None:
        if isinstance(outcome, str):
            request.fail_aborted(checkpoint_id, outcome)
        elif request.kind is not SnapshotKind.STOP:
            request.succeed(outcome)
