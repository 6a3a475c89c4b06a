"""KafkaSink EXACTLY_ONCE end to end on Spark against the test broker: a keyed running count
written through Kafka transactions bound to checkpoints, through exceptions and a kill -9.

On Apache Kafka (TIDEGATE_TEST_KAFKA) a read_committed consumer gets the reference exactly.
Tansu also returns records of aborted transactions to read_committed consumers; there the test
shows that the distinct records are the reference exactly and that every extra copy was
produced by an attempt that failed (each record carries its attempt in a header): the
transactions of those attempts whose checkpoints never completed were aborted by fencing.
"""

from __future__ import annotations

import collections

from tests.e2e.jobs import kill_slots
from tests.e2e.kafka_jobs import sink_job
from tests.support.kafka import read_topic
from tests.support.references import check_exactly_once


def check_sink_output(kafka, topic: str, n: int, parallelism: int, attempts: int) -> None:
    records = read_topic(kafka, topic)
    lines = [r.value for r in records]
    if not kafka.is_tansu:
        check_exactly_once(lines, n, parallelism)
        return
    check_exactly_once(sorted(set(lines)), n, parallelism)
    copies = collections.defaultdict(list)
    for r in records:
        copies[r.value].append(int(dict(r.headers)["attempt"]))
    for line, tags in copies.items():
        # at most one copy per attempt, the extra ones from attempts that failed
        assert len(tags) == len(set(tags)), (line, tags)
        assert all(a < attempts - 1 for a in sorted(tags)[:-1]), (line, tags)


def test_exactly_once_through_exceptions(spark, kafka, tmp_path):
    n, parallelism = 10_000, 2
    topic = kafka.create_topic(3)
    env = sink_job(
        kafka,
        topic,
        tmp_path / "chk",
        n=n,
        parallelism=parallelism,
        rate=4_000,
        fail_at={0: 3_000, 1: 7_000},
    )
    client = env.execute_async("kafka sink, exceptions")
    client.get_job_execution_result().result(timeout=300)
    assert client.jobmaster.stats.restarts == 2
    check_sink_output(kafka, topic, n, parallelism, client.jobmaster.stats.restarts + 1)


def test_exactly_once_through_a_kill_9(spark, kafka, tmp_path):
    n, parallelism = 12_000, 2
    topic = kafka.create_topic(3)
    env = sink_job(kafka, topic, tmp_path / "chk", n=n, parallelism=parallelism, rate=3_000)
    client = env.execute_async("kafka sink, kill -9")
    killer = kill_slots(client, kills=1, after_checkpoints=2)
    client.get_job_execution_result().result(timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_sink_output(kafka, topic, n, parallelism, client.jobmaster.stats.restarts + 1)
