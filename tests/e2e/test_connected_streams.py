"""Two-input operators end to end on Spark, output compared record for record with a
plain-Python reference (tests/e2e/connected_jobs.py): a KeyedCoProcessFunction joining two
keyed sources with keyed state and event-time timeouts and an interval join, each exactly once
across an injected exception and a kill -9; CoMap and CoFlatMap on two unkeyed sources across
an exception; the keyed co-process join on rocksdb with unaligned checkpoints across two
kills; the keyed co-process job rescaled 2 -> 3 from a savepoint mid-stream."""

from __future__ import annotations

from tests.e2e.connected_jobs import (
    co_map_job,
    co_map_reference,
    interval_job,
    interval_reference,
    lines,
    order_job,
    order_reference,
)
from tests.e2e.timer_jobs import FailurePlan
from tests.support.snapshots import stop_with_savepoint
from tests.support.waiting import resolved


def test_a_keyed_co_process_join_with_timeouts_is_exactly_once_across_an_exception_and_a_kill(
    spark, tmp_path
):
    n = 4_000
    # each source subtask emits its half of the ids in order (1,000/s): the timer of 3600 (the
    # 1,600th of the second half) needs a watermark that comes ~0.6 s after record 1001 (the
    # 1,001st of the first), so it fires first in attempt 1; a timer of an earlier position
    # could fire in attempt 0 and be covered by its last checkpoint, never firing again
    plan = FailurePlan({0: ("raise", "record", 1_001), 1: ("kill", "timer", 3_600)})
    env = order_job(tmp_path / "out", tmp_path / "chk", n=n, rate=2_000, plan=plan)
    client = env.execute_async("keyed co-process join under failures")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    got = lines(tmp_path / "out")
    assert got == order_reference(n)
    assert sum(line.startswith("T,") for line in got) == n // 4


def test_the_keyed_co_process_join_on_rocksdb_with_unaligned_checkpoints_survives_kills(
    spark, tmp_path
):
    n = 4_000
    plan = FailurePlan({0: ("kill", "record", 1_503), 1: ("kill", "timer", 3_600)})
    env = order_job(
        tmp_path / "out",
        tmp_path / "chk",
        n=n,
        rate=2_000,
        plan=plan,
        rocksdb_dir=tmp_path / "rocksdb",
        unaligned=True,
    )
    client = env.execute_async("keyed co-process join, rocksdb, unaligned")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    assert lines(tmp_path / "out") == order_reference(n)


def test_an_interval_join_is_exactly_once_across_an_exception_and_a_kill(spark, tmp_path):
    n = 4_000
    plan = FailurePlan({0: ("raise", "record", 900), 1: ("kill", "record", 3_502)})
    env = interval_job(tmp_path / "out", tmp_path / "chk", n=n, rate=2_000, plan=plan)
    client = env.execute_async("interval join under failures")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    expected = interval_reference(n)
    assert len(expected) > n // 2
    assert lines(tmp_path / "out") == expected


def test_co_map_co_flat_map_co_process_and_broadcast_process_are_exactly_once_across_failures(
    spark, tmp_path
):
    n = 3_000
    # both in source split [0, 1500): attempt 1 replays from before 1200, so it reaches 1400
    plan = FailurePlan({0: ("raise", "record", 1_200), 1: ("kill", "record", 1_400)})
    out = [tmp_path / name for name in ("tag", "split", "process")]
    env = co_map_job(*out, tmp_path / "chk", n=n, rate=2_000, plan=plan)
    client = env.execute_async("two-input functions")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    assert [lines(o) for o in out] == list(co_map_reference(n))


def test_the_keyed_co_process_job_rescales_from_two_to_three_subtasks_from_a_savepoint(
    spark, tmp_path
):
    n = 4_000
    first = order_job(tmp_path / "run1", tmp_path / "chk", n=n, rate=800, parallelism=2)
    client = first.execute_async("until a savepoint")
    savepoint = stop_with_savepoint(client, tmp_path / "savepoints", after_checkpoints=3)
    second = order_job(
        tmp_path / "run2",
        tmp_path / "chk",
        n=n,
        rate=4_000,
        parallelism=3,
        restore_path=savepoint,
    )
    resolved(
        second.execute_async("restored at parallelism 3").get_job_execution_result(),
        "the job to finish",
    )
    before, after = lines(tmp_path / "run1"), lines(tmp_path / "run2")
    assert before and after  # the savepoint was taken mid-stream
    assert sorted(before + after) == order_reference(n)
