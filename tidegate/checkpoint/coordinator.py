"""The checkpoint coordinator: triggers checkpoints, collects acks, completes or aborts them.

It follows Flink's `CheckpointCoordinator`. The protocol per checkpoint:

1. Trigger: allocate the next id, create a PendingCheckpoint expecting an ack from every subtask,
   arm its timeout, and send *trigger* to the source subtasks (`hooks.trigger`).
2. Collect: each subtask acks with its state handles, or declines (the checkpoint is aborted).
3. Complete, on the last ack: `hooks.finalize` writes `_metadata` -> `store.add` -> discard the
   completed checkpoints the store no longer retains -> abort older pending checkpoints as
   subsumed -> `failure_manager.on_success` -> `hooks.notify_complete` -> `on_complete` listeners.
4. Abort (expired, declined, finalize or trigger failed, subsumed, stopped): mark discarded ->
   `hooks.discard` -> `hooks.notify_aborted` -> failure manager (not for subsumed or stopped
   checkpoints, nor for savepoints: a failed user-triggered savepoint must not fail the job).

Threading: acks and declines arrive on server threads while timers fire on the scheduler thread.
- `_lock` guards all mutable state and is never held while calling hooks, listeners or the
  failure manager, so those may block or call back into the coordinator.
- `_trigger_lock` (re-entrant) is taken before `_lock` and serialises "allocate id + send
  trigger", so sources receive triggers in id order (a source that saw barrier n+1 before n
  could never finish n). `hooks.trigger` runs under it and must not block.
- On its last ack a checkpoint moves from pending to finalizing under `_lock`, so a timeout,
  decline or stop racing with `finalize` cannot abort it. A checkpoint whose `finalize` ends
  after a newer checkpoint completed is discarded as subsumed, keeping the store in id order.
  `stop` does not abort a finalizing checkpoint: its `_metadata` may already be durable.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from tidegate.checkpoint.failure_manager import CheckpointFailureManager
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.pending import AbortReason, AckOutcome, PendingCheckpoint, SubtaskId
from tidegate.checkpoint.scheduling import Cancellable, Clock, Scheduler
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore

log = logging.getLogger(__name__)

_DEFAULT_OPTIONS = CheckpointOptions()
#: aborted checkpoints remembered to recognise (and clean up after) late acks, as in Flink
_REMEMBERED_ABORTED = 16


@dataclass(frozen=True, slots=True)
class CheckpointCoordinatorConfig:
    #: None: no periodic checkpoints (manual and final checkpoints only)
    interval_ms: int | None = None
    timeout_ms: int = 600_000
    #: measured from the completion of the last completed checkpoint to the next trigger
    min_pause_ms: int = 0
    max_concurrent: int = 1
    #: consecutive failures tolerated; 0 fails the job on the first failed checkpoint
    tolerable_failures: int = 0
    #: completed checkpoints to keep (used to build the CompletedCheckpointStore)
    max_retained: int = 1
    #: options of periodic checkpoints (aligned or unaligned)
    options: CheckpointOptions = _DEFAULT_OPTIONS

    def __post_init__(self) -> None:
        lower_bounds = dict(
            timeout_ms=1, min_pause_ms=0, max_concurrent=1, tolerable_failures=0, max_retained=1
        )
        if self.interval_ms is not None:
            lower_bounds["interval_ms"] = 1
        for name, low in lower_bounds.items():
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")


class CoordinatorHooks(Protocol):
    """What the coordinator needs from the JobMaster. Called without the coordinator's lock."""

    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions) -> None:
        """Send the trigger to every source subtask. Must not block; raising aborts it."""
        ...

    def finalize(self, pending: PendingCheckpoint) -> CompletedCheckpoint:
        """Write `_metadata` for the fully acknowledged `pending`; raising aborts it."""
        ...

    def notify_complete(self, checkpoint_id: int) -> None: ...

    def notify_aborted(self, checkpoint_id: int, reason: str) -> None: ...

    def discard(self, cp: CompletedCheckpoint | PendingCheckpoint) -> None:
        """Delete the checkpoint's files. Must be idempotent: a late ack of an aborted
        checkpoint is passed again as a discarded PendingCheckpoint holding just that ack."""
        ...

    def fail_job(self, reason: str) -> None: ...


class _TriggerCheck(enum.Enum):
    OK = "ok"
    STOPPED = "stopped"
    TOO_MANY_CONCURRENT = "too many concurrent checkpoints"
    MIN_PAUSE = "minimum pause since the last completed checkpoint not over"


class CheckpointCoordinator:
    """Runs the checkpoint protocol for one job attempt's subtasks (see the module docstring)."""

    def __init__(
        self,
        config: CheckpointCoordinatorConfig,
        tasks_to_ack: frozenset[SubtaskId],
        hooks: CoordinatorHooks,
        scheduler: Scheduler,
        clock: Clock,
        wall_clock_ms: Callable[[], int],
        store: CompletedCheckpointStore,
        first_checkpoint_id: int = 1,
    ) -> None:
        if not tasks_to_ack:
            raise ValueError("a checkpoint coordinator needs at least one subtask to ack")
        self.config = config
        self.on_complete: list[Callable[[CompletedCheckpoint], None]] = []
        self.failure_manager = CheckpointFailureManager(config.tolerable_failures, self._fail_job)
        self._tasks_to_ack = tasks_to_ack
        self._hooks = hooks
        self._scheduler = scheduler
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._store = store
        self._lock = threading.Lock()
        self._trigger_lock = threading.RLock()
        self._pending: dict[int, PendingCheckpoint] = {}
        self._timeouts: dict[int, Cancellable] = {}
        self._finalizing: set[int] = set()
        self._aborted: OrderedDict[int, PendingCheckpoint] = OrderedDict()
        self._next_id = first_checkpoint_id
        self._latest_completed_id: int | None = None
        self._last_completion_s: float | None = None
        self._periodic: Cancellable | None = None
        self._periodic_suspended = False
        self._started = False
        self._stopped = False

    def start(self) -> None:
        """Arm the periodic trigger (first checkpoint one interval from now)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("a stopped checkpoint coordinator cannot be started again")
            if self._started:
                return
            self._started = True
            if self.config.interval_ms is not None:
                self._periodic = self._scheduler.schedule(
                    self.config.interval_ms / 1000, self._on_periodic_timer
                )

    def stop(self, reason: str) -> None:
        """Abort every pending checkpoint and cancel all timers; no checkpoint is triggered
        afterwards (`trigger_checkpoint` returns None). Idempotent."""
        with self._trigger_lock, self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._periodic is not None:
                self._periodic.cancel()
                self._periodic = None
            aborted = [self._claim_for_abort(cid) for cid in sorted(self._pending)]
        for pending in aborted:
            if pending is not None:
                self._finish_abort(pending, AbortReason.STOPPED, reason)

    def suspend_periodic(self) -> None:
        """Skip periodic triggers until `resume_periodic` (Flink's stopCheckpointScheduler, used
        while a stop-with-savepoint runs); manual and forced checkpoints still trigger."""
        with self._lock:
            self._periodic_suspended = True

    def resume_periodic(self) -> None:
        with self._lock:
            self._periodic_suspended = False

    def trigger_checkpoint(
        self, options: CheckpointOptions | None = None, force: bool = False
    ) -> int | None:
        """Start a checkpoint; return its id, or None when skipped (max concurrent, min pause,
        stopped). `force` bypasses max concurrent and min pause (final and manual checkpoints).
        If `hooks.trigger` raises, the checkpoint is aborted and the error re-raised.
        `options` default to the configured ones."""
        if options is None:
            options = self.config.options
        with self._trigger_lock:
            with self._lock:
                check = self._check_trigger(force)
                if check is not _TriggerCheck.OK:
                    log.debug("checkpoint trigger skipped: %s", check.value)
                    return None
                pending = self._allocate(options)
            try:
                self._hooks.trigger(pending.checkpoint_id, pending.timestamp_ms, options)
                return pending.checkpoint_id
            except Exception as exc:
                error = exc
        with self._lock:
            claimed = self._claim_for_abort(pending.checkpoint_id)
        if claimed is not None:
            self._finish_abort(
                claimed, AbortReason.TRIGGER_FAILED, f"{type(error).__name__}: {error}"
            )
        raise error

    def _check_trigger(self, force: bool) -> _TriggerCheck:
        if self._stopped:
            return _TriggerCheck.STOPPED
        if force:
            return _TriggerCheck.OK
        if len(self._pending) + len(self._finalizing) >= self.config.max_concurrent:
            return _TriggerCheck.TOO_MANY_CONCURRENT
        if self._min_pause_remaining_s() > 0:
            return _TriggerCheck.MIN_PAUSE
        return _TriggerCheck.OK

    def _allocate(self, options: CheckpointOptions) -> PendingCheckpoint:
        cid = self._next_id
        self._next_id += 1
        pending = PendingCheckpoint(cid, self._wall_clock_ms(), options, self._tasks_to_ack)
        self._pending[cid] = pending
        self._timeouts[cid] = self._scheduler.schedule(
            self.config.timeout_ms / 1000, partial(self._on_timeout, cid)
        )
        return pending

    def _min_pause_remaining_s(self) -> float:
        if self._last_completion_s is None or self.config.min_pause_ms == 0:
            return 0.0
        elapsed_s = self._clock() - self._last_completion_s
        return self.config.min_pause_ms / 1000 - elapsed_s

    def _on_periodic_timer(self) -> None:
        with self._lock:
            if self._stopped:
                return
            interval_ms, pause_s = self.config.interval_ms, self._min_pause_remaining_s()
            assert interval_ms is not None  # armed only with an interval
            # Flink reschedules instead of dropping: trigger as soon as the pause is over.
            # Otherwise the next tick is armed before triggering, so a failure cannot end it.
            delay_s = pause_s if pause_s > 0 else interval_ms / 1000
            self._periodic = self._scheduler.schedule(delay_s, self._on_periodic_timer)
            if pause_s > 0 or self._periodic_suspended:
                return
        try:
            self.trigger_checkpoint()
        except Exception:
            log.exception("periodic checkpoint trigger failed")

    def receive_ack(
        self, subtask: SubtaskId, checkpoint_id: int, state: dict[str, Any]
    ) -> AckOutcome:
        """Record a subtask's ack; the last one completes the checkpoint on this thread."""
        completing = aborted = None
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                outcome = pending.acknowledge(subtask, state)
                if outcome is AckOutcome.SUCCESS and pending.is_fully_acknowledged:
                    completing = self._claim_for_completion(checkpoint_id)
            elif (aborted := self._aborted.get(checkpoint_id)) is not None:
                outcome = AckOutcome.DISCARDED
            else:
                outcome = AckOutcome.UNKNOWN
        match outcome:
            case AckOutcome.SUCCESS:
                if completing is not None:
                    self._complete(completing)
            case AckOutcome.DISCARDED if aborted is not None:
                log.info("late ack of aborted checkpoint %d from %s", checkpoint_id, subtask)
                self._discard_late_state(aborted, subtask, state)
            case _:
                log.warning(
                    "%s ack of checkpoint %d from %s", outcome.value, checkpoint_id, subtask
                )
        return outcome

    def receive_decline(self, subtask: SubtaskId, checkpoint_id: int, reason: str) -> None:
        """A subtask could not take its snapshot: abort the checkpoint. A decline of one that
        is aborted already discards it again: the subtask may have written (part of) a file
        after the abort deleted the checkpoint's files (e.g. until its disk was full)."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is None or subtask not in pending.tasks_to_ack:
                aborted = self._aborted.get(checkpoint_id)
                log.info("ignored decline of checkpoint %d from %s", checkpoint_id, subtask)
                if aborted is not None and subtask in aborted.tasks_to_ack:
                    late = aborted
                else:
                    return
            else:
                late = None
                self._claim_for_abort(checkpoint_id)
        if late is not None:
            self._discard_late_state(late, subtask, None)
            return
        self._finish_abort(pending, AbortReason.DECLINED, f"by {subtask}: {reason}")

    def _complete(self, pending: PendingCheckpoint) -> None:
        cid = pending.checkpoint_id
        # Step 1: write _metadata (I/O, outside the lock)
        try:
            completed = self._hooks.finalize(pending)
        except Exception as exc:
            with self._lock:
                self._finalizing.discard(cid)
                self._remember_aborted(pending)
            self._finish_abort(pending, AbortReason.FINALIZE_FAILED, f"{type(exc).__name__}: {exc}")
            return
        # Step 2: record it and claim what it subsumes, atomically
        with self._lock:
            self._finalizing.discard(cid)
            newer = self._latest_completed_id
            if not pending.is_savepoint and newer is not None and cid < newer:
                self._remember_aborted(pending)
                retired, subsumed = None, []
            else:
                retired = self._store.add(completed)
                self._latest_completed_id = cid if newer is None else max(cid, newer)
                self._last_completion_s = self._clock()
                subsumed = [
                    self._claim_for_abort(i)
                    for i, p in list(self._pending.items())
                    if i < cid and not p.is_savepoint
                ]
        if retired is None:
            # a newer checkpoint completed while this one was being finalized
            self._safely("discard", self._hooks.discard, completed)
            self._finish_abort(pending, AbortReason.SUBSUMED, f"by checkpoint {newer}")
            return
        # Step 3: clean up, then tell everyone
        for old in retired:
            self._safely("discard", self._hooks.discard, old)
        for older in subsumed:
            if older is not None:
                self._finish_abort(older, AbortReason.SUBSUMED, f"by checkpoint {cid}")
        self.failure_manager.on_success(cid)
        log.info("completed %r", completed)
        self._safely("notify_complete", self._hooks.notify_complete, cid)
        for listener in list(self.on_complete):
            self._safely("on_complete listener", listener, completed)

    def _claim_for_completion(self, checkpoint_id: int) -> PendingCheckpoint:
        """Under the lock: move a fully acked checkpoint from pending to finalizing."""
        pending = self._pending.pop(checkpoint_id)
        self._timeouts.pop(checkpoint_id).cancel()
        self._finalizing.add(checkpoint_id)
        return pending

    def _on_timeout(self, checkpoint_id: int) -> None:
        with self._lock:
            pending = self._claim_for_abort(checkpoint_id)
            if pending is None:
                return
            missing = ", ".join(f"{v}[{i}]" for v, i in sorted(pending.not_yet_acknowledged))
        detail = f"not acknowledged within {self.config.timeout_ms} ms by {missing}"
        self._finish_abort(pending, AbortReason.EXPIRED, detail)

    def _claim_for_abort(self, checkpoint_id: int) -> PendingCheckpoint | None:
        """Under the lock: remove a pending checkpoint so exactly one caller aborts it."""
        pending = self._pending.pop(checkpoint_id, None)
        if pending is None:
            return None
        self._timeouts.pop(checkpoint_id).cancel()
        self._remember_aborted(pending)
        return pending

    def _remember_aborted(self, pending: PendingCheckpoint) -> None:
        pending.discard()
        self._aborted[pending.checkpoint_id] = pending
        while len(self._aborted) > _REMEMBERED_ABORTED:
            self._aborted.popitem(last=False)

    def _finish_abort(self, pending: PendingCheckpoint, reason: AbortReason, detail: str) -> None:
        """Outside the lock: clean up and notify for a checkpoint already claimed for abort."""
        message = f"{reason.value}: {detail}"
        log.info("aborted checkpoint %d: %s", pending.checkpoint_id, message)
        self._safely("discard", self._hooks.discard, pending)
        self._safely("notify_aborted", self._hooks.notify_aborted, pending.checkpoint_id, message)
        if reason.counts_as_failure and not pending.is_savepoint:
            self.failure_manager.on_failure(pending.checkpoint_id, message)

    def _discard_late_state(
        self, aborted: PendingCheckpoint, subtask: SubtaskId, state: dict[str, Any] | None
    ) -> None:
        # The subtask wrote its files (`state`; None: it declined, having written part of
        # them, perhaps) after the abort deleted the checkpoint's: delete them too.
        late = PendingCheckpoint(
            aborted.checkpoint_id, aborted.timestamp_ms, aborted.options, frozenset([subtask])
        )
        if state is not None:
            late.acknowledge(subtask, state)
        late.discard()
        self._safely("discard", self._hooks.discard, late)

    def _fail_job(self, reason: str) -> None:
        self._safely("fail_job", self._hooks.fail_job, reason)

    @staticmethod
    def _safely(what: str, fn: Callable[..., object], *args: object) -> None:
        # A failing hook or listener must not leave the coordinator half-updated.
        try:
            fn(*args)
        except Exception:
            log.exception("checkpoint coordinator: %s failed", what)

    @property
    def pending_ids(self) -> tuple[int, ...]:
        """Ids of checkpoints triggered but not yet completed or aborted, ascending."""
        with self._lock:
            return tuple(sorted([*self._pending, *self._finalizing]))

    @property
    def latest_completed(self) -> CompletedCheckpoint | None:
        """The latest retained completed checkpoint (savepoints are not retained)."""
        return self._store.latest()

    @property
    def next_checkpoint_id(self) -> int:
        with self._lock:
            return self._next_id
