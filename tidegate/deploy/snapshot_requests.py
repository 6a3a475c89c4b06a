"""Checkpoints and savepoints requested by the user (JobClient, CLI, REST): their futures, and
how a job attempt serves them, stop-with-savepoint included (`AttemptRequests`).

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
from typing import Protocol

from tidegate.checkpoint.errors import CheckpointTriggerError, JobNotRunningError
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.savepoints import savepoint_options
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


@dataclass(frozen=True)
class StopFailed:
    """JobMaster event: the stop-with-savepoint's savepoint failed or could not be triggered."""

    attempt: int
    reason: str


class RequestTarget(Protocol):
    """What `AttemptRequests` needs of the job attempt serving it (deploy/attempt.py adapts the
    JobAttempt to it); scripted in tests/unit/test_snapshot_requests.py."""

    def not_running_error(self) -> Exception | None:
        """Why no snapshot can be taken now; None while the job runs with checkpointing."""

    def sources_finished(self) -> bool:
        """Every source subtask has finished its input."""

    def savepoint_location(self, request: SnapshotRequest) -> str:
        """A new, unique savepoint directory for `request` (not created yet)."""

    def create_dir(self, location: str) -> None:
        """Create the directory; raises (any exception) when it cannot be created."""

    def trigger(self, options: CheckpointOptions | None) -> int | None:
        """Trigger a checkpoint now, forced (None: the configured options); its id, or None when
        checkpointing has stopped. Raises when it could not be triggered."""

    def suspend_periodic(self) -> None: ...

    def resume_periodic(self) -> None: ...

    def drain_sources(self) -> None:
        """Tell every source to end its input (stop-with-savepoint --drain)."""

    def set_final(self, checkpoint_id: int, final: bool) -> None:
        """Mark the checkpoint as the job's final one (after which the tasks end), or unmark."""

    def stop_failed(self, reason: str) -> None:
        """Queue the JobMaster event of a failed stop-with-savepoint (`StopFailed`)."""


class AttemptRequests:
    """The user requests of one job attempt. Runs on the JobMaster's thread, except `aborted`,
    which the coordinator may call on its scheduler thread (a timeout).

    A checkpoint or savepoint is triggered forced (no max-concurrent or min-pause wait) and its
    request settled when the coordinator completes or aborts it. A savepoint's directory is
    created first, so a bad directory fails the request before anything else happens.

    Stop-with-savepoint, in steps (numbered in the code):
    1. create the savepoint directory;
    2. suspend periodic checkpoints (Flink's stopCheckpointScheduler); with drain, tell the
       sources to end their input: once every source finished, the JobMaster's final
       checkpoint is this savepoint (`trigger_drained`);
    3. trigger the savepoint with `is_final`: sources emit nothing after its barrier, and every
       task ends once it completed (after the sinks committed it), so the job FINISHES;
    4. if it fails: periodic checkpoints resume; without drain the tasks resume when told of
       the abort; after a drain they cannot, so the job restarts (`stop_failed` says so).
    """

    def __init__(self, target: RequestTarget) -> None:
        self._target = target
        self.pending = PendingRequests()
        #: the stop-with-savepoint in progress, its savepoint directory and checkpoint id
        self.stopping: SnapshotRequest | None = None
        self._stop_location: str | None = None
        self._stop_checkpoint_id: int | None = None

    @property
    def draining(self) -> bool:
        return self.stopping is not None and self.stopping.drain

    def start(self, request: SnapshotRequest) -> None:
        target = self._target
        if (error := target.not_running_error()) is not None:
            request.fail(error)
            return
        if self.stopping is not None:
            request.fail(JobNotRunningError("the job is stopping with a savepoint"))
            return
        stop = request.kind is SnapshotKind.STOP
        if stop and target.sources_finished():
            request.fail(
                JobNotRunningError("every source has finished: the job is finishing on its own")
            )
            return
        options = None  # a checkpoint: the configured options (aligned or unaligned)
        if request.kind is not SnapshotKind.CHECKPOINT:
            # Step 1: the savepoint's own directory
            location = target.savepoint_location(request)
            try:
                target.create_dir(location)
            except Exception as e:
                request.fail(
                    CheckpointTriggerError(
                        f"cannot create the savepoint directory {location}: "
                        f"{type(e).__name__}: {e}. Pass a directory this process and every "
                        "worker can write."
                    )
                )
                return
            options = savepoint_options(location, final=stop)
        if stop:
            # Step 2
            self.stopping, self._stop_location = request, location
            target.suspend_periodic()
            if request.drain:
                target.drain_sources()
                return
        self._trigger(request, options)

    def trigger_drained(self) -> None:
        """Step 3 of a drain: every source finished, so the savepoint is the final snapshot."""
        self._trigger(self.stopping, savepoint_options(self._stop_location, final=True))

    def _trigger(self, request: SnapshotRequest, options: CheckpointOptions | None) -> None:
        try:
            cid = self._target.trigger(options)
        except Exception as e:
            reason = f"it could not be triggered: {type(e).__name__}: {e}"
            if request is self.stopping:
                self._target.stop_failed(reason)
            request.fail(CheckpointTriggerError(reason))
            return
        if cid is None:
            stopped = JobNotRunningError("checkpointing has stopped: the job attempt is ending")
            request.fail(self._target.not_running_error() or stopped)
            return
        if request is self.stopping:  # Step 3
            self._stop_checkpoint_id = cid
            self._target.set_final(cid, True)
        self.pending.register(cid, request)

    def completed(self, cp: CompletedCheckpoint) -> SnapshotRequest | None:
        """Settle the request `cp` was taken for; a stop request is returned unsettled."""
        return self.pending.complete(cp)

    def aborted(self, checkpoint_id: int, reason: str) -> bool:
        """Fail the request `checkpoint_id` was taken for; True if it was the stop's savepoint
        (the JobMaster then handles a StopFailed event)."""
        self.pending.abort(checkpoint_id, reason)
        return checkpoint_id == self._stop_checkpoint_id

    def stop_failed(self, reason: str) -> bool:
        """Step 4; True if the job must restart (the sources were drained already)."""
        request, self.stopping = self.stopping, None
        if request is None:
            return False
        if self._stop_checkpoint_id is not None:
            self._target.set_final(self._stop_checkpoint_id, False)
        self._stop_checkpoint_id = self._stop_location = None
        self._target.resume_periodic()
        request.fail(CheckpointTriggerError(f"stop-with-savepoint failed: {reason}"))
        return request.drain

    def teardown(self, completed_stop: SnapshotRequest | None) -> None:
        """The attempt ended: fail every request still open (but the completed stop's)."""
        ended = JobNotRunningError("the job attempt ended before the snapshot completed")
        self.pending.fail_all(ended)
        if self.stopping is not None and self.stopping is not completed_stop:
            self.stopping.fail(ended)  # e.g. a drain whose savepoint was never triggered
