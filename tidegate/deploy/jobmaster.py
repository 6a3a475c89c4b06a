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
import secrets
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.errors import (
    CheckpointError,
    CheckpointIntegrityError,
    CheckpointNotFoundError,
    CheckpointTriggerError,
    FencedWriterError,
    JobNotRunningError,
    NoSavepointDirectoryError,
)
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.savepoints import (
    discard_snapshot_dir,
)
from tidegate.checkpoint.scheduling import ThreadScheduler
from tidegate.checkpoint.selection import RestoreCandidate, choose_checkpoint
from tidegate.checkpoint.shared_storage import StorageCheck
from tidegate.checkpoint.storage import CheckpointStorage, checkpoint_candidates
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore
from tidegate.checkpoint.sweep import sweep_job_dir
from tidegate.common.job_status import JobStatus
from tidegate.deploy import runners
from tidegate.deploy.attempt import JobAttempt, JobFailure
from tidegate.deploy.attempt_events import Cancel, RunnerEnded
from tidegate.deploy.control_server import ControlServer, SlotLost
from tidegate.deploy.job_spec import CheckpointRetention, JobSpec, RestoreMode
from tidegate.deploy.network_plan import (
    ClusterNetworkError,
    NetworkPlan,
    is_local_master,
    plan_network,
    route_to_master,
)
from tidegate.deploy.placement import LocalStateHosts
from tidegate.deploy.restore import RestorePlan, plan_restore, warn_generated_uids
from tidegate.deploy.shared_state import delete_shared_files, pin_retained_snapshots
from tidegate.deploy.slot_output import SlotOutputPrinter
from tidegate.deploy.snapshot_requests import (
    SnapshotKind,
    SnapshotRequest,
)
from tidegate.deploy.storage_checks import remove_checks, write_attempt_checks
from tidegate.metrics.checkpoint_stats import CheckpointStatsTracker
from tidegate.metrics.failures import JobTimeline
from tidegate.metrics.job_metrics import JobMetrics
from tidegate.metrics.startup import StartupTimeline
from tidegate.runtime.deployment import Deployment
from tidegate.runtime.messages import RegisterSlot, SlotMetrics
from tidegate.runtime.network import advertised_address
from tidegate.runtime.plan import JobGraph
from tidegate.state.shared_registry import SharedStateRegistry

#: a snapshot to restore: its metadata and its directory
Restore = tuple[CheckpointMetadata, str]

log = logging.getLogger("tidegate.jobmaster")


@dataclass
class JobStats:
    """What the driver knows about a job while it runs: checkpoint statistics, subtask metrics
    and the failure timeline (served in full by the REST API), and the few numbers
    `tidegate run`'s status line shows (the properties)."""

    checkpoints: CheckpointStatsTracker
    metrics: JobMetrics
    timeline: JobTimeline = field(default_factory=JobTimeline)
    #: when each attempt reached each step of its start-up (metrics/startup.py)
    startup: StartupTimeline = field(default_factory=StartupTimeline)
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
        #: prints the slots' print() and DataStream.print() output, re-emits their log records
        self.output = SlotOutputPrinter()
        self.secret = secrets.token_bytes(32)
        base = spec.checkpoint.storage
        self.storage = CheckpointStorage(base, self.job_id, spec.filesystems)
        #: reference counts of the shared files of incremental checkpoints
        self.shared_registry = SharedStateRegistry()
        self.store = CompletedCheckpointStore(spec.checkpoint.max_retained, self.shared_registry)
        self.scheduler = ThreadScheduler()
        self.attempt = 0
        self.failure_times: list[float] = []
        self.next_checkpoint_id = 1
        self.slot_pids: dict[int, int] = {}
        #: where slots' task-local state is, and the current attempt's wish (deploy/placement.py)
        self.local_state_hosts = LocalStateHosts(enabled=spec.local_recovery)
        self.preferred_hosts: list[str | None] | None = None
        #: the data addresses the running attempt's slots advertised, by slot
        self.slot_addresses: dict[int, tuple[str, int]] = {}
        self.done = threading.Event()
        self._cancelled = threading.Event()
        self.server: ControlServer | None = None
        self.network = NetworkPlan("127.0.0.1", None, "127.0.0.1")  # decided in run()
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
        #: the current attempt's proof that every host sees the storage (storage_checks.py)
        self._storage_checks: tuple[StorageCheck, ...] = ()

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
        self.stats.startup.attempt_started(self.attempt)
        try:
            self.storage.verify_writable()
            # fence off older writers first, so none completes a checkpoint after the choice
            self.storage.start_generation()
            restore = self._initial_restore()
            # never reuse a chk-<n> directory (an earlier run of the same job id left them)
            self.next_checkpoint_id = max(
                self.next_checkpoint_id, self.storage.highest_checkpoint_id() + 1
            )
            self._sweep()
            self.network = self._network_plan()
            self.server = ControlServer(
                self.secret,
                self.network.driver_bind,
                self._on_slot_message,
                self.spec.heartbeat_timeout_ms / 1000,
            )
            while True:
                outcome = self._run_attempt(restore)
                if outcome is not None:
                    self.status = outcome
                    break
                if not self._await_restart():
                    break
                self.attempt += 1
                self.stats.restarts += 1
                self.stats.startup.attempt_started(self.attempt)
                self._start_generation()
                restore = self._restore_after_failure(restore)
                self._sweep()
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

    def _network_plan(self) -> NetworkPlan:
        """Where to bind and what to advertise (deploy/network_plan.py), from the Spark session
        the job runs on; a plan that cannot work fails the job saying which key to set."""
        master = driver_host = None
        if self.spec.runner != "local":
            context = self._spark(check_slots=False)
            master = context.master
            driver_host = context.getConf().get("spark.driver.host", None)
        if not is_local_master(master) and self.spec.checkpoint.storage_defaulted:
            raise JobFailure(
                f"the Spark master {master!r} runs slots on other hosts, so the checkpoint "
                f"directory must be storage every host reaches, but none was set (the default "
                f"{self.spec.checkpoint.storage} is this host's own): set "
                "execution.checkpointing.dir (or env.get_checkpoint_config()"
                ".set_checkpoint_storage_dir) to a shared filesystem or s3://... path",
                recoverable=False,
            )
        try:
            return plan_network(
                master,
                bind_host=self.spec.bind_host,
                advertised_host=self.spec.advertised_host,
                spark_driver_host=driver_host,
                route_host=None if is_local_master(master) else route_to_master(master),
            )
        except ClusterNetworkError as e:
            raise JobFailure(str(e), recoverable=False) from None

    def _spark(self, check_slots: bool = True) -> Any:
        """The job's SparkContext: the given session's, or spark_context's
        (deploy/spark_session.py; started at the first call, reused after). `check_slots`
        False: without waiting for a cluster's executors, so that a job its settings rule out
        fails before they start."""
        from tidegate.deploy.spark_session import spark_context

        given = self.spec.spark_session
        context = given.sparkContext if given is not None else None
        if context is None:
            context = spark_context(
                self.spec.spark_master,
                self.spec.graph.num_slots,
                self.spec.configuration,
                check_slots=check_slots,
            )
        if check_slots:
            self.stats.startup.mark(self.attempt, "session_ready")
        return context

    # attempts ---------------------------------------------------------------------------------
    def _initial_restore(self) -> Restore | None:
        path = self.spec.restore_path
        if path is None:
            return None
        self._initial_candidates = [
            RestoreCandidate(d) for d in checkpoint_candidates(path, self.spec.filesystems)
        ]
        metadata, directory = self._choose_restore(self._initial_candidates)
        self.next_checkpoint_id = max(self.next_checkpoint_id, metadata.checkpoint_id + 1)
        warn_generated_uids(self.spec.graph, metadata.operators, f"restoring {directory}")
        if self.spec.restore_mode is RestoreMode.CLAIM:
            # the job owns it now: subsumed and deleted like one of its own checkpoints
            self.store.add_restored(_claimed_checkpoint(metadata, directory))
            self._claimed.add(directory)
            if metadata.is_incremental:
                # its shared files that snapshots beside it use are never deleted
                pin_retained_snapshots(
                    self.shared_registry, directory, self._claimed, self.spec.filesystems
                )
        return metadata, directory

    def _restore_after_failure(self, previous: Restore | None) -> Restore | None:
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

    def _choose_restore(self, candidates: list[RestoreCandidate]) -> Restore:
        """The first intact candidate (checkpoint.selection); a damaged checkpoint fails the
        job for good (a restart would meet the same damage) and keeps every checkpoint."""
        uids = {op.uid for v in self.spec.graph.vertices.values() for op in v.operators}
        try:
            return choose_checkpoint(
                candidates,
                uids=uids,
                allow_fallback=self.spec.restore_fallback,
                filesystems=self.spec.filesystems,
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

    def _sweep(self) -> None:
        """Delete what failures left in the job directory (checkpoint/sweep.py): after the new
        generation fenced older writers, before this attempt triggers a checkpoint."""
        try:
            sweep_job_dir(self.storage)
        except Exception as e:  # a listing that fails: garbage stays, the job goes on
            log.warning("could not sweep %s: %s: %s", self.storage.job_dir, type(e).__name__, e)

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

    def _run_attempt(self, restore: Restore | None) -> JobStatus | None:
        """One deployment. Returns a terminal status, or None after a failure (self.error set)."""
        context = None if self.spec.runner == "local" else self._spark()
        graph, plan, restored_id = self._plan_restore(restore)
        # each slot proves it sees the checkpoint storage and the paths of its sinks
        previous, self._storage_checks = (
            self._storage_checks,
            write_attempt_checks(self.storage, graph),
        )
        remove_checks(previous, self.storage)
        deployment = self._deployment(graph, plan, restored_id)
        payload = runners.pack_deployment(deployment, self.spec.python)
        attempt = self.attempt
        on_end = lambda error: self.events.put(RunnerEnded(attempt, error))  # noqa: E731
        self.preferred_hosts = None
        # marked before the runner is asked: the local runner's forked slots may start (and
        # report their start) before start_local returns
        self.stats.startup.mark(attempt, "stage_submitted")
        if context is None:
            slots = runners.start_local(payload, graph.num_slots, on_end)
        else:
            self.preferred_hosts = self.local_state_hosts.preferred(graph.num_slots)
            slots = runners.start_spark(
                context, payload, graph.num_slots, on_end, self.preferred_hosts
            )
        attempt_state = JobAttempt(self, attempt, slots, graph)
        try:
            outcome = attempt_state.run()
        finally:
            attempt_state.teardown()
        if outcome is not JobStatus.FINISHED:
            self._settle_stop(outcome)
        return outcome

    def _plan_restore(self, restore: Restore | None) -> tuple[JobGraph, RestorePlan, int | None]:
        """The graph to deploy (with the snapshot's max parallelism), each subtask's state to
        restore and the restored checkpoint's id; nothing to restore without a snapshot."""
        graph = self.spec.graph
        if restore is None:
            return graph, {}, None
        metadata, directory = restore
        owned = any(cp.path == directory for cp in self.store.all())
        plan, max_p = plan_restore(
            graph,
            metadata,
            directory,
            self.spec.allow_non_restored_state,
            reuse_shared_files=owned,
            filesystems=self.spec.filesystems,
        )
        self.stats.checkpoints.report_restored(
            metadata.checkpoint_id,
            directory,
            is_savepoint=metadata.is_savepoint,
            attempt=self.attempt,
        )
        return dataclasses.replace(graph, max_parallelism=max_p), plan, metadata.checkpoint_id

    def _deployment(
        self, graph: JobGraph, plan: RestorePlan, restored_id: int | None
    ) -> Deployment:
        """What every slot of this attempt is sent: the graph, the job's settings, its state."""
        return Deployment(
            job_id=self.job_id,
            attempt=self.attempt,
            graph=graph,
            secret=self.secret,
            driver_address=advertised_address(self.server.address, self.network.advertised_host),
            bind_host=self.network.slot_bind,
            checkpoint_base=self.spec.checkpoint.storage,
            filesystems=self.spec.filesystems,
            exactly_once=self.spec.checkpoint.exactly_once,
            batch_size=self.spec.batch_size,
            buffer_timeout_ms=self.spec.buffer_timeout_ms,
            queue_capacity=self.spec.queue_capacity,
            gc_threshold=self.spec.gc_threshold,
            switch_interval_us=self.spec.switch_interval_us,
            restore=plan,
            restored_checkpoint_id=restored_id,
            generation=self.storage.generation,
            local_recovery=self.spec.local_recovery,
            local_recovery_dir=self.spec.local_recovery_dir,
            state_backend=self.spec.state_backend,
            log_level=logging.getLogger().getEffectiveLevel(),
            storage_checks=self._storage_checks,
            heartbeat_timeout_s=self.spec.heartbeat_timeout_ms / 1000,
            faults=self.spec.faults,
        )

    def _on_slot_message(self, message: object) -> None:
        """A message from a slot (on the control server's reader thread of its connection):
        output is printed at once, in the order the slot wrote it; the rest is an event."""
        if self.output.handle(message):
            return
        if isinstance(message, SlotLost):
            self.output.slot_ended(message.attempt, message.slot)
        elif isinstance(message, RegisterSlot):
            self.stats.startup.slot_registered(message.attempt, message.slot, message.startup)
        self.events.put(message)

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
            discard_snapshot_dir(path, self.spec.filesystems)

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
        remove_checks(self._storage_checks, self.storage)
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
                delete_shared_files(self.storage, self.shared_registry.release_all())
            except FencedWriterError as e:
                log.warning("not deleting the job's checkpoints: %s", e)

    def update_metrics(self, msg: SlotMetrics) -> None:
        self.stats.metrics.update(msg)
        self.stats.startup.slot_ready(msg.attempt, msg.slot, msg.tasks_created)


def _claimed_checkpoint(metadata: CheckpointMetadata, directory: str) -> CompletedCheckpoint:
    """The restored snapshot as one of the job's own retained checkpoints (RestoreMode.CLAIM)."""
    completed_ms = metadata.completed_or_triggered_ms
    return CompletedCheckpoint(
        checkpoint_id=metadata.checkpoint_id,
        timestamp_ms=metadata.timestamp_ms,
        completed_ms=completed_ms,
        duration_ms=max(completed_ms - metadata.timestamp_ms, 0),
        path=directory,
        size_bytes=metadata.size_bytes or 0,
        is_savepoint=False,
        metadata=metadata,
    )
