"""NATS JetStream connectors end to end on Spark against a private nats-server: the source is
exactly-once through an exception and a kill -9, unbounded with its durable consumers
acknowledged, and bounded when rescaled from a checkpoint (output compared with what the
stream holds, message for message); the sink shows nothing before a checkpoint completes, and
the stream holds exactly the reference after failures and after a rescale."""

from __future__ import annotations

import uuid

import pytest

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
)
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.connectors.nats.connection import NatsClient, NatsConnection
from tidegate.connectors.nats.progress import durable_name
from tidegate.datastream.connectors.nats import NatsJetStreamSink, NatsJetStreamSource


@pytest.fixture
def nats(nats_server):
    client = NatsClient(NatsConnection(nats_server.url))
    yield client
    client.close()


def _stream(nats) -> str:
    name = f"S{uuid.uuid4().hex[:8]}"
    nats.run(nats.js.add_stream(name=name, subjects=[f"{name}.>"], duplicate_window=300.0))
    return name


def _publish(nats, stream: str, values: range, subjects: int) -> None:
    """Value i to subject `<stream>.p<i % subjects>`, pipelined, all acknowledged."""

    async def publish() -> None:
        for i in values:
            await nats.js.publish_async(f"{stream}.p{i % subjects}", str(i).encode())
        await nats.js.publish_async_completed()

    nats.run(publish(), 120)


def _held(nats, stream: str) -> dict[str, list[bytes]]:
    """What the stream holds: each subject's payloads in stream order (read with a consumer of
    its own, not the connector under test)."""
    from nats.js.api import AckPolicy, ConsumerConfig

    async def read() -> dict[str, list[bytes]]:
        total = (await nats.js.stream_info(stream)).state.messages
        sub = await nats.js.pull_subscribe(
            ">", stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
        )
        held: dict[str, list[bytes]] = {}
        got = 0
        while got < total:
            for msg in await sub.fetch(1000, timeout=5):
                held.setdefault(msg.subject, []).append(msg.data)
                got += 1
        await sub.unsubscribe()
        return held

    return nats.run(read(), 120)


def _splits(nats, stream: str) -> list[list[int]]:
    return [[int(p) for p in payloads] for payloads in _held(nats, stream).values()]


def _source(nats_server, stream: str, subjects: int, *, bounded: bool = True, durable=None):
    builder = (
        NatsJetStreamSource.builder()
        .set_servers(nats_server.url)
        .set_stream(stream)
        .set_subjects(*[f"{stream}.p{j}" for j in range(subjects)])
        .set_deserializer(lambda subject, seq, data: int(data))
    )
    if bounded:
        builder.set_bounded()
    if durable:
        builder.set_durable_consumer(durable)
    return builder.build()


def test_the_jetstream_source_is_exactly_once_through_an_exception_and_a_kill_9(
    spark, tmp_path, nats_server, nats
):
    n = 12_000
    stream = _stream(nats)
    _publish(nats, stream, range(n), 3)
    env = source_count_job(
        _source(nats_server, stream, 3),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        seconds_per_record=0.0003,
        fail_at={0: n // 3, 1: n // 3},
    )
    job = env.execute_async("nats source failures")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))
    check_counted_exactly_once(committed_lines(tmp_path / "out"), _splits(nats, stream))


def test_an_unbounded_read_of_a_growing_stream_is_exactly_once_and_acknowledged(
    spark, tmp_path, nats_server, nats
):
    """With durable consumers, whose ack floors reach each subject's last message once the
    checkpoints covering everything completed."""
    n = 6_000
    stream = _stream(nats)
    _publish(nats, stream, range(n // 2), 2)
    env = source_count_job(
        _source(nats_server, stream, 2, bounded=False, durable="tidegate-test"),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        fail_at={0: n // 2 + 10},  # a message published while it runs
    )
    job = env.execute_async("nats unbounded")
    wait_for_checkpoints(job, 1)
    _publish(nats, stream, range(n // 2, n), 2)
    wait_until(lambda: len(committed_lines(tmp_path / "out")) >= n, "all committed", job=job)
    subjects = [f"{stream}.p{j}" for j in range(2)]
    last = {s: nats.run(nats.js.get_last_msg(stream, s)).seq for s in subjects}
    names = {s: durable_name("tidegate-test", s) for s in subjects}

    def acknowledged() -> bool:
        floors = {s: nats.run(nats.js.consumer_info(stream, c)).ack_floor for s, c in names.items()}
        return all(floors[s].stream_seq == last[s] for s in last)

    wait_until(acknowledged, "the durable consumers acknowledged up to the last messages", job=job)
    resolved(job.cancel(), "the job to be cancelled")
    assert job.jobmaster.stats.restarts == 1
    check_counted_exactly_once(committed_lines(tmp_path / "out"), _splits(nats, stream))


def test_the_bounded_source_rescales_from_2_to_3_subtasks_and_ends_at_the_planned_messages(
    spark, tmp_path, nats_server, nats
):
    """Messages published while the first run reads lie beyond the bounded splits' ends: the
    restored run at 3 subtasks ends without them, every planned message counted once."""
    n = 12_000
    stream = _stream(nats)
    _publish(nats, stream, range(n), 4)
    held = _splits(nats, stream)
    lines = rescaled_source_run(
        _source(nats_server, stream, 4),
        tmp_path,
        n=n,
        while_first_runs=lambda: _publish(nats, stream, range(n, n + 40), 4),
    )
    check_counted_exactly_once(lines, held)


def _sink(nats_server, stream: str):
    return (
        NatsJetStreamSink.builder()
        .set_servers(nats_server.url)
        .set_stream(stream)
        .set_subject(f"{stream}.out")
        .build()
    )


def _lines(nats, stream: str) -> list[str]:
    return [p.decode() for p in _held(nats, stream).get(f"{stream}.out", [])]


def test_the_sink_holds_exactly_the_reference_through_an_exception_and_a_kill_9(
    spark, tmp_path, nats_server, nats
):
    n = 20_000
    stream = _stream(nats)
    env = sink_count_job(
        [_sink(nats_server, stream)],
        tmp_path / "chk",
        n=n,
        rate=8_000,
        fail_at={0: 3_000, 1: 3_000},
    )
    job = env.execute_async("nats sink")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))
    check_exactly_once(_lines(nats, stream), n, 2)


def test_nothing_is_published_before_a_checkpoint_completes(spark, tmp_path, nats_server, nats):
    stream = _stream(nats)
    env = sink_count_job(
        [_sink(nats_server, stream)], tmp_path / "chk", n=100_000, rate=2_000, interval_ms=2_500
    )
    job = env.execute_async("nats sink before a checkpoint")
    jm = job.jobmaster
    wait_until(lambda: jm.stats.records_read > 200, "records read", job=job)
    before = jm.stats.completed_checkpoints
    visible = nats.run(nats.js.stream_info(stream)).state.messages
    after = jm.stats.completed_checkpoints
    assert before == after == 0, "a checkpoint completed too early for this check"
    assert visible == 0
    wait_for_checkpoints(job, 1)
    wait_until(
        lambda: nats.run(nats.js.stream_info(stream)).state.messages > 0,
        "the first checkpoint's messages published",
        job=job,
    )
    resolved(job.cancel(), "the job to be cancelled")
    check_consistent_prefix(_lines(nats, stream))


def test_the_sink_restored_at_3_subtasks_from_2_publishes_every_batch_once(
    spark, tmp_path, nats_server, nats
):
    """The restored batches are published again by the subtasks that take over their writer
    indexes: their message ids make JetStream drop them as duplicates."""
    n = 12_000
    stream = _stream(nats)
    rescaled_sinks_run(
        lambda: [_sink(nats_server, stream)],
        tmp_path / "chk",
        n=n,
        written=lambda: nats.run(nats.js.stream_info(stream)).state.messages,
    )
    check_exactly_once(_lines(nats, stream), n, 2)  # the source's splits stay those planned at 2
