"""One attempt of a job: the deployment of its slots, from registration to a terminal outcome.

`JobAttempt` runs the attempt's event loop on the JobMaster's thread (DESIGN §3): slot
registration and the address exchange, the CheckpointCoordinator (it is the coordinator's
hooks), heartbeats, the final checkpoint, and the failure that ends the attempt with its root
cause. The JobMaster (deploy/jobmaster.py) decides what happens after: restart or stop.
"""

from __future__ import annotations

import logging
import queue
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidegate.checkpoint.coordinator import CheckpointCoordinator, CheckpointCoordinatorConfig
from tidegate.checkpoint.errors import (
    FencedWriterError,
)
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.checkpoint.savepoints import (
    newest_snapshot,
)
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common.job_status import JobStatus
from tidegate.deploy.control_server import SlotLost
from tidegate.deploy.restore import build_metadata, warn_generated_uids
from tidegate.deploy.shared_state import check_references, delete_shared_files, discard_references
from tidegate.deploy.snapshot_requests import (
    AttemptRequests,
    SnapshotKind,
    SnapshotRequest,
    StopFailed,
)
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

if TYPE_CHECKING:
    from tidegate.deploy.jobmaster import JobMaster

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


class JobAttempt:
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
        try:  # shared files the completion released (also when it subsumed nothing)
            delete_shared_files(jm.storage, jm.shared_registry.take_unused())
        except FencedWriterError as e:
            log.warning("not deleting shared files: %s", e)
        if cp.checkpoint_id in self.final_ids:
            self.final_completed = True
        if cp.is_savepoint:
            jm.latest_savepoint = newest_snapshot(jm.latest_savepoint, cp)
            log.info("savepoint %d completed: %s", cp.checkpoint_id, cp.path)
            warn_generated_uids(self.graph, cp.metadata.operators, f"savepoint {cp.path}")
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
        if not pending.is_savepoint:
            check_references(jm.shared_registry, metadata, directory)
        try:
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
            unused = discard_references(self.jm.shared_registry, cp, path)
            self.jm.discard_snapshot(path)
            delete_shared_files(self.jm.storage, unused + self.jm.shared_registry.take_unused())
        except FencedWriterError as e:  # a newer generation may be restoring from it
            log.warning("not deleting %s: %s", path, e)
            self.jm.events.put(Fenced(self.attempt, str(e)))

    def fail_job(self, reason: str) -> None:
        self.jm.events.put(FailJob(self.attempt, reason))


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
