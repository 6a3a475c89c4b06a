"""Scripted tests of the CheckpointCoordinator with a manual clock and scheduler.

The hooks are the JobMaster's side of the seam, kept in memory: they record every call in order,
and the invariants of the protocol are checked when each test ends.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidegate.checkpoint.coordinator import CheckpointCoordinator, CheckpointCoordinatorConfig
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.checkpoint.pending import AckOutcome, PendingCheckpoint, SubtaskId
from tidegate.checkpoint.scheduling import ManualClock, ManualScheduler
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore

SOURCE_0: SubtaskId = ("source", 0)
SOURCE_1: SubtaskId = ("source", 1)
SINK_0: SubtaskId = ("sink", 0)
TASKS = frozenset({SOURCE_0, SOURCE_1, SINK_0})
SAVEPOINT = CheckpointOptions(CheckpointType.SAVEPOINT)


@dataclass
class RecordingHooks:
    """CoordinatorHooks that record each call as (hook, checkpoint id) in call order."""

    clock: ManualClock
    calls: list[tuple[str, int]] = field(default_factory=list)
    trigger_times_ms: dict[int, int] = field(default_factory=dict)
    abort_reasons: dict[int, str] = field(default_factory=dict)
    discarded: list[CompletedCheckpoint | PendingCheckpoint] = field(default_factory=list)
    job_failures: list[str] = field(default_factory=list)
    failing: dict[str, Exception] = field(default_factory=dict)
    #: called inside finalize, to script what happens while a checkpoint is being finalized
    during_finalize: Callable[[PendingCheckpoint], None] | None = None

    def _record(self, hook: str, checkpoint_id: int) -> None:
        self.calls.append((hook, checkpoint_id))
        if hook in self.failing:
            raise self.failing[hook]

    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions) -> None:
        self.trigger_times_ms[checkpoint_id] = timestamp_ms
        self._record("trigger", checkpoint_id)

    def finalize(self, pending: PendingCheckpoint) -> CompletedCheckpoint:
        self._record("finalize", pending.checkpoint_id)
        if self.during_finalize is not None:
            self.during_finalize(pending)
        return CompletedCheckpoint.of(
            pending,
            completed_ms=self.clock.now_ms(),
            path=f"memory://ckpt/job/chk-{pending.checkpoint_id}",
            size_bytes=sum(s["bytes"] for s in pending.acked_states.values()),
            metadata=CheckpointMetadata("job", pending.checkpoint_id, pending.timestamp_ms, 1),
        )

    def notify_complete(self, checkpoint_id: int) -> None:
        self._record("notify_complete", checkpoint_id)

    def notify_aborted(self, checkpoint_id: int, reason: str) -> None:
        self.abort_reasons[checkpoint_id] = reason
        self._record("notify_aborted", checkpoint_id)

    def discard(self, cp: CompletedCheckpoint | PendingCheckpoint) -> None:
        self.discarded.append(cp)
        self._record("discard", cp.checkpoint_id)

    def fail_job(self, reason: str) -> None:
        self.job_failures.append(reason)
        self.calls.append(("fail_job", -1))

    def ids(self, hook: str) -> list[int]:
        return [cid for name, cid in self.calls if name == hook]


@dataclass
class Harness:
    coordinator: CheckpointCoordinator
    hooks: RecordingHooks
    scheduler: ManualScheduler
    store: CompletedCheckpointStore
    completed: list[CompletedCheckpoint]

    def ack(self, subtask: SubtaskId, checkpoint_id: int, size: int = 10) -> AckOutcome:
        return self.coordinator.receive_ack(subtask, checkpoint_id, {"bytes": size})

    def ack_all(self, checkpoint_id: int, tasks: frozenset[SubtaskId] = TASKS) -> None:
        for subtask in sorted(tasks):
            assert self.ack(subtask, checkpoint_id) is AckOutcome.SUCCESS

    def advance(self, seconds: float) -> None:
        self.scheduler.advance(seconds)

    def check_invariants(self) -> None:
        hooks = self.hooks
        completed, aborted = hooks.ids("notify_complete"), hooks.ids("notify_aborted")
        assert not set(completed) & set(aborted), "a checkpoint both completed and aborted"
        assert all(n == 1 for n in Counter(completed + aborted).values()), "notified twice"
        triggered = set(hooks.ids("trigger"))
        pending = set(self.coordinator.pending_ids)
        assert triggered == set(completed) | set(aborted) | pending, "a checkpoint got lost"
        discarded_pending = {
            d.checkpoint_id for d in hooks.discarded if isinstance(d, PendingCheckpoint)
        }
        assert set(aborted) <= discarded_pending, "an aborted checkpoint's files were kept"
        assert all(d.is_discarded for d in hooks.discarded if isinstance(d, PendingCheckpoint))
        stored = [cp.checkpoint_id for cp in self.store.all()]
        assert stored == sorted(stored) and len(stored) <= self.store.max_retained


@pytest.fixture
def make_harness() -> Iterator[Callable[..., Harness]]:
    harnesses: list[Harness] = []

    def make(tasks: frozenset[SubtaskId] = TASKS, first_checkpoint_id: int = 1, **config: Any):
        clock = ManualClock()
        scheduler = ManualScheduler(clock)
        hooks = RecordingHooks(clock)
        cfg = CheckpointCoordinatorConfig(**config)
        store = CompletedCheckpointStore(cfg.max_retained)
        coordinator = CheckpointCoordinator(
            cfg, tasks, hooks, scheduler, clock.now, clock.now_ms, store, first_checkpoint_id
        )
        completed: list[CompletedCheckpoint] = []
        coordinator.on_complete.append(completed.append)
        harnesses.append(Harness(coordinator, hooks, scheduler, store, completed))
        return harnesses[-1]

    yield make
    for harness in harnesses:
        harness.check_invariants()


# ------------------------------------------------------------------ acknowledgements


def test_a_checkpoint_completes_when_the_last_subtask_acknowledges(make_harness):
    h = make_harness()
    cid = h.coordinator.trigger_checkpoint()
    assert cid == 1
    assert h.ack(SOURCE_0, cid) is AckOutcome.SUCCESS
    assert h.ack(SOURCE_1, cid) is AckOutcome.SUCCESS
    assert h.hooks.ids("finalize") == []
    h.advance(0.25)
    assert h.ack(SINK_0, cid, size=5) is AckOutcome.SUCCESS
    assert h.hooks.ids("notify_complete") == [1]
    assert h.coordinator.pending_ids == ()
    latest = h.coordinator.latest_completed
    assert latest is not None and latest.checkpoint_id == 1
    assert (latest.timestamp_ms, latest.completed_ms, latest.duration_ms) == (0, 250, 250)
    assert latest.size_bytes == 25 and not latest.is_savepoint
    assert h.completed == [latest]


def test_a_duplicate_ack_is_reported_and_changes_nothing(make_harness):
    h = make_harness()
    cid = h.coordinator.trigger_checkpoint()
    h.ack(SOURCE_0, cid, size=1)
    assert h.ack(SOURCE_0, cid, size=999) is AckOutcome.DUPLICATE
    h.ack(SOURCE_1, cid)
    h.ack(SINK_0, cid)
    assert h.completed[0].size_bytes == 21


def test_an_ack_from_a_subtask_that_is_not_expected_is_unknown(make_harness):
    h = make_harness()
    cid = h.coordinator.trigger_checkpoint()
    assert h.ack(("map", 7), cid) is AckOutcome.UNKNOWN
    assert h.coordinator.pending_ids == (cid,)


def test_an_ack_for_a_checkpoint_id_never_triggered_is_unknown(make_harness):
    h = make_harness()
    h.coordinator.trigger_checkpoint()
    assert h.ack(SOURCE_0, 42) is AckOutcome.UNKNOWN
    assert h.hooks.discarded == []


def test_a_late_ack_after_an_abort_is_discarded_and_its_files_are_deleted(make_harness):
    h = make_harness(tolerable_failures=5)
    cid = h.coordinator.trigger_checkpoint()
    h.ack(SOURCE_0, cid)
    h.coordinator.receive_decline(SINK_0, cid, "disk full")
    calls_before = list(h.hooks.calls)

    assert h.ack(SOURCE_1, cid) is AckOutcome.DISCARDED

    # the only effect is deleting what the late subtask wrote
    assert h.hooks.calls == [*calls_before, ("discard", cid)]
    late = h.hooks.discarded[-1]
    assert isinstance(late, PendingCheckpoint) and late.is_discarded
    assert set(late.acked_states) == {SOURCE_1}
    assert h.coordinator.latest_completed is None


def test_a_late_decline_after_an_abort_deletes_the_checkpoints_files_again(make_harness):
    """The subtask may have written part of a file (until its disk was full) after the first
    decline's abort deleted the checkpoint's directory."""
    h = make_harness(tolerable_failures=5)
    cid = h.coordinator.trigger_checkpoint()
    h.coordinator.receive_decline(SINK_0, cid, "No space left on device")
    calls_before = list(h.hooks.calls)

    h.coordinator.receive_decline(SOURCE_1, cid, "No space left on device")

    assert h.hooks.calls == [*calls_before, ("discard", cid)]  # not aborted or counted again
    late = h.hooks.discarded[-1]
    assert isinstance(late, PendingCheckpoint) and late.is_discarded and not late.acked_states
    assert h.coordinator.failure_manager.consecutive_failures == 1


def test_a_late_ack_after_completion_changes_nothing(make_harness):
    h = make_harness()
    cid = h.coordinator.trigger_checkpoint()
    h.ack_all(cid)
    calls_before = list(h.hooks.calls)
    assert h.ack(SOURCE_0, cid) is AckOutcome.UNKNOWN
    assert h.hooks.calls == calls_before


# ------------------------------------------------------------------ declines and timeouts


def test_a_decline_aborts_the_checkpoint_and_notifies_the_subtasks(make_harness):
    h = make_harness(tolerable_failures=5)
    cid = h.coordinator.trigger_checkpoint()
    h.ack(SOURCE_0, cid)
    h.coordinator.receive_decline(SINK_0, cid, "state too large")
    assert h.coordinator.pending_ids == ()
    assert h.hooks.calls[-2:] == [("discard", cid), ("notify_aborted", cid)]
    reason = h.hooks.abort_reasons[cid]
    assert reason.startswith("declined") and "sink" in reason and "state too large" in reason
    assert h.coordinator.failure_manager.consecutive_failures == 1
    assert h.scheduler.scheduled_delays == []  # its timeout was cancelled


def test_a_decline_of_an_unknown_checkpoint_is_ignored(make_harness):
    h = make_harness()
    cid = h.coordinator.trigger_checkpoint()
    h.coordinator.receive_decline(SINK_0, cid + 1, "whatever")
    h.coordinator.receive_decline(("map", 3), cid, "not one of ours")
    assert h.coordinator.pending_ids == (cid,)
    assert h.hooks.job_failures == []


def test_a_checkpoint_not_acknowledged_within_the_timeout_expires(make_harness):
    h = make_harness(timeout_ms=5_000, tolerable_failures=1)
    cid = h.coordinator.trigger_checkpoint()
    h.ack(SOURCE_0, cid)
    h.advance(4.999)
    assert h.coordinator.pending_ids == (cid,)
    h.advance(0.001)
    assert h.coordinator.pending_ids == ()
    reason = h.hooks.abort_reasons[cid]
    assert reason.startswith("expired") and "source[1]" in reason and "source[0]" not in reason
    assert h.coordinator.failure_manager.consecutive_failures == 1
    assert h.ack(SOURCE_1, cid) is AckOutcome.DISCARDED


def test_the_timeout_of_a_completed_checkpoint_never_fires(make_harness):
    h = make_harness(timeout_ms=5_000)
    cid = h.coordinator.trigger_checkpoint()
    h.ack_all(cid)
    h.advance(60)
    assert h.hooks.ids("notify_aborted") == []
    assert h.hooks.job_failures == []


# ------------------------------------------------------------------ triggering


def test_checkpoint_ids_strictly_increase_from_the_first_id(make_harness):
    h = make_harness(first_checkpoint_id=17, max_concurrent=10, tolerable_failures=10)
    first = h.coordinator.trigger_checkpoint()
    second = h.coordinator.trigger_checkpoint()
    h.coordinator.receive_decline(SINK_0, second, "no")
    third = h.coordinator.trigger_checkpoint()
    assert (first, second, third) == (17, 18, 19)
    assert h.coordinator.next_checkpoint_id == 20


def test_periodic_checkpoints_start_one_interval_after_start(make_harness):
    h = make_harness(interval_ms=1_000)
    h.coordinator.start()
    h.advance(0.999)
    assert h.hooks.ids("trigger") == []
    h.advance(0.001)
    assert h.hooks.trigger_times_ms == {1: 1_000}
    h.ack_all(1)
    h.advance(1.0)
    assert h.hooks.trigger_times_ms == {1: 1_000, 2: 2_000}


def test_suspended_periodic_checkpoints_skip_their_ticks_until_resumed(make_harness):
    h = make_harness(interval_ms=1_000)
    h.coordinator.start()
    h.coordinator.suspend_periodic()  # a stop-with-savepoint is running
    h.advance(3.0)
    assert h.hooks.ids("trigger") == []
    assert h.coordinator.trigger_checkpoint(SAVEPOINT, force=True) == 1  # forced ones still go
    h.ack_all(1)
    h.coordinator.resume_periodic()  # it failed: back to the interval
    h.advance(1.0)
    assert h.hooks.ids("trigger") == [1, 2]


def test_no_periodic_checkpoints_without_an_interval(make_harness):
    h = make_harness(interval_ms=None)
    h.coordinator.start()
    h.advance(3600)
    assert h.hooks.ids("trigger") == []
    assert h.coordinator.trigger_checkpoint() == 1


def test_a_periodic_trigger_is_skipped_at_max_concurrent_and_retried_next_interval(make_harness):
    h = make_harness(interval_ms=1_000, max_concurrent=1)
    h.coordinator.start()
    h.advance(1.0)  # triggers 1
    h.advance(1.0)  # 1 still pending: skipped
    assert h.hooks.ids("trigger") == [1]
    h.advance(0.5)
    h.ack_all(1)
    h.advance(0.5)  # next interval: triggers 2
    assert h.hooks.trigger_times_ms == {1: 1_000, 2: 3_000}


def test_max_concurrent_allows_overlapping_checkpoints(make_harness):
    h = make_harness(interval_ms=1_000, max_concurrent=2)
    h.coordinator.start()
    h.advance(3.0)
    assert h.hooks.ids("trigger") == [1, 2]
    assert h.coordinator.trigger_checkpoint() is None


def test_force_bypasses_max_concurrent_and_min_pause(make_harness):
    h = make_harness(max_concurrent=1, min_pause_ms=10_000)
    h.ack_all(h.coordinator.trigger_checkpoint())
    assert h.coordinator.trigger_checkpoint() is None  # within the pause
    second = h.coordinator.trigger_checkpoint(force=True)
    assert h.coordinator.trigger_checkpoint() is None  # max concurrent
    third = h.coordinator.trigger_checkpoint(CheckpointOptions(is_final=True), force=True)
    assert (second, third) == (2, 3)
    assert h.coordinator.pending_ids == (2, 3)


def test_min_pause_delays_the_next_trigger_until_the_pause_after_completion_ends(make_harness):
    h = make_harness(interval_ms=1_000, min_pause_ms=3_000)
    h.coordinator.start()
    h.advance(1.0)  # triggers 1 at 1.0
    h.advance(0.5)
    h.ack_all(1)  # completes at 1.5: no trigger before 4.5
    h.advance(0.5)  # periodic tick at 2.0 reschedules itself for when the pause ends
    assert h.scheduler.scheduled_delays == [2.5]
    h.advance(2.499)
    assert h.hooks.ids("trigger") == [1]
    h.advance(0.001)
    assert h.hooks.trigger_times_ms == {1: 1_000, 2: 4_500}
    h.ack_all(2)  # completes at 4.5: the next pause ends at 7.5
    h.advance(1.0)  # tick at 5.5 reschedules to 7.5
    h.advance(2.0)
    assert h.hooks.trigger_times_ms[3] == 7_500


def test_a_manual_trigger_within_the_min_pause_is_skipped(make_harness):
    h = make_harness(min_pause_ms=2_000)
    h.ack_all(h.coordinator.trigger_checkpoint())
    h.advance(1.999)
    assert h.coordinator.trigger_checkpoint() is None
    h.advance(0.001)
    assert h.coordinator.trigger_checkpoint() == 2


def test_a_trigger_hook_that_raises_aborts_the_checkpoint_and_reraises(make_harness):
    h = make_harness(tolerable_failures=3)
    h.hooks.failing["trigger"] = ConnectionError("source unreachable")
    with pytest.raises(ConnectionError):
        h.coordinator.trigger_checkpoint()
    assert h.coordinator.pending_ids == ()
    assert h.hooks.abort_reasons[1].startswith("trigger failed: ConnectionError")
    assert h.coordinator.failure_manager.consecutive_failures == 1


def test_a_periodic_trigger_failure_does_not_stop_periodic_triggering(make_harness):
    h = make_harness(interval_ms=1_000, tolerable_failures=10)
    h.coordinator.start()
    h.hooks.failing["trigger"] = ConnectionError("source unreachable")
    h.advance(1.0)
    del h.hooks.failing["trigger"]
    h.advance(1.0)
    assert h.hooks.ids("trigger") == [1, 2]
    assert h.coordinator.pending_ids == (2,)


# ------------------------------------------------------------------ completion


def test_completion_runs_its_steps_in_order(make_harness):
    h = make_harness(max_concurrent=2, max_retained=1)
    h.ack_all(h.coordinator.trigger_checkpoint())
    older = h.coordinator.trigger_checkpoint(force=True)
    newer = h.coordinator.trigger_checkpoint(force=True)
    start = len(h.hooks.calls)
    h.coordinator.on_complete.append(
        lambda cp: h.hooks.calls.append(("listener", cp.checkpoint_id))
    )
    h.ack_all(newer)
    assert h.hooks.calls[start:] == [
        ("finalize", newer),
        ("discard", 1),  # no longer retained by the store
        ("discard", older),  # subsumed pending checkpoint
        ("notify_aborted", older),
        ("notify_complete", newer),
        ("listener", newer),
    ]


def test_completing_a_checkpoint_subsumes_older_pending_ones_without_failing(make_harness):
    h = make_harness(max_concurrent=3, tolerable_failures=0)
    first, second, third = (h.coordinator.trigger_checkpoint() for _ in range(3))
    h.ack_all(second)
    assert h.coordinator.pending_ids == (third,)
    assert h.hooks.abort_reasons[first] == "subsumed: by checkpoint 2"
    assert h.hooks.job_failures == []
    assert h.ack(SOURCE_0, first) is AckOutcome.DISCARDED


def test_a_completing_checkpoint_does_not_subsume_a_pending_savepoint(make_harness):
    h = make_harness(max_concurrent=3)
    savepoint = h.coordinator.trigger_checkpoint(SAVEPOINT, force=True)
    checkpoint = h.coordinator.trigger_checkpoint()
    h.ack_all(checkpoint)
    assert h.coordinator.pending_ids == (savepoint,)
    h.ack_all(savepoint)
    assert [cp.is_savepoint for cp in h.completed] == [False, True]
    latest = h.coordinator.latest_completed
    assert latest is not None and latest.checkpoint_id == checkpoint  # savepoints not retained


def test_the_store_keeps_the_newest_checkpoints_and_the_rest_are_discarded(make_harness):
    h = make_harness(max_retained=2)
    for _ in range(4):
        h.ack_all(h.coordinator.trigger_checkpoint())
    assert [cp.checkpoint_id for cp in h.store.all()] == [3, 4]
    discarded = [d.checkpoint_id for d in h.hooks.discarded if isinstance(d, CompletedCheckpoint)]
    assert discarded == [1, 2]


def test_a_finalize_that_raises_aborts_the_checkpoint_and_counts_as_a_failure(make_harness):
    h = make_harness(tolerable_failures=0)
    h.hooks.failing["finalize"] = OSError("No space left on device")
    cid = h.coordinator.trigger_checkpoint()
    h.ack_all(cid)
    assert h.coordinator.latest_completed is None
    assert h.hooks.abort_reasons[cid] == "finalize failed: OSError: No space left on device"
    assert h.hooks.ids("notify_complete") == []
    assert len(h.hooks.job_failures) == 1 and "No space left" in h.hooks.job_failures[0]


def test_a_checkpoint_finalized_after_a_newer_one_completed_is_discarded(make_harness):
    h = make_harness(max_concurrent=2)
    older = h.coordinator.trigger_checkpoint()
    newer = h.coordinator.trigger_checkpoint()

    def complete_newer_meanwhile(pending: PendingCheckpoint) -> None:
        if pending.checkpoint_id == older:
            h.ack_all(newer)

    h.hooks.during_finalize = complete_newer_meanwhile
    h.ack_all(older)
    assert [cp.checkpoint_id for cp in h.store.all()] == [newer]
    assert h.hooks.abort_reasons[older] == "subsumed: by checkpoint 2"
    assert older in [
        d.checkpoint_id for d in h.hooks.discarded if isinstance(d, CompletedCheckpoint)
    ]
    assert h.hooks.job_failures == []


def test_a_hook_that_raises_after_completion_does_not_undo_it(make_harness):
    h = make_harness(interval_ms=1_000)
    h.hooks.failing["notify_complete"] = ConnectionError("task gone")
    h.coordinator.on_complete.append(lambda cp: 1 / 0)
    h.coordinator.start()
    h.advance(1.0)
    h.ack_all(1)
    assert len(h.completed) == 1  # the listener registered first still ran
    assert h.coordinator.latest_completed is not None
    h.advance(1.0)
    assert h.hooks.ids("trigger") == [1, 2]


# ------------------------------------------------------------------ failures and stop


def test_with_zero_tolerable_failures_the_first_failure_fails_the_job(make_harness):
    h = make_harness(tolerable_failures=0, timeout_ms=1_000)
    h.coordinator.trigger_checkpoint()
    h.advance(1.0)
    assert len(h.hooks.job_failures) == 1
    assert "expired" in h.hooks.job_failures[0]


def test_failures_are_tolerated_until_the_count_is_exceeded_and_success_resets_it(make_harness):
    h = make_harness(tolerable_failures=2, max_concurrent=5)
    for _ in range(2):
        h.coordinator.receive_decline(SINK_0, h.coordinator.trigger_checkpoint(), "no")
    h.ack_all(h.coordinator.trigger_checkpoint())
    for _ in range(2):
        h.coordinator.receive_decline(SINK_0, h.coordinator.trigger_checkpoint(), "no")
    assert h.hooks.job_failures == []
    h.coordinator.receive_decline(SINK_0, h.coordinator.trigger_checkpoint(), "no")
    assert len(h.hooks.job_failures) == 1


def test_a_failed_savepoint_does_not_count_towards_the_failure_tolerance(make_harness):
    h = make_harness(tolerable_failures=0)
    cid = h.coordinator.trigger_checkpoint(SAVEPOINT, force=True)
    h.coordinator.receive_decline(SINK_0, cid, "no")
    assert h.hooks.abort_reasons[cid].startswith("declined")
    assert h.hooks.job_failures == []


def test_stop_aborts_pending_checkpoints_and_stops_triggering(make_harness):
    h = make_harness(interval_ms=1_000, max_concurrent=2, tolerable_failures=0)
    h.coordinator.start()
    h.advance(2.0)
    assert h.coordinator.pending_ids == (1, 2)
    h.coordinator.stop("job cancelled")
    assert h.coordinator.pending_ids == ()
    assert h.hooks.abort_reasons == {
        1: "coordinator stopped: job cancelled",
        2: "coordinator stopped: job cancelled",
    }
    assert h.scheduler.scheduled_delays == []  # periodic trigger and timeouts cancelled
    h.advance(3600)
    assert h.hooks.ids("trigger") == [1, 2]
    assert h.coordinator.trigger_checkpoint(force=True) is None
    assert h.ack(SOURCE_0, 1) is AckOutcome.DISCARDED
    assert h.hooks.job_failures == []
    h.coordinator.stop("again")  # idempotent
    with pytest.raises(RuntimeError):
        h.coordinator.start()


# ------------------------------------------------------------------ threads


def test_acks_from_many_threads_complete_every_checkpoint_exactly_once(make_harness):
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        run_acks_from_many_threads(make_harness)
    finally:
        sys.setswitchinterval(switch_interval)


def run_acks_from_many_threads(make_harness: Callable[..., Harness]) -> None:
    tasks = frozenset(("map", i) for i in range(16))
    h = make_harness(tasks=tasks, max_concurrent=1000, max_retained=3)
    ids = [h.coordinator.trigger_checkpoint() for _ in range(50)]
    outcomes: list[AckOutcome] = []
    start = threading.Barrier(len(tasks))

    def subtask(task: SubtaskId) -> None:
        start.wait()
        for cid in reversed(ids):  # newest first: completions subsume older pending ones
            outcomes.append(h.coordinator.receive_ack(task, cid, {"bytes": 1}))

    threads = [threading.Thread(target=subtask, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.coordinator.pending_ids == ()
    assert h.store.latest() is not None and h.store.latest().checkpoint_id == 50
    assert outcomes.count(AckOutcome.SUCCESS) >= len(tasks)
    assert set(outcomes) <= {AckOutcome.SUCCESS, AckOutcome.DISCARDED, AckOutcome.UNKNOWN}
