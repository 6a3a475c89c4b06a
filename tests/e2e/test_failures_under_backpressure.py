"""Failures under backpressure, on Spark: a deliberately slow operator before the sink keeps
the channels full while five scheduled failures fire one after another (in map, in snapshot,
in restore, a kill -9, in close). Aligned, unaligned and timeout-switching checkpoints must
lose, duplicate and reorder nothing; at-least-once must lose nothing."""

from __future__ import annotations

import collections
import os

import pytest

from tests.e2e.jobs import FAILURE_SCHEDULE, count_job, kill_when_scheduled
from tests.support.output import committed_lines
from tests.support.references import NUM_KEYS, check_exactly_once
from tests.support.waiting import resolved, wait_until
from tidegate.checkpoint.storage import read_checkpoint_metadata
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import CheckpointingMode, ExternalizedCheckpointRetention

N = 24_000
PARALLELISM = 2


def run_with_scheduled_failures(tmp_path, mode: str):
    markers = tmp_path / "markers"
    markers.mkdir()
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=N,
        parallelism=PARALLELISM,
        rate=12_000,
        interval_ms=200,
        slow_sink_s=0.0002,  # about 5,000 records/s per subtask: the sources outpace it
        failure_markers=str(markers),
        mode=CheckpointingMode.AT_LEAST_ONCE
        if mode == "at-least-once"
        else CheckpointingMode.EXACTLY_ONCE,
    )
    config = env.get_checkpoint_config()
    if mode in ("unaligned", "timeout"):
        config.enable_unaligned_checkpoints()
    if mode == "timeout":
        config.set_aligned_checkpoint_timeout(30)
    client = env.execute_async(f"five failures, {mode}")
    killer = kill_when_scheduled(client, str(markers))
    resolved(client.get_job_execution_result(), "the job to finish", timeout=600)
    killer.join(5)
    fired = sorted(p for p in os.listdir(markers) if p in FAILURE_SCHEDULE)
    assert fired == sorted(FAILURE_SCHEDULE), f"only {fired} fired"
    assert client.jobmaster.stats.restarts == len(FAILURE_SCHEDULE)
    return client, committed_lines(tmp_path / "out")


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "timeout"])
def test_five_failures_under_backpressure_keep_exactly_once(spark, tmp_path, mode):
    client, lines = run_with_scheduled_failures(tmp_path, mode)
    check_exactly_once(lines, N, PARALLELISM)
    history = client.jobmaster.stats.checkpoints.history()
    acks = [ack for checkpoint in history for ack in checkpoint.subtasks.values()]
    if mode == "aligned":
        assert not any(a.unaligned for a in acks)
    else:  # the slow operator holds records in flight: they were persisted
        assert any(a.unaligned and a.persisted_data > 0 for a in acks)


def test_five_failures_under_backpressure_lose_nothing_at_least_once(spark, tmp_path):
    _client, lines = run_with_scheduled_failures(tmp_path, "at-least-once")
    values = collections.Counter(int(line.split(",")[1]) for line in lines)
    assert set(values) == set(range(N)), f"{N - len(set(values) & set(range(N)))} lost"
    for line in lines:
        key, value, _count = map(int, line.split(","))
        assert key == value % NUM_KEYS


def test_resuming_from_an_unaligned_checkpoint_replays_its_in_flight_records(spark, tmp_path):
    """Cancel under backpressure once a checkpoint with in-flight records completed, then
    resume from it: the persisted records are processed first, exactly once."""
    env = count_job(
        tmp_path / "out1", tmp_path / "chk", runner="spark", n=N, rate=12_000, slow_sink_s=0.0002
    )
    config = env.get_checkpoint_config()
    config.enable_unaligned_checkpoints()
    config.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    client = env.execute_async("unaligned, to be cancelled")
    jm = client.jobmaster

    def holds_in_flight_records() -> bool:
        latest = jm.stats.last_checkpoint
        return latest is not None and any(
            s.frames for e in latest.metadata.channel_state.values() for s in e.subtasks.values()
        )

    wait_until(holds_in_flight_records, "a checkpoint with in-flight records completed", job=client)
    resolved(client.cancel(), "the job to be cancelled", timeout=120)
    with pytest.raises(JobExecutionException, match="cancelled"):
        resolved(client.get_job_execution_result(), "the job to finish")
    checkpoint = jm.store.latest()
    assert checkpoint is not None and checkpoint.metadata.channel_state
    first_output = committed_lines(tmp_path / "out1")
    assert len(first_output) < N

    # another parallelism cannot take the in-flight records: a clear error, nothing changed
    before = sorted(os.listdir(checkpoint.path))
    wrong = count_job(
        tmp_path / "out2",
        tmp_path / "chk",
        runner="spark",
        n=N,
        parallelism=3,
        restore_path=checkpoint.path,
    )
    with pytest.raises(JobExecutionException, match=r"in-flight records .* same topology"):
        wrong.execute("rescaled")
    assert sorted(os.listdir(checkpoint.path)) == before

    env = count_job(
        tmp_path / "out2", tmp_path / "chk", runner="spark", n=N, restore_path=checkpoint.path
    )
    resumed = env.execute_async("resumed from unaligned")
    resolved(resumed.get_job_execution_result(), "the job to finish", timeout=300)
    assert resumed.jobmaster.stats.restored_from == checkpoint.checkpoint_id
    check_exactly_once(first_output + committed_lines(tmp_path / "out2"), N, PARALLELISM)


def test_an_unaligned_job_under_backpressure_takes_aligned_savepoints(spark, tmp_path):
    """Savepoints never go unaligned: a savepoint and a stop-with-savepoint of an unaligned job
    under backpressure hold no in-flight records, and a job restored from the stop savepoint
    continues exactly-once."""
    env = count_job(
        tmp_path / "out1", tmp_path / "chk", runner="spark", n=N, rate=12_000, slow_sink_s=0.0002
    )
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.set_default_savepoint_directory(str(tmp_path / "savepoints"))
    client = env.execute_async("unaligned with savepoints")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.completed_checkpoints >= 2, "two checkpoints completed", job=client)
    savepoint = resolved(client.trigger_savepoint(), "the savepoint", timeout=300)
    stop = resolved(client.stop_with_savepoint(False), "the stop with a savepoint", timeout=300)
    for path in (savepoint, stop):
        metadata = read_checkpoint_metadata(path)
        assert metadata.is_savepoint and metadata.channel_state == {}
    unaligned = [c for c in jm.stats.checkpoints.history() if c.unaligned]
    assert unaligned and any(c.persisted_data for c in unaligned)
    first_output = committed_lines(tmp_path / "out1")
    assert len(first_output) < N

    resumed = count_job(tmp_path / "out2", tmp_path / "chk", runner="spark", n=N, restore_path=stop)
    resumed.execute("resumed from the stop savepoint")
    check_exactly_once(first_output + committed_lines(tmp_path / "out2"), N, PARALLELISM)
