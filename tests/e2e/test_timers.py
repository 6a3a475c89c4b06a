"""Timers end to end on Spark: processing-time timers under failures, event-time timers at the
end of input under failures, and timers moved by rescaling through savepoints. Every timer of
the reference set fires exactly once in the committed (exactly-once FileSink) output, with its
key's state, on the subtask that owns its key's key group (timer_jobs.check_fired_exactly_once).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.timer_jobs import FailurePlan, check_fired_exactly_once, firings, timer_job
from tests.support.snapshots import records_read_at, stop_with_savepoint
from tests.support.waiting import resolved
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend


@pytest.mark.parametrize(
    "state_backend",
    [HashMapStateBackend(), EmbeddedRocksDBStateBackend()],
    ids=["hashmap", "rocksdb"],
)
def test_processing_time_timers_fire_exactly_once_across_an_exception_and_two_kills(
    spark, tmp_path, state_backend
):
    real = 3_000
    plan = FailurePlan(
        {
            0: ("raise", "timer", 600),  # in on_timer: the timer already left the state
            1: ("kill", "record", 1_500),  # kill -9 between a registration and its firing
            2: ("kill", "timer", 2_200),  # kill -9 inside on_timer
        }
    )
    env = timer_job(
        tmp_path / "out",
        tmp_path / "chk",
        real=real,
        padding=1_500,
        rate=1_500,
        domains=("processing",),
        delay_ms=300,
        plan=plan,
        state_backend=state_backend,
    )
    client = env.execute_async("processing-time timers")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert type(client.jobmaster.spec.state_backend) is type(state_backend)
    assert client.jobmaster.stats.restarts == 3
    check_fired_exactly_once(firings(tmp_path / "out"), real, ("processing",))


def test_event_time_timers_fire_at_the_end_of_input_exactly_once_across_failures(spark, tmp_path):
    real = 2_000
    plan = FailurePlan(
        {
            0: ("kill", "record", 900),  # timers registered, none fired yet
            1: ("raise", "timer", 1_000),  # while the end of input fires them
            2: ("kill", "timer", 1_700),
        }
    )
    env = timer_job(
        tmp_path / "out",
        tmp_path / "chk",
        real=real,
        padding=0,
        rate=1_000,
        domains=("event",),
        plan=plan,
    )
    client = env.execute_async("event-time timers")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 3
    check_fired_exactly_once(firings(tmp_path / "out"), real, ("event",))


def _run_until_savepoint(tmp_path: Path, run: str, parallelism: int, restore: str | None, **job):
    """Start the job (restored from `restore`), stop it with a savepoint after two completed
    checkpoints; returns the savepoint's path."""
    env = timer_job(
        tmp_path / run, tmp_path / "chk", parallelism=parallelism, restore_path=restore, **job
    )
    client = env.execute_async(f"timers at parallelism {parallelism}")
    path = stop_with_savepoint(client, tmp_path / "savepoints", after_checkpoints=2)
    return path


def test_rescaling_2_to_3_to_2_moves_pending_timers_with_their_key_groups(spark, tmp_path):
    real = 5_000
    job = dict(
        real=real, padding=2_000, rate=1_000, domains=("event", "processing"), delay_ms=1_000
    )
    first = _run_until_savepoint(tmp_path, "run1", 2, None, **job)
    second = _run_until_savepoint(tmp_path, "run2", 3, first, **job)
    env = timer_job(tmp_path / "run3", tmp_path / "chk", parallelism=2, restore_path=second, **job)
    resolved(
        env.execute_async("timers back at parallelism 2").get_job_execution_result(),
        "the job to finish",
    )

    runs = {run: firings(tmp_path / run) for run in ("run1", "run2", "run3")}
    # pending timers went through both savepoints: event-time ones all fire in the last run
    assert not [f for f in runs["run1"] + runs["run2"] if f.domain == "E"]
    assert {f.parallelism for f in runs["run2"]} == {3}
    assert {f.subtask for f in runs["run2"]} == {0, 1, 2}
    every = [f for fired in runs.values() for f in fired]
    check_fired_exactly_once(every, real, ("event", "processing"))


def test_stop_with_drain_fires_the_pending_event_time_timers_before_the_savepoint(tmp_path):
    env = timer_job(
        tmp_path / "out",
        tmp_path / "chk",
        real=100_000,
        padding=0,
        rate=2_000,
        domains=("event",),
        runner="local",
    )
    client = env.execute_async("drained")
    path = stop_with_savepoint(client, tmp_path / "savepoints", after_checkpoints=2, drain=True)
    [read] = records_read_at(path, 100_000, parallelism=1)
    # the source runs in order: the timers of every value read before the drain, once each
    check_fired_exactly_once(firings(tmp_path / "out"), len(read), ("event",))
