"""Jobs of the Kafka end-to-end tests and their reference checks.

Source jobs: a topic holding the numbers 0..n-1 (number v in partition v % partitions, in
increasing order) -> KafkaSource -> [throttle] -> [failures] -> key_by(v % NUM_KEYS) -> running
count -> FileSink. Sink jobs: numbers -> [failures] -> running count -> KafkaSink, each record
tagged with the attempt that produced it (a header), to tell where a duplicate comes from; the
sink jobs' source has one subtask, so the output is deterministic. The window job: one source
subtask reading every partition with per-partition watermarks, counting each partition's
records per 10-second event-time window.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

from tests.e2e.jobs import FailAtValues, RunningCount
from tests.support.environments import file_sink, job_environment
from tests.support.kafka import KafkaBroker, fill
from tests.support.references import NUM_KEYS
from tidegate.common import Duration, WatermarkStrategy
from tidegate.common.serialization import SimpleStringSchema
from tidegate.common.time import Time
from tidegate.datastream import (
    ExternalizedCheckpointRetention,
    MapFunction,
    ProcessAllWindowFunction,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from tidegate.datastream.window import TumblingEventTimeWindows

WINDOW_MS = 10_000


def fill_numbers(kafka: KafkaBroker, n: int, partitions: int) -> str:
    topic = kafka.create_topic(partitions)
    fill(kafka, topic, [(v % partitions, str(v)) for v in range(n)])
    return topic


class Throttle(MapFunction):
    """At most `rate` records per second per subtask (so failures hit a running job)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def open(self, runtime_context) -> None:
        self.start, self.seen = time.monotonic(), 0

    def map(self, value):
        self.seen += 1
        ahead = self.seen / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            time.sleep(ahead)
        return value


def kafka_source(
    kafka: KafkaBroker,
    *,
    topic: str | None = None,
    pattern: str | None = None,
    bounded=True,
    discovery_ms: int | None = None,
) -> KafkaSource:
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_group_id("tidegate-e2e")
    )
    builder = builder.set_topics(topic) if topic else builder.set_topic_pattern(pattern)
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    if discovery_ms is not None:
        builder.set_property("partition.discovery.interval.ms", str(discovery_ms))
    return builder.build()


def source_job(
    source: KafkaSource,
    out: Path,
    checkpoints: Path,
    *,
    parallelism: int,
    rate: float,
    fail_at: dict[int, int] | None = None,
    restore_path: str | None = None,
    interval_ms: int = 200,
) -> StreamExecutionEnvironment:
    env = job_environment(
        "spark",
        checkpoints,
        parallelism=parallelism,
        interval_ms=interval_ms,
        restore_path=restore_path,
    )
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION  # the rescale restores it
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").uid("kafka")
    ds = ds.map(int).uid("parse").map(Throttle(rate)).uid("throttle")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def check_topic_counted_once(lines: list[str], n: int, partitions: int) -> None:
    """The running count over the topic's numbers == the reference, record for record: every
    number once, each key's counts 1..n_k, and a key's numbers of one partition counted in the
    partition's order."""
    by_key: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for line in lines:
        key, value, count = map(int, line.split(","))
        assert key == value % NUM_KEYS, line
        by_key[key].append((value, count))
    values = sorted(v for pairs in by_key.values() for v, _ in pairs)
    lost, duplicated = n - len(set(values)), len(values) - len(set(values))
    assert (lost, duplicated) == (0, 0), f"{lost} lost, {duplicated} duplicated"
    for key, pairs in by_key.items():
        assert sorted(c for _, c in pairs) == list(range(1, len(pairs) + 1)), f"key {key}"
        for p in range(partitions):
            own = sorted((v, c) for v, c in pairs if v % partitions == p)
            assert [c for _, c in own] == sorted(c for _, c in own), f"key {key} order"


class WithTimestamp(ProcessFunction):
    """Each record with the timestamp it carries."""

    def process_element(self, value, ctx):
        yield f"{value},{ctx.timestamp()}"


class TagAttempt(MapFunction):
    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        return (value, self.attempt)


class FirstField:
    """Serializes the line of a (line, attempt) pair."""

    def serialize(self, element) -> bytes:
        return element[0].encode()


def sink_job(
    kafka: KafkaBroker,
    topic: str,
    checkpoints: Path,
    *,
    n: int,
    parallelism: int,
    rate: float,
    fail_at: dict[int, int] | None = None,
    interval_ms: int = 200,
) -> StreamExecutionEnvironment:
    env = job_environment("spark", checkpoints, parallelism=parallelism, interval_ms=interval_ms)
    # one source subtask: each key's records reach the count in one order in every attempt,
    # so a record re-emitted after a restore equals the one the failed attempt emitted
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").set_parallelism(1).uid("numbers")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).set_parallelism(1).uid("fail")  # chained: same order
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    ds = ds.map(TagAttempt()).uid("tag")
    serializer = (
        KafkaRecordSerializationSchema.builder()
        .set_topic(topic)
        .set_value_serialization_schema(FirstField())
        .set_headers(lambda e: [("attempt", str(e[1]).encode())])
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"{topic}-job")
        .set_record_serializer(serializer)
        .build()
    )
    ds.sink_to(sink).uid("kafka-sink")
    return env


class PartitionCounts(ProcessAllWindowFunction):
    """`start,count of p0,count of p1,...` of a window over `p<partition>@<ts>` values."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def process(self, context, elements):
        counts = collections.Counter(v.split("@")[0] for v in elements)
        yield ",".join(
            map(str, [context.window().start, *(counts[f"p{p}"] for p in range(self.partitions))])
        )


def window_job(
    kafka: KafkaBroker, topic: str, partitions: int, out: Path, checkpoints: Path, idle_ms: int
) -> StreamExecutionEnvironment:
    """One source subtask reads every partition of `topic` (Kafka timestamps, monotonous per
    partition, `with_idleness(idle_ms)`); tumbling WINDOW_MS event-time windows count each
    partition's records."""
    env = job_environment("spark", checkpoints, parallelism=1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(
        Duration.of_millis(idle_ms)
    )
    (
        env.from_source(kafka_source(kafka, topic=topic, bounded=False), strategy, "kafka")
        .window_all(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .process(PartitionCounts(partitions))
        .sink_to(file_sink(out))
    )
    return env
