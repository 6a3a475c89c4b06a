"""The JobMaster: deploys a job's slots, runs its CheckpointCoordinator, and restarts the job
from the latest completed checkpoint after a failure (DESIGN §2 step 6, §3).

Everything the slots, the runner and the coordinator report arrives as an event on one queue
and is handled on the JobMaster's own thread, so the attempt's state needs no locks. User
requests (a manual checkpoint, a savepoint, stop-with-savepoint) come from other threads the
same way, as SnapshotRequests with a future.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import re
import secrets
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.coordinator import CheckpointCoordinator, CheckpointCoordinatorConfig
from tidegate.checkpoint.errors import (
    CheckpointError,
    CheckpointIntegrityError,
    CheckpointNotFoundError,
    CheckpointTriggerError,
    FencedWriterError,
    JobNotRunningError,
    NoSavepointDirectoryError,
)
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.checkpoint.savepoints import (
    discard_snapshot_dir,
    newest_snapshot,
)
from tidegate.checkpoint.scheduling import ThreadScheduler
from tidegate.checkpoint.selection import RestoreCandidate, choose_checkpoint
from tidegate.checkpoint.storage import CheckpointStorage, checkpoint_candidates
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore
from tidegate.common.job_status import JobStatus
from tidegate.deploy import runners
from tidegate.deploy.control_server import ControlServer, SlotLost
from tidegate.deploy.job_spec import CheckpointRetention, JobSpec, RestoreMode
from tidegate.deploy.restore import build_metadata, plan_restore, warn_generated_uids
from tidegate.deploy.snapshot_requests import (
    AttemptRequests,
    SnapshotKind,
    SnapshotRequest,
    StopFailed,
)
from tidegate.metrics.checkpoint_stats import CheckpointStatsTracker
from tidegate.metrics.failures import JobTimeline
from tidegate.metrics.job_metrics import JobMetrics
from tidegate.runtime.deployment import Deployment
from tidegate.runtime.events import CheckpointOptions
from tidegate.runtime.messages import (
    AcknowledgeCheckpoint,
    CancelSlot,
    DeclineCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    RegisterSlot,
    SlotAddresses,
    SlotFailed,
    SlotFinished,
    SlotMetrics,
    SourceFinished,
    TriggerCheckpoint,
)
from tidegate.runtime.network import advertised_address

log = logging.getLogger("tidegate.jobmaster")

REGISTRATION_TIMEOUT_S = 180.0
TEARDOWN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunnerEnded:
    attempt: int
    error: BaseException | None


@dataclass(frozen=True)
class FailJob:
    attempt: int
    reason: str


@dataclass(frozen=True)
class Cancel:
    pass


@dataclass(frozen=True)
class RetryFinalCheckpoint:
    attempt: int


@dataclass(frozen=True)
class Fenced:
    """The job directory's fence refused this driver's write: another one took over."""

    attempt: int
    reason: str


class JobFailure(Exception):
    def __init__(self, message: str, detail: str = "", *, recoverable: bool = True) -> None:
        super().__init__(message)
        self.detail = detail
        #: False when a restart would fail the same way (the workers cannot load the job)
        self.recoverable = recoverable


@dataclass
class JobStats:
    """What the driver knows about a job while it runs: checkpoint statistics, subtask metrics
    and the failure timeline (served in full by the REST API), and the few numbers
    `tidegate run`'s status line shows (the properties)."""

    checkpoints: CheckpointStatsTracker
    metrics: JobMetrics
    timeline: JobTimeline = field(default_factory=JobTimeline)
    restarts: int = 0

    @property
    def records_read(self) -> int:
        """Records the sources read in the current attempt."""
        return self.metrics.records_read

    @property
    def records_in(self) -> int:
        """Records the non-source subtasks received in the current attempt."""
        return self.metrics.records_in

    @property
    def records_per_s(self) -> float:
        return self.metrics.records_per_s

    @property
    def completed_checkpoints(self) -> int:
        return self.checkpoints.counts.completed

    @property
    def failed_checkpoints(self) -> int:
        return self.checkpoints.counts.failed

    @property
    def last_checkpoint(self) -> CompletedCheckpoint | None:
        """The latest completed checkpoint or savepoint."""
        return self.checkpoints.latest_completed

    @property
    def restored_from(self) -> int | None:
        """The id of the checkpoint or savepoint restored last."""
        restored = self.checkpoints.latest_restored
        return None if restored is None else restored.checkpoint_id


class JobMaster:
    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.job_id = spec.job_id or uuid.uuid4().hex
        self.stats = JobStats(
            CheckpointStatsTracker(spec.checkpoint_history_size), JobMetrics(spec.graph)
        )
        self.status = JobStatus.INITIALIZING
        self.error: JobFailure | None = None
        self.events: queue.Queue = queue.Queue()
        self.secret = secrets.token_bytes(32)
        base = spec.checkpoint.storage
        self.storage = CheckpointStorage(base, self.job_id)
        self.store = CompletedCheckpointStore(spec.checkpoint.max_retained)
        self.scheduler = ThreadScheduler()
        self.attempt = 0
        self.failure_times: list[float] = []
        self.next_checkpoint_id = 1
        self.slot_pids: dict[int, int] = {}
        self.done = threading.Event()
        self._cancelled = threading.Event()
        self.server: ControlServer | None = None
        #: where the first attempt restored from (newest first); later ones fall back to them
        self._initial_candidates: list[RestoreCandidate] = []
        #: set when a checkpoint turned out damaged or another driver took over: the job then
        #: deletes no checkpoint when it ends, whatever the retention setting says
        self._keep_checkpoints = False
        #: the latest savepoint of this job (a failover restores it when it is the newest)
        self.latest_savepoint: CompletedCheckpoint | None = None
        #: snapshot directories this job owns besides its own (restored with RestoreMode.CLAIM)
        self._claimed: set[str] = set()
        #: the completed stop-with-savepoint: its future succeeds once the job has finished
        self._stop: tuple[SnapshotRequest, CompletedCheckpoint] | None = None
        #: the next restart is not a failure (a failed stop-with-savepoint --drain)
        self._restart_freely = False
        self._requests_closed = False
        self._request_lock = threading.Lock()

    # public ---------------------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        return self._status

    @status.setter
    def status(self, status: JobStatus) -> None:
        self._status = status
        self.stats.timeline.status_changed(status)

    @property
    def error(self) -> JobFailure | None:
        """What ended the latest attempt (or the job); each one is kept in the timeline."""
        return self._error

    @error.setter
    def error(self, error: JobFailure | None) -> None:
        self._error = error
        if error is not None:
            self.stats.timeline.record_failure(self.attempt, error)

    def cancel(self) -> None:
        self._cancelled.set()
        self.events.put(Cancel())

    def trigger_checkpoint(self) -> Future[CompletedCheckpoint]:
        """Take a checkpoint now (whatever the interval); the future holds it once completed.
        Thread-safe. Fails with JobNotRunningError or, if it is declined or expires,
        CheckpointTriggerError with the reason."""
        return self._submit(SnapshotRequest(SnapshotKind.CHECKPOINT))

    def trigger_savepoint(self, target_directory: str | None = None) -> Future[str]:
        """Take a savepoint into a new directory under `target_directory` (default: the
        configured savepoint directory); the future holds that savepoint directory's path.
        The job keeps running; a failed savepoint never fails the job. Thread-safe."""
        return self._submit(SnapshotRequest(SnapshotKind.SAVEPOINT, target_directory))

    def stop_with_savepoint(
        self, target_directory: str | None = None, drain: bool = False
    ) -> Future[str]:
        """Take a savepoint and finish the job: the future holds the savepoint directory's path
        once the job is FINISHED. Without `drain` the sources stop right after the savepoint's
        barrier; with it they first end their input as if bounded, so operators flush, and the
        final snapshot is the savepoint. If the savepoint fails the job keeps running (after a
        drain it restarts from its latest checkpoint). Thread-safe."""
        return self._submit(SnapshotRequest(SnapshotKind.STOP, target_directory, drain))

    def _submit(self, request: SnapshotRequest) -> Future:
        needs_dir = request.kind is not SnapshotKind.CHECKPOINT
        with self._request_lock:
            if self._requests_closed or self.status is not JobStatus.RUNNING:
                request.fail(self.not_running_error())
            elif needs_dir and not self.savepoint_dir_for(request):
                request.fail(
                    NoSavepointDirectoryError(
                        "no savepoint directory: pass a target directory, or configure a default "
                        "with env.set_default_savepoint_directory(...) or the configuration key "
                        "execution.checkpointing.savepoint-dir"
                    )
                )
            else:
                self.events.put(request)
        return request.future

    def savepoint_dir_for(self, request: SnapshotRequest) -> str | None:
        return request.target_directory or self.spec.checkpoint.savepoint_dir

    def not_running_error(self) -> JobNotRunningError:
        return JobNotRunningError(
            f"job {self.spec.job_name!r} ({self.job_id}) is {self.status.name}, not RUNNING: "
            "checkpoints and savepoints can only be taken while it runs"
        )

    def run(self) -> None:
        """Run the job to a terminal status (FINISHED, CANCELED or FAILED); never raises."""
        try:
            self.storage.verify_writable()
            # fence off older writers first, so none completes a checkpoint after the choice
            self.storage.start_generation()
            restore = self._initial_restore()
            # never reuse a chk-<n> directory (an earlier run of the same job id left them)
            self.next_checkpoint_id = max(
                self.next_checkpoint_id, self.storage.highest_checkpoint_id() + 1
            )
            self.server = ControlServer(self.secret, self.spec.bind_host, self.events.put)
            while True:
                outcome = self._run_attempt(restore)
                if outcome is not None:
                    self.status = outcome
                    break
                if not self._await_restart():
                    break
                self.attempt += 1
                self.stats.restarts += 1
                self._start_generation()
                restore = self._restore_after_failure(restore)
        except JobFailure as e:
            self.error = e
            self.status = JobStatus.FAILED
        except CheckpointError as e:  # e.g. a restore that cannot work: say why, no traceback
            self.error = JobFailure(str(e), recoverable=False)
            self.status = JobStatus.FAILED
        except Exception as e:  # a bug or an environment problem: report, don't hang the client
            log.exception("JobMaster crashed")
            self.error = JobFailure(f"{type(e).__name__}: {e}")
            self.status = JobStatus.FAILED
        finally:
            self._shutdown()
            self._settle_stop(self.status)
            self.done.set()

    # attempts ---------------------------------------------------------------------------------
    def _initial_restore(self) -> tuple[dict, str] | None:
        path = self.spec.restore_path
        if path is None:
            return None
        self._initial_candidates = [RestoreCandidate(d) for d in checkpoint_candidates(path)]
        metadata, directory = self._choose_restore(self._initial_candidates)
        self.next_checkpoint_id = max(self.next_checkpoint_id, int(metadata["checkpoint_id"]) + 1)
        warn_generated_uids(self.spec.graph, metadata["operators"], f"restoring {directory}")
        if self.spec.restore_mode is RestoreMode.CLAIM:
            # the job owns it now: subsumed and deleted like one of its own checkpoints
            self.store.add(_claimed_checkpoint(metadata, directory))
            self._claimed.add(directory)
        return metadata, directory

    def _restore_after_failure(self, previous: tuple[dict, str] | None) -> tuple[dict, str] | None:
        """The snapshot to restart from: the newest retained checkpoint or savepoint of the job,
        or with restore fallback allowed the newest intact one (then the one it started from)."""
        # a savepoint newer than the latest checkpoint committed its sinks' output: newest first
        own = [*self.store.all(), *([self.latest_savepoint] if self.latest_savepoint else [])]
        own.sort(key=lambda cp: cp.checkpoint_id, reverse=True)
        candidates = [RestoreCandidate(cp.path, cp.metadata) for cp in own]
        known = {c.directory for c in candidates}  # a claimed snapshot is both
        candidates += [c for c in self._initial_candidates if c.directory not in known]
        if not candidates:
            return previous
        return self._choose_restore(candidates)

    def _choose_restore(self, candidates: list[RestoreCandidate]) -> tuple[dict, str]:
        """The first intact candidate (checkpoint.selection); a damaged checkpoint fails the
        job for good (a restart would meet the same damage) and keeps every checkpoint."""
        uids = {op.uid for v in self.spec.graph.vertices.values() for op in v.operators}
        try:
            return choose_checkpoint(
                candidates, uids=uids, allow_fallback=self.spec.restore_fallback
            )
        except (CheckpointIntegrityError, CheckpointNotFoundError) as e:
            self._keep_checkpoints = True
            raise JobFailure(f"{type(e).__name__}: {e}", recoverable=False) from e

    def _start_generation(self) -> None:
        """A new writer generation for the next attempt: its files and `_metadata` are named
        after it, and the slots of earlier attempts can no longer write."""
        try:
            self.storage.start_generation()
        except FencedWriterError as e:  # another driver of this job id took over: stop
            self._keep_checkpoints = True
            raise JobFailure(f"{type(e).__name__}: {e}", recoverable=False) from e

    def _await_restart(self) -> bool:
        if self._restart_freely and not self._cancelled.is_set():
            self._restart_freely = False  # not a failure: no delay, not counted
            self.status = JobStatus.RESTARTING
            return True
        now = time.monotonic()
        self.failure_times.append(now)
        delay = self.spec.restart_strategy.restart_delay_s(self.failure_times, now)
        if self.error is not None and not self.error.recoverable:
            delay = None
        if delay is None or self._cancelled.is_set():
            if self._cancelled.is_set():
                self.status = JobStatus.CANCELED
            else:
                self.status = JobStatus.FAILED
            return False
        self.status = JobStatus.RESTARTING
        log.warning("restarting job in %.1fs (attempt %d)", delay, self.attempt + 1)
        if self._cancelled.wait(delay):
            self.status = JobStatus.CANCELED
            return False
        return True

    def _run_attempt(self, restore: tuple[dict, str] | None) -> JobStatus | None:
        """One deployment. Returns a terminal status, or None after a failure (self.error set)."""
        graph = self.spec.graph
        attempt = self.attempt
        plan, restored_id = {}, None
        if restore is not None:
            metadata, directory = restore
            plan, max_p = plan_restore(
                graph, metadata, directory, self.spec.allow_non_restored_state
            )
            graph = dataclasses.replace(graph, max_parallelism=max_p)
            restored_id = int(metadata["checkpoint_id"])
            self.stats.checkpoints.report_restored(
                restored_id,
                directory,
                is_savepoint=bool(metadata.get("is_savepoint")),
                attempt=attempt,
            )
        deployment = Deployment(
            job_id=self.job_id,
            attempt=attempt,
            graph=graph,
            secret=self.secret,
            driver_address=advertised_address(self.server.address, self.spec.advertised_host),
            bind_host=self.spec.bind_host,
            checkpoint_base=self.spec.checkpoint.storage,
            exactly_once=self.spec.checkpoint.exactly_once,
            batch_size=self.spec.batch_size,
            buffer_timeout_ms=self.spec.buffer_timeout_ms,
            queue_capacity=self.spec.queue_capacity,
            restore=plan,
            restored_checkpoint_id=restored_id,
            generation=self.storage.generation,
        )
        payload = runners.pack_deployment(deployment)
        on_end = lambda error: self.events.put(RunnerEnded(attempt, error))  # noqa: E731
        num_slots = graph.num_slots
        if self.spec.runner == "local":
            slots = runners.start_local(payload, num_slots, on_end)
        else:
            from tidegate.deploy.spark_session import get_spark

            spark = self.spec.spark_session or get_spark(self.spec.spark_master, num_slots)
            slots = runners.start_spark(spark, payload, num_slots, on_end)
        attempt_state = _Attempt(self, attempt, slots, graph)
        try:
            outcome = attempt_state.run()
        finally:
            attempt_state.teardown()
        if outcome is not JobStatus.FINISHED:
            self._settle_stop(outcome)
        return outcome

    def _settle_stop(self, outcome: JobStatus | None) -> None:
        """Settle a completed stop-with-savepoint: it succeeded if the job then FINISHED
        (`outcome` None: the attempt failed and the job restarts)."""
        if self._stop is None:
            return
        (request, savepoint), self._stop = self._stop, None
        if outcome is JobStatus.FINISHED:
            request.succeed(savepoint)
            return
        match outcome:
            case JobStatus.CANCELED:
                why = "it was cancelled"
            case None:
                why = f"it failed ({self.error}) and restarts from that savepoint"
            case _:
                why = f"it ended {outcome.name} ({self.error})"
        request.fail(
            CheckpointTriggerError(
                f"the savepoint {savepoint.path} completed, but the job did not finish: {why}"
            )
        )

    def discard_snapshot(self, path: str) -> None:
        """Delete a checkpoint's directory: one of the job's own, a claimed one, or a failed
        savepoint's."""
        if path.startswith(self.storage.job_dir.rstrip("/") + "/") and path not in self._claimed:
            self.storage.discard_checkpoint_dir(path)
        else:
            self.storage.check_fence(f"delete {path}")  # a fenced driver deletes nothing
            discard_snapshot_dir(path)

    def _shutdown(self) -> None:
        with self._request_lock:
            self._requests_closed = True
        while True:  # requests nobody will handle any more
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
            if isinstance(event, SnapshotRequest):
                event.fail(self.not_running_error())
        self.scheduler.shutdown()
        if self.server is not None:
            self.server.close()
        retention = self.spec.checkpoint.retention
        keep = {
            JobStatus.FINISHED: False,
            JobStatus.CANCELED: retention is CheckpointRetention.RETAIN_ON_CANCELLATION,
            JobStatus.FAILED: retention is not CheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS,
        }.get(self.status, True)
        if self._keep_checkpoints:
            keep = True
            log.warning("keeping every retained checkpoint of job %s for inspection", self.job_id)
        if not keep:
            try:
                for cp in self.store.all():
                    self.discard_snapshot(cp.path)
            except FencedWriterError as e:
                log.warning("not deleting the job's checkpoints: %s", e)

    def update_metrics(self, msg: SlotMetrics) -> None:
        self.stats.metrics.update(msg)


class _Attempt:
    """The state of one deployment; also the coordinator's hooks (CoordinatorHooks)."""

    def __init__(self, jm: JobMaster, attempt: int, slots: Any, graph: Any) -> None:
        self.jm = jm
        self.attempt = attempt
        self.slots = slots
        self.graph = graph  # the spec's graph, with the restored max parallelism
        self.registered: dict[int, RegisterSlot] = {}
        self.finished_slots: set[int] = set()
        self.finished_sources: set[tuple[int, int]] = set()
        self.sources = {
            (v.vertex_id, i)
            for v in self.graph.vertices.values()
            if v.is_source
            for i in range(v.parallelism)
        }
        self.final_ids: set[int] = set()
        self.final_completed = False
        self.runner_ended = False
        self.coordinator: CheckpointCoordinator | None = None
        self.tearing_down = False
        self.requests = AttemptRequests(self)

    # Step 1: wait until every slot registered, then send the address book.
    def run(self) -> JobStatus | None:
        jm, deadline = self.jm, time.monotonic() + REGISTRATION_TIMEOUT_S
        num_slots = self.graph.num_slots
        while len(self.registered) < num_slots:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._fail(
                    f"only {len(self.registered)} of {num_slots} slots started within "
                    f"{REGISTRATION_TIMEOUT_S:.0f}s; does the cluster have enough free task slots?"
                )
            try:
                event = jm.events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            outcome = self._handle(event)
            if outcome is not _CONTINUE:
                return outcome
        addresses = {s: r.data_address for s, r in self.registered.items()}
        jm.slot_pids = {s: r.pid for s, r in self.registered.items()}
        jm.server.broadcast(self.attempt, SlotAddresses(addresses))
        jm.status = JobStatus.RUNNING
        # Step 2: start checkpointing.
        settings = jm.spec.checkpoint
        config = CheckpointCoordinatorConfig(
            interval_ms=settings.interval_ms,
            timeout_ms=settings.timeout_ms,
            min_pause_ms=settings.min_pause_ms,
            max_concurrent=settings.max_concurrent,
            tolerable_failures=settings.tolerable_failures,
            max_retained=settings.max_retained,
            options=settings.options,
        )
        self.coordinator = CheckpointCoordinator(
            config,
            frozenset(self.graph.all_subtasks()),
            self,
            jm.scheduler,
            time.monotonic,
            lambda: int(time.time() * 1000),
            jm.store,
            first_checkpoint_id=jm.next_checkpoint_id,
        )
        self.coordinator.on_complete.append(self._on_complete)
        self.coordinator.start()
        # Step 3: run until the job finishes, fails or is cancelled.
        self.last_seen = dict.fromkeys(self.registered, time.monotonic())
        while True:
            try:
                event = jm.events.get(timeout=HEARTBEAT_CHECK_S)
            except queue.Empty:
                event = None
            outcome = self._handle(event) if event is not None else _CONTINUE
            if outcome is _CONTINUE:
                outcome = self._check_heartbeats()
            if outcome is not _CONTINUE:
                return outcome

    def _check_heartbeats(self):
        """A slot that stops reporting (hung, swapped out, SIGSTOPped) fails the attempt."""
        timeout_s = self.jm.spec.heartbeat_timeout_ms / 1000
        now = time.monotonic()
        for slot, seen in self.last_seen.items():
            if slot not in self.finished_slots and now - seen > timeout_s:
                reg = self.registered[slot]
                return self._fail(
                    f"slot {slot} (pid {reg.pid} on {reg.host}) sent no heartbeat for "
                    f"{timeout_s:.0f}s: it is hung or overloaded"
                )
        return _CONTINUE

    def _handle(self, event: Any):
        jm = self.jm
        if getattr(event, "attempt", self.attempt) != self.attempt:
            if isinstance(event, RegisterSlot):  # a late slot of an ended attempt: stop it
                jm.server.send(event.attempt, event.slot, CancelSlot("its attempt has ended"))
            return _CONTINUE  # a message from an earlier attempt (a zombie slot): ignore it
        slot_of_event = getattr(event, "slot", None)
        if slot_of_event is not None and hasattr(self, "last_seen"):
            self.last_seen[slot_of_event] = time.monotonic()
        match event:
            case RegisterSlot(slot=slot):
                self.registered[slot] = event
            case AcknowledgeCheckpoint(subtask=subtask, checkpoint_id=cid, state=state):
                jm.stats.checkpoints.report_ack(event)
                self.coordinator.receive_ack(subtask, cid, state)
            case DeclineCheckpoint(subtask=subtask, checkpoint_id=cid, reason=reason):
                if self.coordinator is not None:
                    self.coordinator.receive_decline(subtask, cid, reason)
            case SourceFinished(subtask=subtask):
                self.finished_sources.add(subtask)
                self._maybe_trigger_final()
            case RetryFinalCheckpoint():
                self._maybe_trigger_final()
            case SlotMetrics():
                jm.update_metrics(event)
            case SlotFinished(slot=slot):
                self.finished_slots.add(slot)
                return self._check_finished()
            case SlotFailed():
                return self._fail_with_root_cause(event)
            case SlotLost(slot=slot):
                if slot not in self.finished_slots:
                    pid = self.registered.get(slot)
                    who = f" (pid {pid.pid} on {pid.host})" if pid else ""
                    return self._fail(f"slot {slot}{who} was lost: its worker process died")
            case RunnerEnded(error=error):
                self.runner_ended = True
                # The runner can see the slots end before their last control messages (sent
                # just before they return) were read off the sockets: drain those first.
                outcome = self._drain_until_finished(SLOT_MESSAGE_GRACE_S)
                if outcome is not _CONTINUE:
                    return outcome
                return self._fail(
                    "the slots' runner ended before the job finished"
                    + (f": {_runner_error(error)}" if error else "")
                )
            case FailJob(reason=reason):
                return self._fail(reason)
            case Fenced(reason=reason):
                jm._keep_checkpoints = True
                self._fail(f"FencedWriterError: {reason}")
                jm.error.recoverable = False
                return None
            case Cancel():
                return JobStatus.CANCELED
            case SnapshotRequest():
                self.requests.start(event)
            case StopFailed(reason=reason):
                return self._on_stop_failed(reason)
        return _CONTINUE

    def _on_stop_failed(self, reason: str):
        if not self.requests.stop_failed(reason):
            log.warning("stop-with-savepoint failed, the job keeps running: %s", reason)
            return _CONTINUE
        self.jm._restart_freely = True  # the drained sources cannot resume: restart
        return self._fail(
            f"stop-with-savepoint --drain failed after the sources were drained ({reason}); "
            "restarting from the latest checkpoint or savepoint"
        )

    def _check_finished(self):
        if len(self.finished_slots) == self.graph.num_slots and self.final_completed:
            # wait for the runner, so the next job on this Spark context starts clean
            self.slots.join(TEARDOWN_TIMEOUT_S)
            return JobStatus.FINISHED
        if len(self.finished_slots) == self.graph.num_slots:
            return self._fail("every slot ended but the final checkpoint never completed")
        return _CONTINUE

    def _events_within(self, seconds: float):
        """The events that arrive in the next `seconds`."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                yield self.jm.events.get(timeout=remaining)
            except queue.Empty:
                return

    def _drain_until_finished(self, grace_s: float):
        for event in self._events_within(grace_s):
            if isinstance(event, RunnerEnded):
                continue
            outcome = self._handle(event)
            if outcome is not _CONTINUE:
                return outcome
        return _CONTINUE

    def _fail_with_root_cause(self, first: SlotFailed):
        """One failure makes its peers fail too (their connections to it break). Collect what
        the other slots report for a moment and blame the first error that is not such a
        consequence, so the user sees their own exception."""
        failures = [first]
        for event in self._events_within(ROOT_CAUSE_WINDOW_S):
            if isinstance(event, SlotFailed) and event.attempt == self.attempt:
                failures.append(event)
        root = next((f for f in failures if not _is_consequence(f.error)), first)
        self._fail(f"slot {root.slot} failed: {root.error}", root.traceback)
        self.jm.error.recoverable = not root.error.startswith(LOAD_FAILURE)
        return None

    def _fail(self, message: str, detail: str = ""):
        self.jm.error = JobFailure(message, detail)
        log.warning("attempt %d failed: %s", self.attempt, message)
        return None

    def _maybe_trigger_final(self) -> None:
        if self.finished_sources != self.sources or self.final_completed:
            return
        if self.coordinator is None:
            return
        if any(cid in self.final_ids for cid in self.coordinator.pending_ids):
            return
        if self.requests.draining:  # stop-with-savepoint --drain: the savepoint is the final one
            self.requests.trigger_drained()
            return
        # Always aligned: a sink must snapshot after its last record, or what arrives after an
        # unaligned snapshot would never be committed.
        cid = self.coordinator.trigger_checkpoint(CheckpointOptions(is_final=True), force=True)
        if cid is not None:
            self.final_ids.add(cid)

    def _on_complete(self, cp: CompletedCheckpoint) -> None:
        jm = self.jm
        jm.stats.checkpoints.report_completed(cp)
        if cp.checkpoint_id in self.final_ids:
            self.final_completed = True
        if cp.is_savepoint:
            jm.latest_savepoint = newest_snapshot(jm.latest_savepoint, cp)
            log.info("savepoint %d completed: %s", cp.checkpoint_id, cp.path)
            warn_generated_uids(self.graph, cp.metadata["operators"], f"savepoint {cp.path}")
        request = self.requests.completed(cp)
        if request is not None and request.kind is SnapshotKind.STOP:
            jm._stop = (request, cp)  # succeeds once the job has finished

    def teardown(self) -> None:
        jm = self.jm
        self.tearing_down = True
        if self.coordinator is not None:
            self.coordinator.stop("job attempt ended")
            jm.next_checkpoint_id = self.coordinator.next_checkpoint_id
        self.requests.teardown(jm._stop[0] if jm._stop is not None else None)
        jm.server.broadcast(self.attempt, CancelSlot("the job attempt ended"))
        if not self.runner_ended:
            self.slots.cancel()
            if not self.slots.join(TEARDOWN_TIMEOUT_S):
                log.warning(
                    "slots of attempt %d did not stop within %ss", self.attempt, TEARDOWN_TIMEOUT_S
                )

    # CoordinatorHooks -------------------------------------------------------------------------
    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions) -> None:
        subtasks = len(self.graph.all_subtasks())
        self.jm.stats.checkpoints.report_triggered(checkpoint_id, timestamp_ms, options, subtasks)
        if options.target_location is not None:
            self.jm.storage.create_dir(options.target_location)  # a savepoint's own directory
        else:
            self.jm.storage.create_checkpoint_dir(checkpoint_id)
        # unaligned (or aligned with a timeout): the trigger reaches every subtask ahead of the
        # barriers, to snapshot at once (or start the alignment clock); else just the sources
        to_all = options.unaligned or options.aligned_timeout_ms is not None
        slots = range(self.graph.num_slots) if to_all else {i for _v, i in self.sources}
        for slot in slots:
            self.jm.server.send(
                self.attempt, slot, TriggerCheckpoint(checkpoint_id, timestamp_ms, options)
            )

    def finalize(self, pending: PendingCheckpoint) -> CompletedCheckpoint:
        jm = self.jm
        target = pending.options.target_location
        directory = target or jm.storage.checkpoint_dir(pending.checkpoint_id)
        completed_ms = int(time.time() * 1000)
        metadata = build_metadata(
            self.graph,
            jm.job_id,
            pending,
            completed_ms,
            attempt=self.attempt,
            generation=jm.storage.generation,
        )
        try:
            jm.storage.write_metadata(directory, metadata)
        except FencedWriterError as e:  # the checkpoint must not complete here: stop the job
            jm.events.put(Fenced(self.attempt, str(e)))
            raise
        return CompletedCheckpoint.of(
            pending,
            completed_ms=completed_ms,
            path=directory,
            size_bytes=metadata["size_bytes"],
            metadata=metadata,
        )

    def notify_complete(self, checkpoint_id: int) -> None:
        self.jm.server.broadcast(self.attempt, NotifyCheckpointComplete(checkpoint_id))

    def notify_aborted(self, checkpoint_id: int, reason: str) -> None:
        self.jm.stats.checkpoints.report_failed(checkpoint_id, reason)
        log.info("checkpoint %d aborted: %s", checkpoint_id, reason)
        self.jm.server.broadcast(self.attempt, NotifyCheckpointAborted(checkpoint_id))
        was_stop = self.requests.aborted(checkpoint_id, reason)
        if self.tearing_down:
            return
        if was_stop:
            self.jm.events.put(StopFailed(self.attempt, reason))
        elif checkpoint_id in self.final_ids:
            self.jm.scheduler.schedule(
                0.2, lambda: self.jm.events.put(RetryFinalCheckpoint(self.attempt))
            )

    def discard(self, cp: CompletedCheckpoint | PendingCheckpoint) -> None:
        if isinstance(cp, CompletedCheckpoint):
            path = cp.path
        else:  # a pending one: a savepoint's own directory, or the job's chk-<n>
            path = cp.options.target_location or self.jm.storage.checkpoint_dir(cp.checkpoint_id)
        try:
            self.jm.discard_snapshot(path)
        except FencedWriterError as e:  # a newer generation may be restoring from it
            log.warning("not deleting %s: %s", path, e)
            self.jm.events.put(Fenced(self.attempt, str(e)))

    def fail_job(self, reason: str) -> None:
        self.jm.events.put(FailJob(self.attempt, reason))


def _claimed_checkpoint(metadata: dict[str, Any], directory: str) -> CompletedCheckpoint:
    """The restored snapshot as one of the job's own retained checkpoints (RestoreMode.CLAIM)."""
    timestamp_ms = int(metadata["timestamp_ms"])
    completed_ms = int(metadata.get("completed_ms", timestamp_ms))
    return CompletedCheckpoint(
        checkpoint_id=int(metadata["checkpoint_id"]),
        timestamp_ms=timestamp_ms,
        completed_ms=completed_ms,
        duration_ms=max(completed_ms - timestamp_ms, 0),
        path=directory,
        size_bytes=int(metadata.get("size_bytes", 0)),
        is_savepoint=False,
        metadata=metadata,
    )


_CONTINUE = object()
ROOT_CAUSE_WINDOW_S = 0.3
LOAD_FAILURE = "could not load the job"  # runtime/slot.py: deterministic, never restarted
SLOT_MESSAGE_GRACE_S = 5.0
HEARTBEAT_CHECK_S = 1.0
_CONSEQUENCES = (
    "ConnectionResetError",
    "BrokenPipeError",
    "EOFError",
    "TaskCancelledError",
    "ConnectionRefusedError",
    "ConnectionAbortedError",
)


def _is_consequence(error: str) -> bool:
    return error.startswith(_CONSEQUENCES)


def _runner_error(error: BaseException) -> str:
    """The useful part of a runner's error: the Python exception a Spark worker raised (Py4J
    wraps it in a long Java trace), with a hint when the worker cannot even import tidegate."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    python = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception): ", line)]
    found = python[-1] if python else (lines[0] if lines else type(error).__name__)
    if "No module named 'tidegate'" in found:
        found += (
            " — the Spark workers' Python cannot import tidegate: install it in the executors' "
            "environment or set PYSPARK_PYTHON to a Python that has it"
        )
    return found
