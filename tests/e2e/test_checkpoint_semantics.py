"""Checkpoint semantics under backpressure, on Spark: concurrent aligned checkpoints, expired
checkpoints that do not block the next ones, and the failure tolerance."""

from __future__ import annotations

import itertools

import pytest

from tests.e2e.jobs import count_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved
from tidegate.common import RestartStrategies
from tidegate.common.job_client import JobExecutionException
from tidegate.metrics.checkpoint_stats import CheckpointStats

N = 20_000


def overlapped(history: list[CheckpointStats]) -> bool:
    """Whether an ack of a newer checkpoint arrived before the last ack of an older one."""
    for older, newer in itertools.combinations(history, 2):  # oldest first
        first = min((a.ack_timestamp_ms for a in newer.subtasks.values()), default=None)
        last = older.latest_ack_timestamp_ms
        if first is not None and last is not None and first < last:
            return True
    return False


def test_concurrent_aligned_checkpoints_overlap_and_keep_exactly_once(spark, tmp_path):
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=N,
        rate=10_000,
        interval_ms=50,
        slow_sink_s=0.0002,
    )
    env.get_checkpoint_config().set_max_concurrent_checkpoints(3)
    client = env.execute_async("concurrent checkpoints")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert overlapped(client.jobmaster.stats.checkpoints.history()), "checkpoints never overlapped"
    assert client.jobmaster.stats.completed_checkpoints >= 3
    check_exactly_once(committed_lines(tmp_path / "out"), N, 2)


def test_expired_checkpoints_do_not_block_the_next_ones(spark, tmp_path):
    # The first records are slow: barriers wait behind them longer than the timeout. Then the
    # backlog drains and later checkpoints complete (2.5 s of fast records: enough for two
    # even when the machine is busy).
    n = 2 * N
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=10_000,
        interval_ms=100,
        slow_sink_s=0.0005,
        slow_records=3_000,
    )
    config = env.get_checkpoint_config()
    config.set_checkpoint_timeout(150)
    config.set_tolerable_checkpoint_failure_number(1_000)
    client = env.execute_async("expiring checkpoints")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    stats = client.jobmaster.stats
    assert stats.failed_checkpoints >= 1
    assert stats.completed_checkpoints >= 2
    assert stats.restarts == 0
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_more_consecutive_failures_than_tolerated_fail_the_job_over(spark, tmp_path):
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=N,
        rate=10_000,
        interval_ms=100,
        slow_sink_s=0.0005,
    )
    config = env.get_checkpoint_config()
    config.set_checkpoint_timeout(100)
    config.set_tolerable_checkpoint_failure_number(2)
    env.set_restart_strategy(RestartStrategies.no_restart())
    with pytest.raises(JobExecutionException, match="checkpoint failure tolerance"):
        env.execute("intolerable")
