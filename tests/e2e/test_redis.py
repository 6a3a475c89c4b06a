"""Redis connectors end to end on Spark against a private redis-server: the Streams source is
exactly-once through an exception and a kill -9 and when rescaled from a checkpoint (output
compared with what the server holds, entry for entry); the stream and hash sinks show nothing
before a checkpoint completes and hold exactly the reference after failures."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.e2e.connector_jobs import (
    rescaled_sinks_run,
    rescaled_source_run,
    sink_count_job,
    source_count_job,
)
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.output import committed_lines
from tests.support.references import (
    check_consistent_prefix,
    check_counted_exactly_once,
    check_exactly_once,
    records_per_key,
)
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.datastream.connectors.redis import (
    RedisKeyValueSink,
    RedisStreamSink,
    RedisStreamSource,
)


@pytest.fixture
def client(redis_server):
    c = redis.Redis.from_url(redis_server.url)
    yield c
    c.close()


def _fill(client, n: int, streams: int) -> list[str]:
    """Values 0..n-1 as entries `{v: i}`, round-robin over `streams` new streams."""
    names = [f"in-{uuid.uuid4().hex[:8]}-{j}" for j in range(streams)]
    with client.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(names[i % streams], {"v": i})
        pipe.execute()
    return names


def _held(client, names: list[str]) -> list[list[int]]:
    """What the server holds: each stream's values in its order."""
    return [[int(fields[b"v"]) for _, fields in client.xrange(name)] for name in names]


def _source(redis_server, names, *, bounded=True, group=None):
    builder = RedisStreamSource.builder().set_url(redis_server.url).set_streams(*names)
    builder.set_deserializer(lambda stream, entry_id, fields: int(fields["v"]))
    if bounded:
        builder.set_bounded()
    if group:
        builder.set_consumer_group(group)
    return builder.build()


def test_the_streams_source_is_exactly_once_through_an_exception_and_a_kill_9(
    spark, tmp_path, redis_server, client
):
    n = 12_000
    names = _fill(client, n, 3)
    env = source_count_job(
        _source(redis_server, names),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        seconds_per_record=0.0003,
        fail_at={0: n // 3, 1: n // 3},
    )
    job = env.execute_async("redis source failures")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))
    check_counted_exactly_once(committed_lines(tmp_path / "out"), _held(client, names))


def test_an_unbounded_consumer_group_read_of_a_growing_stream_is_exactly_once_and_acked(
    spark, tmp_path, redis_server, client
):
    """Entries are added while the job runs; the job is cancelled once it committed all."""
    n = 6_000
    names = _fill(client, n // 2, 2)
    env = source_count_job(
        _source(redis_server, names, bounded=False, group="tidegate-test"),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        fail_at={0: n // 2 + 10},  # an entry added while it runs
    )
    job = env.execute_async("redis consumer group")
    wait_for_checkpoints(job, 1)
    with client.pipeline(transaction=False) as pipe:
        for i in range(n // 2, n):
            pipe.xadd(names[i % 2], {"v": i})
        pipe.execute()
    wait_until(
        lambda: len(committed_lines(tmp_path / "out")) >= n, "all entries committed", job=job
    )
    wait_for_checkpoints(job, 2)  # its acks happened
    resolved(job.cancel(), "the job to be cancelled")
    assert job.jobmaster.stats.restarts == 1
    check_counted_exactly_once(committed_lines(tmp_path / "out"), _held(client, names))
    for name in names:  # acked up to a completed checkpoint's position: nothing left
        assert client.xpending(name, "tidegate-test")["pending"] == 0


def test_the_streams_source_rescales_from_2_to_3_subtasks_from_a_checkpoint(
    spark, tmp_path, redis_server, client
):
    """Entries added while the first run reads are beyond the bounded splits' ends."""
    n = 12_000
    names = _fill(client, n, 4)
    held = _held(client, names)

    def add_entries() -> None:
        for name in names:
            client.xadd(name, {"v": n})

    lines = rescaled_source_run(
        _source(redis_server, names), tmp_path, n=n, while_first_runs=add_entries
    )
    check_counted_exactly_once(lines, held)


def test_a_bounded_read_ends_at_the_entries_present_when_it_started(
    spark, tmp_path, redis_server, client
):
    names = _fill(client, 3_000, 2)
    env = source_count_job(
        _source(redis_server, names), tmp_path / "out", tmp_path / "chk", parallelism=3
    )
    held = _held(client, names)
    resolved(
        env.execute_async("bounded").get_job_execution_result(), "the job to finish", timeout=300
    )
    check_counted_exactly_once(committed_lines(tmp_path / "out"), held)


def _sinks(redis_server, out: str, counts: str):
    stream = (
        RedisStreamSink.builder()
        .set_url(redis_server.url)
        .set_stream(out)
        .set_serializer(lambda line: {"line": line})
        .build()
    )
    hashes = (
        RedisKeyValueSink.builder()
        .set_url(redis_server.url)
        .set_hash_writes(lambda line: counts, lambda line: {line.split(",")[0]: line.split(",")[2]})
        .build()
    )
    return [stream, hashes]


def test_the_sinks_hold_exactly_the_reference_through_an_exception_and_a_kill_9(
    spark, tmp_path, redis_server, client
):
    n = 20_000
    out, counts = f"out-{uuid.uuid4().hex[:8]}", f"counts-{uuid.uuid4().hex[:8]}"
    env = sink_count_job(
        _sinks(redis_server, out, counts),
        tmp_path / "chk",
        n=n,
        rate=8_000,
        fail_at={0: 3_000, 1: 3_000},
    )
    job = env.execute_async("redis sinks")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))
    lines = [fields[b"line"].decode() for _, fields in client.xrange(out)]
    check_exactly_once(lines, n, 2)
    final = {int(k): int(v) for k, v in client.hgetall(counts).items()}
    assert final == dict(records_per_key(n))
    markers = client.keys(f"tidegate:commit:{job.jobmaster.job_id}:*")
    assert markers and all(client.ttl(m) > 0 for m in markers)


def test_nothing_reaches_redis_before_a_checkpoint_completes(spark, tmp_path, redis_server, client):
    out, counts = f"out-{uuid.uuid4().hex[:8]}", f"counts-{uuid.uuid4().hex[:8]}"
    env = sink_count_job(
        _sinks(redis_server, out, counts),
        tmp_path / "chk",
        n=100_000,
        rate=2_000,
        interval_ms=2_500,
    )
    job = env.execute_async("redis sinks before a checkpoint")
    jm = job.jobmaster
    wait_until(lambda: jm.stats.records_read > 200, "records read", job=job)
    before = jm.stats.completed_checkpoints
    visible = (client.xlen(out), client.hlen(counts))
    after = jm.stats.completed_checkpoints
    assert before == after == 0, "a checkpoint completed too early for this check"
    assert visible == (0, 0)
    wait_for_checkpoints(job, 1)
    wait_until(lambda: client.xlen(out) > 0, "the first checkpoint's entries committed", job=job)
    resolved(job.cancel(), "the job to be cancelled")
    check_consistent_prefix([fields[b"line"].decode() for _, fields in client.xrange(out)])


def test_the_sinks_restored_at_3_subtasks_from_2_commit_every_batch_once(
    spark, tmp_path, redis_server, client
):
    n = 12_000
    out, counts = f"out-{uuid.uuid4().hex[:8]}", f"counts-{uuid.uuid4().hex[:8]}"
    rescaled_sinks_run(
        lambda: _sinks(redis_server, out, counts),
        tmp_path / "chk",
        n=n,
        written=lambda: client.xlen(out),
    )
    lines = [fields[b"line"].decode() for _, fields in client.xrange(out)]
    check_exactly_once(lines, n, 2)  # the source's splits stay those planned at 2
    final = {int(k): int(v) for k, v in client.hgetall(counts).items()}
    assert final == dict(records_per_key(n))
