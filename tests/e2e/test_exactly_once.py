"""Exactly-once end to end: failures are injected (exceptions inside an operator, SIGKILL of a
slot's worker process) and the committed output must equal the reference, record for record."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import check_restarts, count_job, kill_slots
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved, wait_until
from tidegate.common.configuration import Configuration


def test_a_job_without_failures_commits_exactly_the_reference_output(runner, tmp_path):
    env = count_job(tmp_path / "out", tmp_path / "chk", runner=runner, n=20_000)
    client = env.execute_async("no failures")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    check_exactly_once(committed_lines(tmp_path / "out"), 20_000, 2)
    # every ack reports its phases; the keyed subtasks (2 input channels) report alignment
    history = client.jobmaster.stats.checkpoints.history()
    acks = [ack for checkpoint in history for ack in checkpoint.subtasks.values()]
    assert acks
    assert all(a.alignment_duration_ms >= 0 and a.start_delay_ms >= 0 for a in acks)
    assert all(a.sync_duration_ms > 0 and a.async_duration_ms > 0 for a in acks)


@pytest.mark.parametrize("parallelism", [2, 3])
def test_exceptions_in_an_operator_at_several_records_lose_and_duplicate_nothing(
    runner, tmp_path, parallelism
):
    n = 30_000
    # increasing values of the first source split ([0, n/p)), so each attempt reaches its own
    fail_at = {0: 2_000, 1: 5_000, 2: 8_000}
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner=runner,
        n=n,
        parallelism=parallelism,
        rate=15_000,
        fail_at=fail_at,
    )
    client = env.execute_async("exceptions")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.restarts == len(fail_at)
    check_exactly_once(committed_lines(tmp_path / "out"), n, parallelism)


@pytest.mark.parametrize("parallelism", [2, 4])
def test_kill_9_of_slot_processes_loses_and_duplicates_nothing(runner, tmp_path, parallelism):
    n = 40_000
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner=runner,
        n=n,
        parallelism=parallelism,
        rate=8_000,
        interval_ms=300,
    )
    client = env.execute_async("kill -9")
    killer = kill_slots(client, kills=2)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 2, "both kills must have fired"
    check_restarts(client, kills=2)
    check_exactly_once(committed_lines(tmp_path / "out"), n, parallelism)
    check_startup_timeline(client.jobmaster, runner, parallelism)


def check_startup_timeline(jm, runner: str, parallelism: int) -> None:
    """Every attempt's start-up steps were recorded in order, a restart's from its failure;
    on Spark the slots ran in workers forked by tidegate's daemon (deploy/worker_daemon.py)."""
    attempts = jm.stats.startup.attempts()
    assert [a.attempt for a in attempts] == list(range(jm.attempt + 1))
    for a in attempts:
        assert (a.failed is None) == (a.attempt == 0)
        assert (a.session_ready is None) == (runner == "local")
        assert sorted(a.slots) == list(range(parallelism))
        phases = a.phases()
        steps = ["stage_submitted", "task_started", "running"]
        if runner == "spark":
            steps.append("session_ready")
        assert all(phases[k] is not None and phases[k] >= 0 for k in steps), a
        assert all(s.task_started <= s.job_loaded for s in a.slots.values()), a
        if a.failed is not None:
            assert phases["restart"] >= 0
    last = attempts[-1].phases()  # its slots' final metrics name when their tasks began
    assert last["tasks_created"] is not None and last["tasks_created"] >= 0
    if runner == "spark":
        for pid in jm.slot_pids.values():  # reused workers: alive after the job
            with open(f"/proc/{pid}/stat") as f:
                parent = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                assert b"tidegate.deploy.worker_daemon" in f.read()


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_typed_records_survive_kill_9_exactly_once(spark, tmp_path, unaligned):
    """Records of declared types cross slots in typed frames (and, unaligned, sit in channel
    state); the count reads `row.key` from Rows that were positional before the hop."""
    n = 30_000
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=8_000,
        interval_ms=300,
        typed_records=True,
    )
    env.get_checkpoint_config().enable_unaligned_checkpoints(unaligned)
    client = env.execute_async("typed kill -9")
    killer = kill_slots(client, kills=2)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 2, "both kills must have fired"
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_at_least_once_mode_loses_nothing_under_failures(runner, tmp_path):
    from tidegate.datastream import CheckpointingMode

    n = 20_000
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner=runner,
        n=n,
        rate=15_000,
        fail_at={0: 7_000},
        mode=CheckpointingMode.AT_LEAST_ONCE,
    )
    env.execute("at least once")
    values = {int(line.split(",")[1]) for line in committed_lines(tmp_path / "out")}
    assert values == set(range(n))


def test_a_hung_slot_is_detected_by_missing_heartbeats_and_the_job_recovers(runner, tmp_path):
    import os
    import signal

    n = 30_000
    env = count_job(tmp_path / "out", tmp_path / "chk", runner=runner, n=n, rate=8_000)
    env.configure(Configuration().set_integer("heartbeat.timeout", 3_000))
    client = env.execute_async("hung slot")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.completed_checkpoints >= 1, "a checkpoint completed", job=client)
    os.kill(jm.slot_pids[1], signal.SIGSTOP)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    check_restarts(client, kills=1)  # the stopped slot, once
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
