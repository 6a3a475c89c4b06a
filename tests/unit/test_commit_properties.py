"""Properties of the checkpoint protocol and the two-phase commit of sinks (hypothesis stateful
tests): the real CheckpointCoordinator (manual clock) drives real SinkOperators around an
in-memory transactional sink, through random orders of writes, triggers, barriers reaching the
subtasks, declines, timeouts and failovers that restore the latest completed checkpoint at a
random new parallelism.

Checked against a model: a checkpoint completes iff every subtask acknowledged it, none declined,
it did not expire and no newer one completed first; nothing is committed that no completed
checkpoint covers; and once the job quiesces (a last checkpoint completes), what is committed
is exactly the records the completed checkpoints cover, each once. The scripted cases are in
test_coordinator.py and test_connector_hooks.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tidegate.checkpoint.assignment import assign_operator_state
from tidegate.checkpoint.coordinator import CheckpointCoordinator, CheckpointCoordinatorConfig
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.pending import AckOutcome, PendingCheckpoint
from tidegate.checkpoint.scheduling import ManualClock, ManualScheduler
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore
from tidegate.runtime.connector_operators import SinkOperator
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.restore import RestoredOperatorState

TIMEOUT_S = 10.0


@settings(max_examples=200)
@given(
    tasks=st.integers(1, 5),
    events=st.lists(st.one_of(st.integers(0, 6), st.just("discard")), max_size=20),
)
def test_a_pending_checkpoint_is_complete_iff_every_expected_subtask_acked_and_not_discarded(
    tasks: int, events: list[int | str]
) -> None:
    """Acks (of expected subtasks, again, or of unknown ones) and a discard in any order."""
    expected = frozenset(("op", i) for i in range(tasks))
    pending = PendingCheckpoint(1, 0, CheckpointOptions(), expected)
    acked: set[tuple[str, int]] = set()
    discarded = False
    for e in events:
        if e == "discard":
            pending.discard()
            discarded = True
            continue
        subtask = ("op", e)
        outcome = pending.acknowledge(subtask, {"n": e})
        if discarded:
            assert outcome is AckOutcome.DISCARDED
        elif subtask not in expected:
            assert outcome is AckOutcome.UNKNOWN
        elif subtask in acked:
            assert outcome is AckOutcome.DUPLICATE
        else:
            assert outcome is AckOutcome.SUCCESS
            acked.add(subtask)
        assert set(pending.acked_states) == acked  # a duplicate or late ack changes nothing
        assert pending.not_yet_acknowledged == expected - acked
        assert pending.is_fully_acknowledged == (acked == expected and not discarded)


@dataclass
class MemoryTransactions:
    """A transactional external system: a committable names one prepared transaction
    (writer, attempt, sequence) and its records; committing is idempotent, as a two-phase
    commit sink's commit must be (a restore commits again what may be committed already)."""

    #: transaction -> its records, once committed
    committed: dict[tuple[int, int, int], tuple[str, ...]] = field(default_factory=dict)
    #: every commit call's transactions, checked by the test when it happens
    on_commit: Callable[[tuple[int, int, int]], None] = lambda txn: None


@dataclass
class MemoryWriter:
    system: MemoryTransactions
    index: int
    attempt: int
    buffer: list[str] = field(default_factory=list)
    sequence: int = 0

    def write_batch(self, records: list[Any]) -> None:
        self.buffer += records

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if not self.buffer:
            return []
        self.sequence += 1
        txn = ((self.index, self.attempt, self.sequence), tuple(self.buffer))
        self.buffer = []
        return [txn]

    def close(self) -> None:
        self.buffer = []  # an unprepared transaction is aborted


@dataclass
class MemoryCommitter:
    system: MemoryTransactions

    def commit(self, committables: list[Any]) -> None:
        for txn, records in committables:
            self.system.on_commit(txn)
            self.system.committed[txn] = records


@dataclass
class MemorySink:
    system: MemoryTransactions

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> MemoryWriter:
        return MemoryWriter(self.system, subtask_index, attempt)

    def create_committer(self) -> MemoryCommitter:
        return MemoryCommitter(self.system)

    def recover(self, *args: Any) -> None:
        """Nothing lingers: an unprepared transaction is never visible."""


class CheckpointsAndCommits(RuleBasedStateMachine):
    @initialize(
        parallelism=st.integers(1, 3),
        max_concurrent=st.integers(1, 3),
    )
    def start(self, parallelism: int, max_concurrent: int) -> None:
        self.system = MemoryTransactions(on_commit=self.check_commit)
        self.config = CheckpointCoordinatorConfig(
            timeout_ms=int(TIMEOUT_S * 1000),
            max_concurrent=max_concurrent,
            tolerable_failures=1000,
            max_retained=2,
        )
        self.clock = ManualClock()
        self.records = 0
        self.attempt = 0
        #: checkpoint id -> per subtask the operator state it acknowledged (completed ones)
        self.snapshots: dict[int, dict[int, dict]] = {}
        #: transactions some completed checkpoint's state holds (they may be committed)
        self.covered: dict[tuple[int, int, int], tuple[str, ...]] = {}
        self.violations: list[str] = []
        self.deploy(parallelism, restored=None)

    # -- the job -----------------------------------------------------------------------------

    def deploy(self, parallelism: int, restored: list[dict] | None) -> None:
        """Start an attempt: sink subtasks (restoring `restored`) and a coordinator."""
        self.parallelism = parallelism
        self.sinks = []
        for i in range(parallelism):
            op = SinkOperator(MemorySink(self.system), uid="sink")
            runtime = OperatorRuntime(i, parallelism, 128, self.attempt, restored is not None)
            op.initialize_state(
                runtime, None if restored is None else RestoredOperatorState((), restored[i])
            )
            self.sinks.append(op)
        scheduler = ManualScheduler(self.clock)
        self.scheduler = scheduler
        self.store = CompletedCheckpointStore(self.config.max_retained)
        tasks = frozenset(("sink", i) for i in range(parallelism))
        first = max([*self.snapshots, *self.triggered_ids(), 0]) + 1
        self.coordinator = CheckpointCoordinator(
            self.config,
            tasks,
            self,
            scheduler,
            self.clock.now,
            self.clock.now_ms,
            self.store,
            first,
        )
        #: this attempt's checkpoints: id -> acks so far; declined or expired ones
        self.acks: dict[int, dict[int, dict]] = {}
        self.failed: set[int] = set()
        self.completed: list[int] = []
        self.aborted: list[int] = []
        self.last_barrier = [0] * parallelism

    def triggered_ids(self) -> list[int]:
        return list(getattr(self, "acks", {}))

    # CoordinatorHooks (the JobMaster's side)
    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: Any) -> None:
        self.acks[checkpoint_id] = {}

    def finalize(self, pending: PendingCheckpoint) -> CompletedCheckpoint:
        cid = pending.checkpoint_id
        self.snapshots[cid] = {i: state["sink"] for (_, i), state in pending.acked_states.items()}
        for state in self.snapshots[cid].values():
            for _writer, _cid, (txn, records) in state.get(SinkOperator.COMMITTABLES, ("", []))[1]:
                self.covered[txn] = records
        return CompletedCheckpoint.of(
            pending,
            completed_ms=self.clock.now_ms(),
            path=f"memory://ckpt/job/chk-{cid}",
            size_bytes=0,
            metadata=CheckpointMetadata("job", cid, pending.timestamp_ms, self.attempt),
        )

    def notify_complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)
        for op in self.sinks:
            op.notify_checkpoint_complete(checkpoint_id)

    def notify_aborted(self, checkpoint_id: int, reason: str) -> None:
        self.aborted.append(checkpoint_id)

    def discard(self, cp: Any) -> None: ...

    def fail_job(self, reason: str) -> None:
        raise AssertionError(f"the failure tolerance is not reached here: {reason}")

    # -- events ------------------------------------------------------------------------------

    @rule(subtask=st.integers(0, 2), count=st.integers(1, 3))
    def write(self, subtask: int, count: int) -> None:
        """Records reach sink subtask `subtask` (modulo the parallelism)."""
        subtask %= self.parallelism
        batch = [f"r{self.records + n}" for n in range(count)]
        self.records += count
        self.sinks[subtask].process_batch(batch)

    @rule()
    def trigger_checkpoint(self) -> None:
        self.coordinator.trigger_checkpoint()

    def waiting(self) -> list[tuple[int, int]]:
        """(subtask, checkpoint) pairs whose barrier may reach the subtask next."""
        return [
            (i, cid)
            for cid in self.coordinator.pending_ids
            for i in range(self.parallelism)
            if cid > self.last_barrier[i]
        ]

    @precondition(lambda self: self.waiting())
    @rule(data=st.data(), records_before=st.integers(0, 2), declines=st.booleans())
    def barrier_reaches_a_subtask(
        self, data: st.DataObject, records_before: int, declines: bool
    ) -> None:
        i, cid = data.draw(st.sampled_from(self.waiting()))
        self.write(i, records_before)
        self.deliver(i, cid, declines=declines and data.draw(st.integers(0, 4)) == 0)

    @precondition(lambda self: self.waiting())
    @rule(data=st.data())
    def barrier_reaches_every_subtask(self, data: st.DataObject) -> None:
        cid = min(cid for _, cid in self.waiting())
        for i in data.draw(st.permutations([i for i, c in self.waiting() if c == cid])):
            self.write(i, data.draw(st.integers(0, 2)))
            self.deliver(i, cid, declines=False)

    def deliver(self, i: int, cid: int, declines: bool) -> None:
        """Barrier `cid` reaches sink subtask `i`: it snapshots and acks, or declines."""
        self.last_barrier[i] = cid  # barriers reach a subtask in id order; skipped ids abort
        if declines:
            self.failed.add(cid)
            self.coordinator.receive_decline(("sink", i), cid, "the snapshot failed")
            return
        state = {"sink": self.sinks[i].snapshot_state(cid, self.clock.now_ms()).operator}
        newer_completed = any(c > cid for c in self.completed)
        expected_complete = (
            cid not in self.failed
            and not newer_completed
            and set(self.acks[cid]) | {i} == set(range(self.parallelism))
        )
        self.acks[cid][i] = state
        outcome = self.coordinator.receive_ack(("sink", i), cid, state)
        if expected_complete:
            assert outcome is AckOutcome.SUCCESS and self.completed[-1] == cid
            event("a checkpoint completed")
        else:
            assert cid not in self.completed

    @rule(seconds=st.sampled_from([1.0, TIMEOUT_S]))
    def time_passes(self, seconds: float) -> None:
        expiring = [cid for cid in self.coordinator.pending_ids]
        self.scheduler.advance(seconds)
        if seconds >= TIMEOUT_S:
            assert not set(expiring) & set(self.coordinator.pending_ids)
            self.failed.update(expiring)

    @rule(new_parallelism=st.integers(1, 3), dice=st.integers(0, 2))
    def failover(self, new_parallelism: int, dice: int) -> None:
        """A failure (one in three times, so that checkpoints get a chance to complete): every
        subtask is discarded; the job restores the latest completed checkpoint (of any
        attempt) at `new_parallelism`."""
        if dice:
            return
        self.coordinator.stop("failover")
        for op in self.sinks:
            op.discard()
        self.attempt += 1
        latest = max(self.snapshots, default=None)
        restored = None
        if latest is not None:
            old = self.snapshots[latest]
            states = [old.get(i) or {} for i in range(max(old) + 1)]
            restored = assign_operator_state(states, new_parallelism)
            event(f"restored {len(states)} -> {new_parallelism} subtasks")
        self.deploy(new_parallelism, restored)

    # -- checks ------------------------------------------------------------------------------

    def check_commit(self, txn: tuple[int, int, int]) -> None:
        """No transaction is committed unless a completed checkpoint's state holds it
        (recorded: the coordinator logs and swallows what its notification hook raises)."""
        if txn not in self.covered:
            self.violations.append(f"committed {txn}, which no completed checkpoint covers")

    @invariant()
    def completed_and_aborted_are_disjoint_and_once(self) -> None:
        if not hasattr(self, "coordinator"):
            return
        assert not set(self.completed) & set(self.aborted)
        assert len(self.completed) == len(set(self.completed))
        assert len(self.aborted) == len(set(self.aborted))
        assert self.completed == sorted(self.completed)
        assert self.violations == []
        assert set(self.system.committed) <= set(self.covered)

    def teardown(self) -> None:
        """Quiesce: a last checkpoint reaches every subtask; then what is committed is exactly
        what the completed checkpoints cover, each transaction's records once."""
        if not hasattr(self, "coordinator"):
            return
        cid = self.coordinator.trigger_checkpoint(force=True)
        assert cid is not None
        for i, op in enumerate(self.sinks):
            state = {"sink": op.snapshot_state(cid, self.clock.now_ms()).operator}
            self.coordinator.receive_ack(("sink", i), cid, state)
        assert self.completed[-1] == cid
        assert self.system.committed == self.covered
        committed = [r for records in self.system.committed.values() for r in records]
        assert len(committed) == len(set(committed)), "a record committed twice"


CheckpointsAndCommits.TestCase.settings = settings(max_examples=100, stateful_step_count=60)
test_checkpoints_and_commits = CheckpointsAndCommits.TestCase
