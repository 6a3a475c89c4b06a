"""`tidegate chaos`'s pure parts: the fault schedule and plan (runtime/faults.py), the injector
driven by scripted sites and messages, how a run moves a job's sinks and checkpoints
(deploy/chaos.py), and the comparison of committed outputs with its summary
(cli/chaos_report.py). The harness itself runs jobs in tests/e2e/test_chaos.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.cli.chaos import _latest_completed
from tidegate.cli.chaos_report import (
    committed_records,
    compare_records,
    percentile,
    recovery_times,
    summarize,
)
from tidegate.common import Encoder
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.file_system import FileSink
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.deploy.chaos import ChaosRun, ChaosSettings, load_plan
from tidegate.runtime import faults
from tidegate.runtime.faults import (
    Fault,
    FaultInjector,
    FaultKind,
    FaultPlan,
    FaultSchedule,
    FaultyCheckpointStorage,
    FaultyOperatorFactory,
    InjectedFault,
    Site,
    due_driver_restart,
    executor_jvm,
    fail_metadata_write,
    log_fault,
    plan_faults,
    read_fault_log,
)
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import NotifyCheckpointComplete
from tidegate.runtime.network import SlotNetwork

ALL_SLOTS = dict.fromkeys(FaultKind, 2)


# the schedule and the plan ------------------------------------------------------------------
def test_schedules_parse_and_name_their_checkpoints():
    import random

    rng = random.Random(1)
    assert FaultSchedule.parse("at:7,3,3").checkpoint_ids(4, rng) == [3, 7, 3, 7]
    assert FaultSchedule.parse("every:3").checkpoint_ids(3, rng) == [3, 6, 9]
    ids = FaultSchedule.parse("random:0.5").checkpoint_ids(20, random.Random(5))
    assert len(ids) == 20 and ids == sorted(ids) and len(set(ids)) == 20
    assert ids[-1] > 20  # about every second checkpoint: not all of the first 20
    always = FaultSchedule.parse("random:1").checkpoint_ids(4, rng)
    assert always == [1, 2, 3, 4]


@pytest.mark.parametrize("text", ["at:", "at:0", "every:0", "every:x", "random:0", "random:2", "x"])
def test_a_bad_schedule_says_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"at:N\[,M\.\.\.\].*every:N.*random:RATE"):
        FaultSchedule.parse(text)


def test_the_plan_is_reproducible_and_uses_every_kind_before_any_twice():
    schedule = FaultSchedule.parse("every:2")
    kinds = tuple(FaultKind)
    n = 2 * len(kinds)
    plan = plan_faults(schedule, kinds, n, 42, ALL_SLOTS, 1.0, timeout_s=5.0)
    assert plan == plan_faults(schedule, kinds, n, 42, ALL_SLOTS, 1.0, timeout_s=5.0)
    assert plan != plan_faults(schedule, kinds, n, 43, ALL_SLOTS, 1.0, timeout_s=5.0)
    assert [f.checkpoint_id for f in plan] == list(range(2, 2 * n + 1, 2))
    assert Counter(f.kind for f in plan[: len(kinds)]) == Counter(kinds)
    for fault in plan:
        assert fault.slot in (0, 1)
        delayed = (FaultKind.EXCEPTION, FaultKind.SLOW, FaultKind.DISCONNECT)
        if fault.kind in (*delayed, FaultKind.EXECUTOR_LOSS):
            assert 0.1 <= fault.delay_s <= 0.9
        elif fault.kind is not FaultKind.KILL:
            assert fault.delay_s is None
        if fault.kind is FaultKind.SLOW:  # 3 to 6 checkpoint intervals
            assert 3.0 <= fault.duration_s <= 6.0
        elif fault.kind is FaultKind.STORAGE_HANG:  # outlasts the checkpoint timeout
            assert fault.duration_s == 10.0
        else:
            assert fault.duration_s is None


def test_a_stall_lasts_at_least_a_second_and_a_hang_twice_the_checkpoint_timeout():
    schedule = FaultSchedule.parse("every:1")
    kinds = [FaultKind.SLOW, FaultKind.STORAGE_HANG]
    plan = plan_faults(schedule, kinds, 6, 9, ALL_SLOTS, 0.1, timeout_s=3.0)
    assert {f.duration_s for f in plan if f.kind is FaultKind.SLOW} == {1.0}
    assert {f.duration_s for f in plan if f.kind is FaultKind.STORAGE_HANG} == {6.0}
    assert Fault(FaultKind.SLOW, 2, 1, 0.25, 1.5).describe() == (
        "slow in slot 1 stalled 1.50s 0.25s after checkpoint 2 completed"
    )
    assert Fault(FaultKind.STORAGE_HANG, 4, 0, None, 6.0).describe(5) == (
        "storage-hang in slot 0 writing a state file of checkpoint 5 (blocked up to 6.00s)"
    )


def test_faults_go_to_slots_that_have_their_site():
    slots = ALL_SLOTS | {FaultKind.COMMIT: 1}
    plan = plan_faults(
        FaultSchedule.parse("every:1"), [FaultKind.COMMIT], 20, 3, slots, 1.0, timeout_s=5.0
    )
    assert {f.slot for f in plan} == {0}


# the injector ---------------------------------------------------------------------------------
def injector(tmp_path, *planned: Fault, slot: int = 0) -> FaultInjector:
    return FaultInjector(FaultPlan(planned, str(tmp_path / "faults.jsonl")), slot, attempt=3)


def test_a_site_fails_once_at_its_checkpoint_and_logs_it_first(tmp_path):
    inj_plan = (
        Fault(FaultKind.SNAPSHOT_SYNC, 2, 0),
        Fault(FaultKind.COMMIT, 4, 0),
        Fault(FaultKind.SNAPSHOT_ASYNC, 2, 1),  # another slot's
        Fault(FaultKind.SNAPSHOT_ASYNC, 6, 0),
    )
    inj = injector(tmp_path, *inj_plan)
    inj.reach(Site.SYNC_SNAPSHOT, 1)
    inj.reach(Site.ASYNC_SNAPSHOT, 2)
    inj.reach(Site.COMMIT, 2)
    assert read_fault_log(inj.log_path) == []
    with pytest.raises(InjectedFault, match="snapshot-sync in slot 0 in the synchronous phase"):
        inj.reach(Site.SYNC_SNAPSHOT, 2)
    inj.reach(Site.SYNC_SNAPSHOT, 2)  # another subtask of the slot: the fault is spent
    with pytest.raises(InjectedFault, match="in the commit of checkpoint 4"):
        inj.reach(Site.COMMIT, 4)
    log = read_fault_log(inj.log_path)
    assert [(e["kind"], e["checkpoint_id"], e["slot"], e["attempt"]) for e in log] == [
        ("snapshot-sync", 2, 0, 3),
        ("commit", 4, 0, 3),
    ]
    # the slot of the next attempt: the faults already logged do not happen again
    again = FaultInjector(FaultPlan(inj_plan, inj.log_path), 0, attempt=4)
    again.reach(Site.SYNC_SNAPSHOT, 7)
    # checkpoint 6 never reached this slot's asynchronous phase: the fault happens at 8
    with pytest.raises(InjectedFault, match="asynchronous phase of checkpoint 8"):
        again.reach(Site.ASYNC_SNAPSHOT, 8)
    assert read_fault_log(inj.log_path)[-1]["at_checkpoint"] == 8


def test_a_metadata_write_fault_fails_the_drivers_write_of_its_checkpoint(tmp_path):
    plan = FaultPlan(
        (Fault(FaultKind.METADATA_WRITE, 3, 0), Fault(FaultKind.COMMIT, 4, 0)),
        str(tmp_path / "faults.jsonl"),
    )
    fail_metadata_write(None, 3, 0)
    fail_metadata_write(plan, 2, 0)
    # checkpoint 3 was never finalized (it failed before): the fault is due at the next one
    with pytest.raises(OSError, match="driver writing the _metadata of checkpoint 4"):
        fail_metadata_write(plan, 4, 1)
    fail_metadata_write(plan, 5, 2)  # logged: once
    log = read_fault_log(plan.log_path)
    assert [(e["kind"], e["checkpoint_id"], e["at_checkpoint"], e["attempt"]) for e in log] == [
        ("metadata-write", 3, 4, 1)
    ]


def test_a_restore_fault_fails_the_first_restore_from_its_checkpoint_or_later(tmp_path):
    plan = FaultPlan((Fault(FaultKind.RESTORE, 3, 0),), str(tmp_path / "faults.jsonl"))
    FaultInjector(plan, 0, attempt=1, restored_checkpoint_id=2).restoring()
    FaultInjector(plan, 0, attempt=1, restored_checkpoint_id=None).restoring()
    with pytest.raises(InjectedFault, match="restoring keyed state from checkpoint 5"):
        FaultInjector(plan, 0, attempt=2, restored_checkpoint_id=5).restoring()
    FaultInjector(plan, 0, attempt=3, restored_checkpoint_id=5).restoring()  # logged: once
    assert [e["attempt"] for e in read_fault_log(plan.log_path)] == [2]


def test_an_exception_is_armed_after_its_checkpoint_completed(tmp_path):
    inj = injector(tmp_path, Fault(FaultKind.EXCEPTION, 5, 0, delay_s=0.0))
    armed = threading.Event()
    arm = inj._arm
    inj._arm = lambda fault, at: (arm(fault, at), armed.set())
    inj.on_message(NotifyCheckpointComplete(4))
    assert inj.armed == []
    inj.on_message(NotifyCheckpointComplete(5))
    assert armed.wait(5.0), "the exception was not armed"
    with pytest.raises(InjectedFault, match=r"exception in slot 0 0\.00s after checkpoint 5"):
        inj.fire_armed()
    inj.fire_armed()  # spent
    assert len(read_fault_log(inj.log_path)) == 1


def test_a_user_functions_operator_raises_the_armed_exception_before_a_batch(tmp_path):
    class Operator:
        def __init__(self):
            self.seen = []

        def process_batch(self, records):
            self.seen.extend(records)

    plain = FaultyOperatorFactory(Operator)()  # chaos off in this process: not wrapped
    assert "process_batch" not in vars(plain)
    inj = faults.install(FaultPlan((), str(tmp_path / "faults.jsonl")), 0, 0)
    try:
        operator = FaultyOperatorFactory(Operator)()
        operator.process_batch([1, 2])
        inj.armed = [(Fault(FaultKind.EXCEPTION, 1, 0, 0.5), 1)]
        with pytest.raises(InjectedFault):
            operator.process_batch([3])
        operator.process_batch([4])
        assert operator.seen == [1, 2, 4]
    finally:
        faults.uninstall()
    assert faults._active is None


def test_a_storage_write_fault_fails_a_file_of_its_checkpoint_with_eio(tmp_path):
    plan = FaultPlan((Fault(FaultKind.STORAGE_WRITE, 2, 0),), str(tmp_path / "faults.jsonl"))
    faults.install(plan, 0, 0)
    try:
        storage = FaultyCheckpointStorage(str(tmp_path / "chk"), "job", generation=1)
        with storage.create_artifact(storage.checkpoint_dir(1), "op-0", ".state") as f:
            f.write(b"fine")
        artifact = storage.create_artifact(storage.checkpoint_dir(2), "op-0", ".state")
        with pytest.raises(OSError, match="injected a checkpoint storage write failure"):
            artifact.write(b"lost")
        with storage.create_artifact(storage.checkpoint_dir(2), "op-1", ".state") as f:
            f.write(b"spent")
    finally:
        faults.uninstall()
    assert [e["kind"] for e in read_fault_log(plan.log_path)] == ["storage-write"]


def test_a_storage_hang_blocks_the_write_until_its_slot_ends_then_fails_unwritten(tmp_path):
    plan = FaultPlan(
        (Fault(FaultKind.STORAGE_HANG, 2, 0, None, 60.0),), str(tmp_path / "faults.jsonl")
    )
    faults.install(plan, 0, 0)
    storage = FaultyCheckpointStorage(str(tmp_path / "chk"), "job", generation=1)
    artifact = storage.create_artifact(storage.checkpoint_dir(2), "op-0", ".state")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            artifact.write(b"never written")
        except OSError as e:
            errors.append(e)

    writer = threading.Thread(target=write)
    try:
        writer.start()
        writer.join(0.5)
        assert writer.is_alive(), "the write did not hang"
        # logged when the hang began (the checkpoint's timeout comes while it blocks)
        assert [e["kind"] for e in read_fault_log(plan.log_path)] == ["storage-hang"]
    finally:
        faults.uninstall()  # the slot ended: the hung write gives up at once
    writer.join(5.0)
    assert not writer.is_alive()
    assert "injected a checkpoint storage write failure: storage-hang" in str(errors[0])
    artifact.close()
    directory = storage.checkpoint_dir(2)
    assert [os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)] == [0]


def test_a_storage_hang_ends_by_itself_after_its_duration(tmp_path):
    plan = FaultPlan(
        (Fault(FaultKind.STORAGE_HANG, 1, 0, None, 0.3),), str(tmp_path / "faults.jsonl")
    )
    faults.install(plan, 0, 0)
    try:
        storage = FaultyCheckpointStorage(str(tmp_path / "chk"), "job", generation=1)
        artifact = storage.create_artifact(storage.checkpoint_dir(3), "op-0", ".state")
        started = time.monotonic()
        with pytest.raises(OSError, match=r"blocked up to 0\.30s"):
            artifact.write(b"late")
        assert 0.3 <= time.monotonic() - started < 5.0
    finally:
        faults.uninstall()


def armed_after(inj: FaultInjector, checkpoint_id: int, count: int) -> None:
    """Complete `checkpoint_id` and wait until `count` faults are armed."""
    inj.on_message(NotifyCheckpointComplete(checkpoint_id))
    deadline = time.monotonic() + 5.0
    while len(inj.armed) < count:
        assert time.monotonic() < deadline, "the faults were not armed"
        time.sleep(0.01)


def test_a_slow_fault_stalls_the_next_batch_and_fails_nothing(tmp_path):
    inj = injector(
        tmp_path,
        Fault(FaultKind.SLOW, 2, 0, delay_s=0.0, duration_s=0.4),
        Fault(FaultKind.EXCEPTION, 2, 0, delay_s=0.0),
    )
    armed_after(inj, 2, 2)
    started = time.monotonic()
    # both due before one batch: the stall first, then the exception
    with pytest.raises(InjectedFault, match="exception in slot 0"):
        inj.fire_armed()
    assert time.monotonic() - started >= 0.4
    assert [e["kind"] for e in read_fault_log(inj.log_path)] == ["slow", "exception"]
    inj.fire_armed()  # spent


def test_a_slow_fault_is_not_a_failure_to_recover_from():
    log = [
        {"event": "running", "attempt": 0, "slot": 0, "time": 1.0},
        {"event": "fault", "attempt": 0, "slot": 0, "time": 5.0, "kind": "slow"},
        {"event": "fault", "attempt": 0, "slot": 0, "time": 9.0, "kind": "disconnect"},
        {"event": "running", "attempt": 1, "slot": 0, "time": 10.0},
        {"event": "fault", "attempt": 1, "slot": 0, "time": 12.0, "kind": "slow"},
    ]
    assert recovery_times(log) == [1.0]


def test_a_disconnect_shuts_an_outgoing_data_connection_so_the_next_send_fails(tmp_path):
    gates = {7: InputGate(16)}
    receiver = SlotNetwork(1, b"secret", "127.0.0.1", gates, {}, 30.0)
    sender = SlotNetwork(0, b"secret", "127.0.0.1", {}, {}, 30.0)
    try:
        transport = sender.transport(1, 7, {1: receiver.address})
        transport.send(0, [1, 2])
        assert gates[7].get(5.0) == (False, (0, [1, 2]))
        plan = FaultPlan(
            (Fault(FaultKind.DISCONNECT, 3, 0, delay_s=0.0),), str(tmp_path / "faults.jsonl")
        )
        inj = FaultInjector(plan, 0, attempt=1, network=sender)
        assert sender.remote_peers() == [(1, 7)]
        inj.on_message(NotifyCheckpointComplete(3))
        deadline = time.monotonic() + 5.0
        while not read_fault_log(plan.log_path):
            assert time.monotonic() < deadline, "no disconnect"
            time.sleep(0.01)
        with pytest.raises(OSError):
            for _ in range(100):  # the shutdown may race the first send after it
                transport.send(0, [3])
                time.sleep(0.01)
        log = read_fault_log(plan.log_path)
        assert [(e["kind"], e["at_checkpoint"]) for e in log] == [("disconnect", 3)]
    finally:
        sender.close()
        receiver.close()


def test_a_disconnect_waits_for_a_slot_with_a_connection_to_another_slot(tmp_path):
    gates = {7: InputGate(16)}
    alone = SlotNetwork(0, b"secret", "127.0.0.1", gates, {}, 30.0)
    try:
        alone.transport(0, 7, {})  # to itself: no connection to drop
        plan = FaultPlan(
            (Fault(FaultKind.DISCONNECT, 1, 0, delay_s=0.0),), str(tmp_path / "faults.jsonl")
        )
        inj = FaultInjector(plan, 0, attempt=0, network=alone)
        inj.on_message(NotifyCheckpointComplete(1))
        for timer in inj._timers:
            timer.join(5.0)
        assert read_fault_log(plan.log_path) == []
        assert inj._pending == list(plan.faults)  # due again at the next checkpoint
    finally:
        alone.close()


# a run: sinks and checkpoints moved -----------------------------------------------------------
def chaos_job_spec(monkeypatch, run: ChaosRun, sink=None):
    monkeypatch.setattr(StreamExecutionEnvironment, "cli_overrides", {"chaos": run})
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage_dir("/somewhere/else")
    if sink is None:
        sink = FileSink.for_row_format("/the/users/output", Encoder.simple_string_encoder()).build()
    numbers = env.from_source(NumberSequenceSource(0, 9), None, "n")
    numbers.map(lambda x: x + 1).sink_to(sink)
    numbers.print()
    return env._job_spec("chaos unit")


def test_a_run_moves_sinks_and_checkpoints_and_plans_its_faults(monkeypatch, tmp_path):
    settings = ChaosSettings(str(tmp_path), ("exception", "commit"), 4, 1, "every:2")
    run = ChaosRun(settings)
    spec = chaos_job_spec(monkeypatch, run)
    assert spec.checkpoint.storage == str(tmp_path / "checkpoints")
    (sink_op,) = [
        op for v in spec.graph.vertices.values() for op in v.operators if op.connector is not None
        if isinstance(op.connector, FileSink)
    ]  # fmt: skip
    assert sink_op.connector.base_path == str(tmp_path / "sinks" / "0")
    assert run.sinks == [
        {
            "index": 0,
            "name": "Sink: FileSink",
            "uid": None,
            "path": str(tmp_path / "sinks" / "0"),
            "ordered": False,
        }
    ]
    assert spec.restart_strategy.restart_attempts == 4 + 3
    assert [f.checkpoint_id for f in spec.faults.faults] == [2, 4, 6, 8]
    assert {f.kind for f in spec.faults.faults} == {FaultKind.EXCEPTION, FaultKind.COMMIT}
    assert load_plan(str(tmp_path)) == spec.faults  # for the harness's driver restarts
    wrapped = [
        op.name for v in spec.graph.vertices.values() for op in v.operators
        if isinstance(op.factory, FaultyOperatorFactory)
    ]  # fmt: skip
    assert wrapped == ["Map"]


def test_storage_hangs_shorten_the_checkpoint_timeout_and_slow_faults_wrap_user_functions(
    monkeypatch, tmp_path
):
    settings = ChaosSettings(str(tmp_path), ("storage-hang", "slow"), 2, 1, "every:1")
    spec = chaos_job_spec(monkeypatch, ChaosRun(settings))
    # the job's 10 min: a hang would last 20; 10 intervals of 500 ms
    assert spec.checkpoint.timeout_ms == 5000
    hang = next(f for f in spec.faults.faults if f.kind is FaultKind.STORAGE_HANG)
    assert hang.duration_s == 10.0
    wrapped = [
        op.name for v in spec.graph.vertices.values() for op in v.operators
        if isinstance(op.factory, FaultyOperatorFactory)
    ]  # fmt: skip
    assert wrapped == ["Map"]
    without = ChaosSettings(str(tmp_path), ("slow",), 2, 1, "every:1")
    assert chaos_job_spec(monkeypatch, ChaosRun(without)).checkpoint.timeout_ms == 600_000


def test_executor_loss_is_refused_where_the_executors_run_in_the_drivers_jvm(monkeypatch, tmp_path):
    settings = ChaosSettings(str(tmp_path), ("executor-loss",), 1, 1, "every:1")
    with pytest.raises(ValueError, match=r"executor-loss fault needs executors apart from the"):
        chaos_job_spec(monkeypatch, ChaosRun(settings))


def test_the_executor_jvm_above_a_slot_is_found_by_its_command_line():
    # a process named like an executor JVM, whose child (as a slot is) looks it up
    child = (
        "from tidegate.runtime.faults import executor_jvm; import os; "
        "print(executor_jvm(os.getpid()))"
    )
    parent = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True); "
        "import os; print(os.getpid(), r.stdout.strip(), r.stderr[-300:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", parent, "CoarseGrainedExecutorBackend"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    parent_pid, found, *_ = done.stdout.split()
    assert found == parent_pid, done.stdout + done.stderr
    assert executor_jvm(os.getpid()) is None  # pytest runs under no executor


def test_the_reference_run_plans_no_faults(monkeypatch, tmp_path):
    spec = chaos_job_spec(monkeypatch, ChaosRun(ChaosSettings(str(tmp_path))))
    assert spec.faults is None
    assert spec.restart_strategy.restart_attempts == 3
    assert not any(
        isinstance(op.factory, FaultyOperatorFactory)
        for v in spec.graph.vertices.values()
        for op in v.operators
    )


def test_a_sink_whose_output_cannot_be_moved_is_refused(monkeypatch, tmp_path):
    class ExternalSink:
        def create_writer(self, subtask_index, parallelism, attempt): ...
        def create_committer(self): ...
        def recover(self, subtask_index, parallelism, attempt, restored): ...

    with pytest.raises(ValueError, match=r"cannot move the output of the sink.*ExternalSink"):
        chaos_job_spec(monkeypatch, ChaosRun(ChaosSettings(str(tmp_path))), ExternalSink())


def test_a_bulk_format_file_sink_is_refused(monkeypatch, tmp_path):
    from tidegate.common import Types
    from tidegate.datastream.formats.parquet import ParquetBulkWriters

    row = Types.ROW_NAMED(["n"], [Types.LONG()])
    sink = FileSink.for_bulk_format("/out", ParquetBulkWriters.for_row_type(row)).build()
    with pytest.raises(ValueError, match=r"writes a bulk format .*FileSink\.for_row_format"):
        chaos_job_spec(monkeypatch, ChaosRun(ChaosSettings(str(tmp_path))), sink)


def test_a_job_without_checkpoints_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(
        StreamExecutionEnvironment, "cli_overrides", {"chaos": ChaosRun(ChaosSettings("/x"))}
    )
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(NumberSequenceSource(0, 9), None, "n").print()
    with pytest.raises(ValueError, match="needs periodic checkpoints"):
        env._job_spec("no checkpoints")


# comparing outputs ----------------------------------------------------------------------------
def test_lost_duplicated_and_unexpected_records_are_counted_and_shown_in_order():
    diff = compare_records(
        "s", ["a", "b", "c", "d", "d"], ["d", "b", "x", "b", "b", "a"], ordered=False
    )
    assert diff.lost == Counter({"c": 1, "d": 1})
    assert diff.duplicated == Counter({"b": 2})
    assert diff.unexpected == Counter({"x": 1})
    assert diff.examples == (("lost", "c"), ("lost", "d"), ("duplicated", "b"), ("unexpected", "x"))
    assert not diff.equal
    assert compare_records("s", ["a", "b"], ["b", "a"], ordered=False).equal


def test_an_ordered_sink_reports_where_the_order_differs():
    diff = compare_records("s", ["a", "b", "c"], ["a", "c", "b"], ordered=True)
    assert diff.reordered_at == 1 and not diff.equal
    assert diff.examples == (("expected here", "b"), ("found here", "c"))
    assert compare_records("s", ["a", "b"], ["a", "b"], ordered=True).equal


def test_committed_records_skip_hidden_files_and_follow_natural_file_order(tmp_path):
    (tmp_path / "part-0-0-9").write_text("nine\n")
    (tmp_path / "part-0-0-10").write_text("ten\nten again\n")
    (tmp_path / ".part-0-1-0.inprogress").write_text("pending\n")
    (tmp_path / ".hidden-bucket").mkdir()
    (tmp_path / ".hidden-bucket" / "part-0-0-0").write_text("hidden\n")
    (tmp_path / "empty").write_text("")
    assert committed_records(str(tmp_path)) == ["nine", "ten", "ten again"]


def test_recovery_time_runs_from_the_fault_to_the_restarted_subtasks():
    def running(attempt, slot, at):
        return {"event": "running", "attempt": attempt, "slot": slot, "time": at}

    def fault(attempt, at):
        return {"event": "fault", "attempt": attempt, "slot": 0, "time": at, "kind": "kill"}

    log = [
        running(0, 0, 1.0), running(0, 1, 1.5), fault(0, 10.0),
        running(1, 1, 12.0), running(1, 0, 13.0), fault(1, 14.0), fault(1, 14.5),
        running(2, 0, 16.0),
        fault(2, 20.0),  # the last attempt never ran again: no recovery to measure
    ]  # fmt: skip
    assert recovery_times(log) == [3.0, 2.0]
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([], 50) is None


def test_the_summary_counts_faults_restarts_and_records():
    sink = {"index": 0, "name": "Sink: FileSink", "uid": "out", "path": "-", "ordered": False}
    job = {
        "restarts": 2,
        "checkpoints_completed": 7,
        "checkpoints_failed": 1,
        "planned_faults": [{}, {}, {}],
    }
    log = [
        {"event": "fault", "kind": "kill", "attempt": 0, "slot": 0, "time": 4.0},
        {"event": "running", "attempt": 1, "slot": 0, "time": 6.0},
        {"event": "fault", "kind": "commit", "attempt": 1, "slot": 0, "time": 9.0},
    ]
    summary = summarize(
        {"sinks": [sink], "jobs": []}, {"sinks": [sink], "jobs": [job]}, log, [(["a"], ["a", "a"])]
    )
    assert not summary.passed
    data = summary.to_json()
    assert data["faults_planned"] == 3
    assert data["faults_injected"] == {"kill": 1, "commit": 1}
    checkpoints = (data["checkpoints_completed"], data["checkpoints_failed"])
    assert (data["restarts"], *checkpoints) == (2, 7, 1)
    assert data["recovery_s"]["p50"] == 2.0
    assert (data["records_lost"], data["records_duplicated"]) == (0, 1)
    text = summary.format()
    assert "faults injected        2 of 3 planned" in text
    assert "sink 0 'Sink: FileSink' (uid out): DIFFERENT" in text
    assert "  duplicated: a" in text


def test_a_driver_restart_is_due_once_its_checkpoint_completed(tmp_path):
    plan = FaultPlan(
        (Fault(FaultKind.DRIVER_RESTART, 3, 0), Fault(FaultKind.KILL, 2, 0)),
        str(tmp_path / "faults.jsonl"),
    )
    assert due_driver_restart(plan, [], None) is None
    assert due_driver_restart(plan, [], 2) is None
    fault = due_driver_restart(plan, [], 4)  # 3 may have failed: the next completed one
    assert fault == plan.faults[0]
    log_fault(plan, fault, attempt=1, at=4)
    log = read_fault_log(plan.log_path)
    assert [(e["kind"], e["driver"], e["attempt"], e["at_checkpoint"]) for e in log] == [
        ("driver-restart", 0, 1, 4)
    ]
    assert due_driver_restart(plan, log, 9) is None  # once
    assert fault.describe(4) == (
        "driver-restart on the driver killed (SIGKILL) after checkpoint 4 completed, started again"
    )


def test_recovery_from_a_driver_restart_runs_to_the_new_drivers_first_attempt():
    def running(driver, attempt, at):
        return {"event": "running", "driver": driver, "attempt": attempt, "slot": 0, "time": at}

    log = [
        running(0, 0, 1.0),
        {"event": "fault", "kind": "commit", "driver": 0, "attempt": 0, "slot": 0, "time": 2.0},
        running(0, 1, 3.0),
        {"event": "fault", "kind": "driver-restart", "driver": 0, "attempt": 1, "time": 5.0,
         "slot": 0},
        running(1, 0, 9.0),
    ]  # fmt: skip
    assert recovery_times(log) == [1.0, 4.0]
    job = {"restarts": 1, "checkpoints_completed": 3, "checkpoints_failed": 0, "planned_faults": []}
    sink = {"index": 0, "name": "s", "uid": None, "path": "-", "ordered": True}
    outputs = [(["a", "b"], ["b", "a"])]
    summary = summarize({"sinks": [sink]}, {"sinks": [sink], "jobs": [job]}, log, outputs)
    # the last driver's restart, the killed driver's own, and the kill
    assert summary.restarts == 3
    # the new driver's part files do not sort after the old one's: the order is not compared
    assert summary.sinks[0].equal
    without_restart = summarize({"sinks": [sink]}, {"sinks": [sink], "jobs": [job]}, [], outputs)
    assert without_restart.sinks[0].reordered_at == 0


def test_the_harness_finds_the_latest_completed_checkpoint(tmp_path):
    assert _latest_completed(str(tmp_path)) is None
    for checkpoint, metadata in (("chk-9", True), ("chk-10", True), ("chk-11", False)):
        directory = tmp_path / "job-a" / checkpoint
        directory.mkdir(parents=True)
        if metadata:
            (directory / "_metadata").write_bytes(b"x")
    (tmp_path / "job-a" / "shared").mkdir()
    assert _latest_completed(str(tmp_path)) == (str(tmp_path / "job-a"), 10)


def test_bad_kinds_and_schedules_are_usage_errors(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('never runs')\n")
    result = CliRunner().invoke(cli, ["chaos", "--kinds", "kill,flood", str(script)])
    assert result.exit_code == 2
    assert "unknown fault kind(s) flood: choose from exception, kill" in result.output
    result = CliRunner().invoke(cli, ["chaos", "--schedule", "often", str(script)])
    assert result.exit_code == 2
    assert "bad schedule 'often'" in result.output
