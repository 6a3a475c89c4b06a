"""KafkaSource end to end on Spark against the test broker: the output of a keyed running
count over a topic equals the reference computed from the topic's content, record for record,
through an exception, a kill -9 of a worker, and a rescale 2 -> 3 from a checkpoint; a bounded
source ends the job; new partitions are found while the job runs; records carry their Kafka
timestamps."""

from __future__ import annotations

import uuid

from tests.e2e.jobs import kill_slots
from tests.e2e.kafka_jobs import (
    WithTimestamp,
    check_topic_counted_once,
    fill_numbers,
    kafka_source,
    source_job,
)
from tests.support.environments import file_sink, job_environment
from tests.support.kafka import produce
from tests.support.output import committed_lines
from tests.support.waiting import wait_for_checkpoints, wait_until
from tidegate.common import JobStatus, WatermarkStrategy
from tidegate.connectors.kafka.splits import split_owner

PARTITIONS = 6


def test_a_bounded_source_through_exceptions_counts_the_topic_exactly_once(spark, kafka, tmp_path):
    n = 12_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    env = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=3_000,
        fail_at={0: 4_000, 1: 9_000},
    )
    client = env.execute_async("kafka source, exceptions")
    client.get_job_execution_result().result(timeout=300)
    assert client.jobmaster.stats.restarts == 2
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_a_kill_9_of_a_worker_loses_and_duplicates_nothing_of_the_topic(spark, kafka, tmp_path):
    n = 15_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    env = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=2_500,
    )
    client = env.execute_async("kafka source, kill -9")
    killer = kill_slots(client, kills=1, after_checkpoints=2)
    client.get_job_execution_result().result(timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1 and client.jobmaster.stats.restarts >= 1
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_a_rescale_from_two_to_three_subtasks_moves_partitions_exactly_once(spark, kafka, tmp_path):
    n = 12_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    moved = [p for p in range(PARTITIONS) if split_owner(topic, p, 2) != split_owner(topic, p, 3)]
    assert moved  # partitions change subtask
    first = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=1_000,
    ).execute_async("kafka source at 2")
    wait_until(lambda: committed_lines(tmp_path / "out"), "committed output", job=first)
    wait_for_checkpoints(first, 1)
    first.cancel().result()
    assert first.get_job_status().result() is JobStatus.CANCELED
    before = committed_lines(tmp_path / "out")
    assert 0 < len(before) < n
    second = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=3,
        rate=10_000,
        restore_path=str(tmp_path / "chk" / first.jobmaster.job_id),
    ).execute_async("kafka source at 3")
    second.get_job_execution_result().result(timeout=300)
    assert second.jobmaster.stats.restored_from is not None
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_partitions_created_while_the_job_runs_are_read_from_their_start(spark, kafka, tmp_path):
    prefix = f"grow-{uuid.uuid4().hex[:8]}"
    old = kafka.create_topic(2, name=f"{prefix}-a")
    produce(kafka, old, ["0", "1"], partition=0)
    source = kafka_source(kafka, pattern=f"{prefix}-.*", bounded=False, discovery_ms=300)
    client = source_job(
        source, tmp_path / "out", tmp_path / "chk", parallelism=2, rate=10_000
    ).execute_async("kafka discovery")
    try:
        wait_until(
            lambda: len(committed_lines(tmp_path / "out")) == 2, "the first records", job=client
        )
        new = kafka.create_topic(3, name=f"{prefix}-b")
        for p in range(3):
            produce(kafka, new, [str(10 + p)], partition=p)
        produce(kafka, old, ["2"], partition=1)
        wait_until(
            lambda: len(committed_lines(tmp_path / "out")) == 6,
            "the new partitions' records",
            job=client,
            timeout=60,
        )
    finally:
        client.cancel().result()
    values = sorted(int(line.split(",")[1]) for line in committed_lines(tmp_path / "out"))
    assert values == [0, 1, 2, 10, 11, 12]


def test_records_carry_their_kafka_timestamps_into_the_job(spark, kafka, tmp_path):
    topic = kafka.create_topic(2)
    for p in range(2):  # the i-th record of a partition has the timestamp 1_000_000 + i
        produce(kafka, topic, [f"{p}-{i}" for i in range(50)], partition=p)
    env = job_environment("spark", tmp_path / "chk", parallelism=2)
    watermarks = WatermarkStrategy.for_monotonous_timestamps()  # no assigner: Kafka's
    (
        env.from_source(kafka_source(kafka, topic=topic), watermarks, "kafka")
        .process(WithTimestamp())
        .sink_to(file_sink(tmp_path / "out"))
    )
    env.execute("kafka timestamps")
    expected = [f"{p}-{i},{1_000_000 + i}" for p in range(2) for i in range(50)]
    assert sorted(committed_lines(tmp_path / "out")) == sorted(expected)
