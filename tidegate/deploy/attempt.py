"""One attempt of a job: the deployment of its slots, from registration to a terminal outcome.

`JobAttempt` executes the attempt's state machine (`AttemptState`, deploy/attempt_state.py) on
the JobMaster's thread (DESIGN §3): it takes the events of the JobMaster's queue, hands them to
the state with the time, and carries out the commands it returns (I/O at the edge): the address
exchange, the CheckpointCoordinator (the attempt is the coordinator's hooks), the final
checkpoint, user requests, and the outcome. The JobMaster (deploy/jobmaster.py) decides what
happens after: restart or stop.
"""

from __future__ import annotations

import enum
import logging
import queue
import time
from typing import TYPE_CHECKING, Any

from tidegate.checkpoint.coordinator import CheckpointCoordinator, CheckpointCoordinatorConfig
from tidegate.checkpoint.errors import (
    FencedWriterError,
)
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.checkpoint.savepoints import newest_snapshot, savepoint_location
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common.job_status import JobStatus
from tidegate.deploy.attempt_events import (
    AttemptOutcome,
    CancelLateSlot,
    CancelRunner,
    CancelSlots,
    CheckpointCompleted,
    CloseRequests,
    Command,
    EndAttempt,
    Event,
    FailJob,
    Failure,
    Fenced,
    FinalCheckpointDropped,
    FinalCheckpointTriggered,
    JoinRunner,
    KeepCheckpoints,
    RestartFreely,
    RetryFinalCheckpoint,
    RouteAck,
    RouteDecline,
    RouteMetrics,
    RouteSnapshotRequest,
    SendAddresses,
    SettleFailedStop,
    StartCheckpointing,
    StopAfterDrainFailed,
    StopCheckpointing,
    TearDown,
    Tick,
    TriggerFinalCheckpoint,
)
from tidegate.deploy.attempt_state import AttemptConfig, AttemptState, FinalStep
from tidegate.deploy.placement import misplaced
from tidegate.deploy.restore import warn_generated_uids
from tidegate.deploy.shared_state import check_references, delete_shared_files, discard_references
from tidegate.deploy.snapshot_metadata import build_metadata
from tidegate.deploy.snapshot_requests import (
    AttemptRequests,
    SnapshotKind,
    SnapshotRequest,
    StopFailed,
)
from tidegate.runtime.faults import fail_metadata_write
from tidegate.runtime.messages import (
    CancelSlot,
    DrainSources,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    SlotAddresses,
    SubtaskId,
    TriggerCheckpoint,
)

if TYPE_CHECKING:
    from tidegate.deploy.jobmaster import JobMaster

log = logging.getLogger("tidegate.jobmaster")


class JobFailure(Exception):
    def __init__(self, message: str, detail: str = "", *, recoverable: bool = True) -> None:
        super().__init__(message)
        self.detail = detail
        #: False when a restart would fail the same way (the workers cannot load the job)
        self.recoverable = recoverable


class JobAttempt:
    """Executes one deployment's `AttemptState`; also the coordinator's hooks
    (CoordinatorHooks); serves the user's snapshot requests (`AttemptRequests`) through
    `_RequestTarget`."""

    def __init__(self, jm: JobMaster, attempt: int, slots: Any, graph: Any) -> None:
        self.jm = jm
        self.attempt = attempt
        self.slots = slots
        self.graph = graph  # the spec's graph, with the restored max parallelism
        sources = frozenset(
            (v.vertex_id, i)
            for v in self.graph.vertices.values()
            if v.is_source
            for i in range(v.parallelism)
        )
        config = AttemptConfig(
            attempt, graph.num_slots, sources, jm.spec.heartbeat_timeout_ms / 1000
        )
        self.state = AttemptState(config, time.monotonic())
        self.coordinator: CheckpointCoordinator | None = None
        self.requests = AttemptRequests(_RequestTarget(self))

    @property
    def sources(self) -> frozenset[SubtaskId]:
        return self.state.config.sources

    def run(self) -> JobStatus | None:
        """Feed the queue's events (a Tick when none came in time) until the attempt ends:
        FINISHED, CANCELED, or None when it failed (`jm.error` says why)."""
        while True:
            now = time.monotonic()
            wait_s = max(self.state.next_tick(now) - now, 0.0)
            try:
                event = self.jm.events.get(timeout=wait_s)
            except queue.Empty:
                event = Tick()
            outcome = self._feed(event)
            if outcome is not _CONTINUE:
                return outcome

    def teardown(self) -> None:
        """Release the attempt, whatever its outcome (the JobMaster calls it last)."""
        for command in self.state.handle(TearDown(), time.monotonic()):
            self._apply(command)

    # executing the state's commands ------------------------------------------------------------
    def _feed(self, event: Event) -> _Outcome:
        """Hand `event` to the state and execute its commands: a JobStatus, None (failed) or
        _CONTINUE."""
        for command in self.state.handle(event, time.monotonic()):
            outcome = self._apply(command)
            if outcome is not _CONTINUE:
                return outcome
        return _CONTINUE

    def _apply(self, command: Command) -> _Outcome:
        jm = self.jm
        match command:
            case SendAddresses(addresses=addresses, pids=pids, hosts=hosts):
                jm.slot_pids = dict(pids)
                jm.local_state_hosts.attempt_running(hosts)
                for message in misplaced(jm.preferred_hosts, hosts):
                    log.warning(message)
                jm.slot_addresses = dict(addresses)
                jm.server.broadcast(self.attempt, SlotAddresses(dict(addresses)))
                jm.status = JobStatus.RUNNING
                jm.stats.startup.mark(self.attempt, "running")
                log.info("attempt %d running: all %d slots registered", self.attempt, len(pids))
            case StartCheckpointing():
                self._start_coordinator()
            case TriggerFinalCheckpoint():
                self._trigger_final()
            case CancelLateSlot(attempt=attempt, slot=slot):
                jm.server.send(attempt, slot, CancelSlot("its attempt has ended"))
            case RouteAck(ack=ack):
                jm.stats.checkpoints.report_ack(ack)
                self.coordinator.receive_ack(ack.subtask, ack.checkpoint_id, ack.state)
            case RouteDecline(decline=decline):
                self.coordinator.receive_decline(
                    decline.subtask, decline.checkpoint_id, decline.reason
                )
            case RouteMetrics(metrics=metrics):
                jm.update_metrics(metrics)
            case RouteSnapshotRequest(request=request):
                self.requests.start(request)
            case SettleFailedStop(reason=reason):
                return self._settle_failed_stop(reason)
            case KeepCheckpoints():
                jm._keep_checkpoints = True
            case RestartFreely():
                jm._restart_freely = True
            case JoinRunner(timeout_s=timeout_s):
                self.slots.join(timeout_s)
            case EndAttempt(outcome=outcome, failure=failure):
                return self._end(outcome, failure)
            case StopCheckpointing() | CloseRequests() | CancelSlots() | CancelRunner():
                self._release(command)
        return _CONTINUE

    def _start_coordinator(self) -> None:
        """The end of step 1 (deploy/attempt_state.py): start checkpointing."""
        jm, settings = self.jm, self.jm.spec.checkpoint
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

    def _trigger_final(self) -> None:
        match self.state.final_step(self.coordinator.pending_ids, self.requests.draining):
            case FinalStep.UNDER_WAY:
                pass
            case FinalStep.DRAINED_SAVEPOINT:
                self.requests.trigger_drained()
            case FinalStep.TRIGGER:
                # Always aligned: a sink must snapshot after its last record, or what arrives
                # after an unaligned snapshot would never be committed.
                options = CheckpointOptions(is_final=True)
                cid = self.coordinator.trigger_checkpoint(options, force=True)
                if cid is not None:
                    self._feed(FinalCheckpointTriggered(cid))

    def _settle_failed_stop(self, reason: str) -> _Outcome:
        if not self.requests.stop_failed(reason):
            log.warning("stop-with-savepoint failed, the job keeps running: %s", reason)
            return _CONTINUE
        return self._feed(StopAfterDrainFailed(reason))  # the drained sources cannot resume

    def _end(self, outcome: AttemptOutcome, failure: Failure | None) -> JobStatus | None:
        match outcome:
            case AttemptOutcome.FINISHED:
                return JobStatus.FINISHED
            case AttemptOutcome.CANCELED:
                return JobStatus.CANCELED
            case AttemptOutcome.FAILED:
                assert failure is not None
                self.jm.stats.startup.attempt_failed()
                self.jm.error = JobFailure(
                    failure.message, failure.detail, recoverable=failure.recoverable
                )
                log.warning("attempt %d failed: %s", self.attempt, failure.message)
                return None

    def _release(self, command: Command) -> None:
        """The commands of TearDown."""
        jm = self.jm
        match command:
            case StopCheckpointing(reason=reason) if self.coordinator is not None:
                self.coordinator.stop(reason)
                jm.next_checkpoint_id = self.coordinator.next_checkpoint_id
            case CloseRequests():
                self.requests.teardown(jm._stop[0] if jm._stop is not None else None)
            case CancelSlots(reason=reason):
                jm.server.broadcast(self.attempt, CancelSlot(reason))
            case CancelRunner(timeout_s=timeout_s):
                self.slots.cancel()
                if not self.slots.join(timeout_s):
                    log.warning(
                        "slots of attempt %d did not stop within %ss", self.attempt, timeout_s
                    )

    def _on_complete(self, cp: CompletedCheckpoint) -> None:
        jm = self.jm
        jm.stats.checkpoints.report_completed(cp)
        jm.local_state_hosts.checkpoint_completed()
        try:  # shared files the completion released (also when it subsumed nothing)
            delete_shared_files(jm.storage, jm.shared_registry.take_unused())
        except FencedWriterError as e:
            log.warning("not deleting shared files: %s", e)
        self._feed(CheckpointCompleted(cp.checkpoint_id))
        if cp.is_savepoint:
            jm.latest_savepoint = newest_snapshot(jm.latest_savepoint, cp)
            log.info("savepoint %d completed: %s", cp.checkpoint_id, cp.path)
            warn_generated_uids(self.graph, cp.metadata.operators, f"savepoint {cp.path}")
        request = self.requests.completed(cp)
        if request is not None and request.kind is SnapshotKind.STOP:
            jm._stop = (request, cp)  # succeeds once the job has finished

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
        if not pending.is_savepoint:
            check_references(jm.shared_registry, metadata, directory)
        try:
            fail_metadata_write(jm.spec.faults, pending.checkpoint_id, self.attempt)
            jm.storage.write_metadata(directory, metadata)
        except FencedWriterError as e:  # the checkpoint must not complete here: stop the job
            jm.events.put(Fenced(self.attempt, str(e)))
            raise
        return CompletedCheckpoint.of(
            pending,
            completed_ms=completed_ms,
            path=directory,
            size_bytes=metadata.size_bytes,
            metadata=metadata,
        )

    def notify_complete(self, checkpoint_id: int) -> None:
        self.jm.server.broadcast(self.attempt, NotifyCheckpointComplete(checkpoint_id))

    def notify_aborted(self, checkpoint_id: int, reason: str) -> None:
        self.jm.stats.checkpoints.report_failed(checkpoint_id, reason)
        log.info("checkpoint %d aborted: %s", checkpoint_id, reason)
        self.jm.server.broadcast(self.attempt, NotifyCheckpointAborted(checkpoint_id))
        was_stop = self.requests.aborted(checkpoint_id, reason)
        # may run on the coordinator's scheduler thread (a timeout): only reads the state
        if self.state.tearing_down:
            return
        if was_stop:
            self.jm.events.put(StopFailed(self.attempt, reason))
        elif self.state.is_final(checkpoint_id):
            self.jm.scheduler.schedule(
                0.2, lambda: self.jm.events.put(RetryFinalCheckpoint(self.attempt))
            )

    def discard(self, cp: CompletedCheckpoint | PendingCheckpoint) -> None:
        if isinstance(cp, CompletedCheckpoint):
            path = cp.path
        else:  # a pending one: a savepoint's own directory, or the job's chk-<n>
            path = cp.options.target_location or self.jm.storage.checkpoint_dir(cp.checkpoint_id)
        try:
            unused = discard_references(self.jm.shared_registry, cp, path)
            self.jm.discard_snapshot(path)
            delete_shared_files(self.jm.storage, unused + self.jm.shared_registry.take_unused())
        except FencedWriterError as e:  # a newer generation may be restoring from it
            log.warning("not deleting %s: %s", path, e)
            self.jm.events.put(Fenced(self.attempt, str(e)))

    def fail_job(self, reason: str) -> None:
        self.jm.events.put(FailJob(self.attempt, reason))


class _RequestTarget:
    """The JobAttempt as `AttemptRequests` sees it (deploy/snapshot_requests.RequestTarget);
    marking a final checkpoint becomes an event of the attempt's state."""

    def __init__(self, attempt: JobAttempt) -> None:
        self._attempt = attempt
        self._jm = attempt.jm

    def not_running_error(self) -> Exception | None:
        if self._attempt.coordinator is None or self._jm.status is not JobStatus.RUNNING:
            return self._jm.not_running_error()
        return None

    def sources_finished(self) -> bool:
        return self._attempt.state.finished_sources == self._attempt.sources

    def savepoint_location(self, request: SnapshotRequest) -> str:
        return savepoint_location(self._jm.savepoint_dir_for(request), self._jm.job_id)

    def create_dir(self, location: str) -> None:
        self._jm.storage.create_dir(location)

    def trigger(self, options: CheckpointOptions | None) -> int | None:
        return self._attempt.coordinator.trigger_checkpoint(options, force=True)

    def suspend_periodic(self) -> None:
        self._attempt.coordinator.suspend_periodic()

    def resume_periodic(self) -> None:
        self._attempt.coordinator.resume_periodic()

    def drain_sources(self) -> None:
        for slot in {i for _v, i in self._attempt.sources}:
            self._jm.server.send(self._attempt.attempt, slot, DrainSources())

    def set_final(self, checkpoint_id: int, final: bool) -> None:
        event = FinalCheckpointTriggered if final else FinalCheckpointDropped
        self._attempt._feed(event(checkpoint_id))

    def stop_failed(self, reason: str) -> None:
        self._jm.events.put(StopFailed(self._attempt.attempt, reason))


class _Continue(enum.Enum):
    """What a command returns when the attempt goes on."""

    CONTINUE = "continue"


_CONTINUE = _Continue.CONTINUE
#: what executing commands comes to: the attempt goes on, or its outcome (None: it failed)
_Outcome = JobStatus | None | _Continue
