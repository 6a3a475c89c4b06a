"""The Kafka source reader and sink writer against a real broker, without a job: positions,
bounded ends, timestamps, discovery, and the exactly-once sink's commit and recovery."""

from __future__ import annotations

import gc
import time

import pytest

from tests.support.kafka import produce, read_topic
from tidegate.common.serialization import SimpleStringSchema
from tidegate.connectors.base import Boundedness, SplitReportingReader
from tidegate.connectors.kafka import sink as sink_module
from tidegate.connectors.kafka.offsets import end_offset
from tidegate.connectors.kafka.transactions import ids_to_fence
from tidegate.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    KafkaTopicPartition,
    KafkaTopicSelector,
)
from tidegate.runtime.records import TimestampedBatch


def source(kafka, topic, **kw):
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema())
        .set_starting_offsets(kw.pop("starting", KafkaOffsetsInitializer.earliest()))
    )
    if "stopping" in kw:
        builder.set_bounded(kw.pop("stopping"))
    if "unbounded_stopping" in kw:
        builder.set_unbounded(kw.pop("unbounded_stopping"))
    for key, value in kw.pop("properties", {}).items():
        builder.set_property(key, value)
    if "group" in kw:
        builder.set_group_id(kw.pop("group"))
    return builder.build()


def drain(reader, limit_s: float = 10.0) -> list:
    """Poll until the reader is finished; the values and timestamps read."""
    values, timestamps = [], []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        batch = reader.poll_batch(100)
        if batch is None:
            return values, timestamps
        values.extend(batch)
        timestamps.extend(batch.timestamps)
    raise TimeoutError(f"the reader did not finish within {limit_s} s ({len(values)} read)")


def first_reader(src, parallelism=1, subtask=0):
    return src.create_reader_for(src.create_splits(parallelism), subtask, parallelism)


def test_the_end_of_a_partition_is_after_its_last_record_whatever_the_watermark(kafka):
    from confluent_kafka import Consumer

    topic = kafka.create_topic()
    produce(kafka, topic, [f"v{i}" for i in range(10)])  # one batch of 10
    consumer = Consumer(kafka.config(**{"group.id": "probe"}))
    try:
        assert end_offset(consumer, topic, 0) == 10
    finally:
        consumer.close()


def test_a_bounded_reader_reads_to_the_latest_offset_with_kafka_timestamps(kafka):
    topic = kafka.create_topic(2)
    produce(kafka, topic, [f"a{i}" for i in range(25)], partition=0)
    produce(kafka, topic, [f"b{i}" for i in range(5)], partition=1)
    src = source(kafka, topic, stopping=KafkaOffsetsInitializer.latest())
    reader = first_reader(src)
    produce(kafka, topic, ["after-the-start"], partition=0)  # beyond the bound
    try:
        values, timestamps = drain(reader)
    finally:
        reader.close()
    assert sorted(values) == sorted([f"a{i}" for i in range(25)] + [f"b{i}" for i in range(5)])
    assert sorted(timestamps) == sorted(
        [1_000_000 + i for i in range(25)] + [1_000_000 + i for i in range(5)]
    )


def test_an_unbounded_source_with_stopping_offsets_ends_there_and_stays_unbounded(kafka):
    topic = kafka.create_topic(2)
    produce(kafka, topic, ["a0", "a1"], partition=0)
    src = source(kafka, topic, unbounded_stopping=KafkaOffsetsInitializer.latest())
    assert src.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
    assert src.discovery_interval_s is None  # its partitions end: no new ones are looked for
    reader = first_reader(src)
    produce(kafka, topic, ["after-the-start"], partition=1)  # beyond the bound
    try:
        assert sorted(drain(reader)[0]) == ["a0", "a1"]  # then None: the source ends
    finally:
        reader.close()


class Splits:
    """A SplitListener keeping what the reader reported, in order."""

    def __init__(self) -> None:
        self.events: list = []

    def add_split(self, split_id) -> None:
        self.events.append(("add", split_id))

    def finish_split(self, split_id) -> None:
        self.events.append(("finish", split_id))


def test_a_reader_reports_its_partitions_and_which_one_each_record_came_from(kafka):
    topic = kafka.create_topic(2)
    produce(kafka, topic, [f"a{i}" for i in range(30)], partition=0)
    produce(kafka, topic, ["b0"], partition=1)
    reader = first_reader(source(kafka, topic, stopping=KafkaOffsetsInitializer.latest()))
    assert isinstance(reader, SplitReportingReader)
    splits = Splits()
    try:
        reader.report_splits(splits)
        assert splits.events == [("add", (topic, 0)), ("add", (topic, 1))]
        origin = {}
        while (batch := reader.poll_batch(7)) is not None:
            start = 0
            for split_id, end in batch.split_runs:
                origin.update((value, split_id) for value in batch[start:end])
                start = end
            assert start == len(batch) == len(batch.timestamps)
    finally:
        reader.close()
    assert origin == {v: (topic, 0 if v[0] == "a" else 1) for v in origin}
    assert len(origin) == 31
    assert sorted(splits.events[2:]) == [("finish", (topic, 0)), ("finish", (topic, 1))]


def test_a_reader_restored_from_its_snapshot_resumes_after_the_last_record_returned(kafka):
    topic = kafka.create_topic()
    produce(kafka, topic, [f"v{i}" for i in range(50)])
    src = source(kafka, topic, stopping=KafkaOffsetsInitializer.latest())
    reader = first_reader(src)
    first: list = []
    try:
        while len(first) < 20:
            first.extend(reader.poll_batch(7))
        snapshot = reader.snapshot_splits()
    finally:
        reader.close()
    restored = src.create_reader_for(snapshot, 0, 1)
    try:
        rest, _ = drain(restored)
    finally:
        restored.close()
    assert first + rest == [f"v{i}" for i in range(50)]


def test_starting_offsets_by_timestamp_given_offsets_and_committed_offsets(kafka):
    topic = kafka.create_topic()
    produce(kafka, topic, [f"v{i}" for i in range(10)])  # timestamps 1_000_000 + i
    latest = KafkaOffsetsInitializer.latest()

    def read(starting, **kw):
        reader = first_reader(source(kafka, topic, starting=starting, stopping=latest, **kw))
        try:
            return drain(reader)[0]
        finally:
            reader.close()

    assert read(KafkaOffsetsInitializer.timestamp(1_000_007)) == ["v7", "v8", "v9"]
    given = {KafkaTopicPartition(topic, 0): 4}
    assert read(KafkaOffsetsInitializer.offsets(given)) == [f"v{i}" for i in range(4, 10)]
    committed = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST)
    assert read(committed, group="fresh-group") == [f"v{i}" for i in range(10)]
    with pytest.raises(ValueError, match="offset reset strategy is NONE"):
        read(KafkaOffsetsInitializer.committed_offsets(), group="fresh-group-2")


def test_offsets_are_committed_to_the_group_when_a_checkpoint_completes(kafka):
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka.create_topic()
    produce(kafka, topic, [f"v{i}" for i in range(10)])
    reader = first_reader(source(kafka, topic, group="monitor"))
    try:
        got: list = []
        while len(got) < 10:
            got.extend(reader.poll_batch(100))
        splits = reader.snapshot_splits()
        reader.notify_checkpoint_complete(1, splits)
        reader.poll_batch(1)  # serves the asynchronous commit
        time.sleep(0.5)
    finally:
        reader.close()
    consumer = Consumer(kafka.config(**{"group.id": "monitor"}))
    try:
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 10
    finally:
        consumer.close()


def test_new_partitions_are_discovered_and_read_from_their_start(kafka):
    """New partitions of a new topic matching the pattern (Tansu cannot add partitions to a
    topic, KIP-195; for the source both are partitions no split names)."""
    import uuid

    prefix = f"disc-{uuid.uuid4().hex[:8]}"
    old = kafka.create_topic(1, name=f"{prefix}-old")
    produce(kafka, old, ["old"])
    src = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_topic_pattern(f"{prefix}-.*")
        .set_value_only_deserializer(SimpleStringSchema())
        .set_property("partition.discovery.interval.ms", "200")
        .build()
    )
    readers = [first_reader(src, 2, i) for i in range(2)]
    try:
        new = kafka.create_topic(2, name=f"{prefix}-new")
        produce(kafka, new, ["new0"], partition=0)
        produce(kafka, new, ["new1"], partition=1)
        got: list = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            for r in readers:
                got.extend(r.poll_batch(100))
        assert sorted(got) == ["new0", "new1", "old"]
        snapshot = [s for r in readers for s in r.snapshot_splits()]
        assert sorted(s.key for s in snapshot) == [(new, 0), (new, 1), (old, 0)]
    finally:
        for r in readers:
            r.close()


def sink(kafka, topic, guarantee=DeliveryGuarantee.EXACTLY_ONCE, prefix=None, pool_size=None):
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_delivery_guarantee(guarantee)
        .set_transactional_id_prefix(prefix or f"{topic}-tx")
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
    )
    if pool_size is not None:
        builder.set_property("transaction.pool.size", str(pool_size))
    return builder.build()


def values(records):
    return sorted(r.value for r in records)


def test_exactly_once_records_are_visible_only_after_the_commit(kafka):
    topic = kafka.create_topic()
    s = sink(kafka, topic)
    s.recover(0, 1, 0, [])
    writer, committer = s.create_writer(0, 1, 0), s.create_committer()
    writer.write_batch(["a", "b"])
    first = writer.prepare_commit(1)
    writer.write_batch(["c"])  # the next transaction, on another id
    second = writer.prepare_commit(2)
    assert read_topic(kafka, topic, quiet_s=0.5) == []
    committer.commit(first)
    if not kafka.is_tansu:  # Tansu holds back committed records while a later one is open
        assert values(read_topic(kafka, topic)) == ["a", "b"]
    committer.commit(first + second)  # again: idempotent
    assert values(read_topic(kafka, topic)) == ["a", "b", "c"]
    writer.close()


def test_a_restore_commits_a_pre_committed_transaction_of_a_dead_writer_exactly_once(kafka):
    topic = kafka.create_topic()
    s = sink(kafka, topic)
    s.recover(0, 1, 0, [])
    writer = s.create_writer(0, 1, 0)
    writer.write_batch(["x", "y"])
    committables = writer.prepare_commit(1)
    writer.write_batch(["never-checkpointed"])
    # the process dies here: its producers are gone (the broker still has the open transactions)
    sink_module._PRECOMMITTED.clear()
    writer.close()
    for attempt in (1, 2):  # a restore, and another restore of the same checkpoint
        s.recover(0, 1, attempt, committables)
        s.create_committer().commit(committables)
    committed = [r for r in read_topic(kafka, topic) if r.value in ("x", "y")]
    if not kafka.is_tansu:
        assert values(committed) == ["x", "y"]
    else:  # Tansu shows aborted records too: the fenced transaction's x, y and the re-produced
        assert values(committed) == ["x", "x", "y", "y"]


def test_a_restore_with_a_smaller_pool_and_fewer_writers_fences_every_id_the_old_run_used(kafka):
    """Writer 1 of 2 (pool of 4) pre-commits on slots 0-2 and leaves a transaction open on
    slot 3, then dies. The restore runs 1 writer with a pool of 1: it still aborts the open
    transaction on slot 3 (the committables say the old pool size), else it would hold back
    every later record from read_committed consumers, and re-produces the pre-committed ones."""
    topic = kafka.create_topic()
    old = sink(kafka, topic, pool_size=4)
    for k in (0, 1):
        old.recover(k, 2, 0, [])
    writers = [old.create_writer(k, 2, 0) for k in (0, 1)]
    restored = []
    for checkpoint in (1, 2, 3):  # none completes
        writers[1].write_batch([f"pre-committed-{checkpoint}"])
        restored += writers[0].prepare_commit(checkpoint) + writers[1].prepare_commit(checkpoint)
    writers[1].write_batch(["open"])  # on slot 3
    sink_module._PRECOMMITTED.clear()  # the process dies (its producers linger unused)
    new = sink(kafka, topic, pool_size=1)
    new.recover(0, 1, 1, restored)
    committer = new.create_committer()
    committer.commit(restored)
    writer = new.create_writer(0, 1, 1)
    writer.write_batch(["later"])
    committer.commit(writer.prepare_commit(4))
    writer.close()
    seen = values(read_topic(kafka, topic))
    for old_writer in writers:
        old_writer.close()  # the dead process's producers, fenced
    expected = ["later", "pre-committed-1", "pre-committed-2", "pre-committed-3"]
    if not kafka.is_tansu:
        assert seen == expected
    else:  # Tansu shows aborted records too: "open" and the fenced pre-committed copies
        assert sorted(set(seen)) == sorted([*expected, "open"])
        assert seen.count("later") == 1 and seen.count("open") == 1


def test_at_least_once_flushes_at_the_checkpoint(kafka):
    topic = kafka.create_topic()
    s = sink(kafka, topic, DeliveryGuarantee.AT_LEAST_ONCE)
    writer = s.create_writer(0, 1, 0)
    writer.write_batch([f"v{i}" for i in range(100)])
    assert writer.prepare_commit(1) == []
    assert len(read_topic(kafka, topic)) == 100
    writer.close()


def test_an_exactly_once_sink_needs_a_prefix():
    with pytest.raises(ValueError, match="set_transactional_id_prefix"):
        (
            KafkaSink.builder()
            .set_bootstrap_servers("localhost:1")
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_record_serializer(
                KafkaRecordSerializationSchema.builder()
                .set_topic("t")
                .set_value_serialization_schema(SimpleStringSchema())
                .build()
            )
            .build()
        )


def test_a_checkpoint_interval_above_the_transaction_timeout_is_refused_on_submission(tmp_path):
    from tidegate.common import Configuration
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.connectors.datagen import DataGeneratorSource

    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", "local")
    )
    env.enable_checkpointing(120_000)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers("localhost:1")
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix("p")
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic("t")
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .build()
    )
    env.from_source(DataGeneratorSource(str, count=10), None, "n").sink_to(sink)
    with pytest.raises(ValueError, match=r"checkpoint interval \(120000 ms\).*transaction.timeout"):
        env.execute("refused")


def test_explicit_partitions_are_the_only_ones_read(kafka):
    topic = kafka.create_topic(3)
    for p in range(3):
        produce(kafka, topic, [f"p{p}"], partition=p)
    src = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_partitions({KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 2)})
        .set_value_only_deserializer(SimpleStringSchema())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .build()
    )
    reader = first_reader(src)
    try:
        assert sorted(drain(reader)[0]) == ["p0", "p2"]
    finally:
        reader.close()


class Upper(KafkaTopicSelector):
    def __init__(self, topics):
        self.topics = topics

    def apply(self, data):
        return self.topics[data[0] == data[0].upper()]


def test_keys_headers_and_a_topic_selector_shape_the_records_written(kafka):
    lower, upper = kafka.create_topic(), kafka.create_topic()
    serializer = (
        KafkaRecordSerializationSchema.builder()
        .set_topic_selector(Upper((lower, upper)))
        .set_key_serialization_schema(KeyOf())
        .set_value_serialization_schema(SimpleStringSchema())
        .set_headers(lambda v: [("length", str(len(v)).encode())])
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(kafka.bootstrap_servers)
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
        .set_record_serializer(serializer)
        .build()
    )
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["abc", "XY", "de"])
    writer.prepare_commit(1)
    writer.close()
    got = {t: read_topic(kafka, t) for t in (lower, upper)}
    assert [(r.value, r.key, r.headers) for r in got[upper]] == [("XY", b"X", (("length", b"2"),))]
    assert sorted((r.value, r.key) for r in got[lower]) == [("abc", b"a"), ("de", b"d")]


class KeyOf:
    def serialize(self, value):
        return value[0].encode()


def test_closing_a_writer_aborts_its_open_transaction(kafka):
    topic = kafka.create_topic()
    s = sink(kafka, topic)
    s.recover(0, 1, 0, [])
    writer = s.create_writer(0, 1, 0)
    writer.write_batch(["not-checkpointed"])
    writer.close()  # e.g. a cancel: nothing holds back read_committed consumers
    other = sink(kafka, topic, prefix=f"{topic}-other")
    other.recover(0, 1, 0, [])
    later = other.create_writer(0, 1, 0)
    later.write_batch(["later"])
    other.create_committer().commit(later.prepare_commit(1))
    later.close()
    seen = values(read_topic(kafka, topic))
    assert "later" in seen
    if not kafka.is_tansu:  # Tansu shows aborted records too
        assert seen == ["later"]


def test_a_lingering_writer_of_a_failed_attempt_cannot_open_a_transaction_after_the_restore(
    kafka,
):
    """A writer of a failed attempt whose slot has not stopped yet goes on writing after the
    next attempt fenced its ids (in another process: its pre-commits stay in its own): it
    must not get a producer the fence did not reach, whose transaction nothing would abort
    (read_committed consumers would stall behind it for good)."""
    from confluent_kafka import KafkaException

    topic = kafka.create_topic()
    s = sink(kafka, topic)
    s.recover(0, 1, 0, [])
    zombie = s.create_writer(0, 1, 0)
    for checkpoint in (1, 2):  # two ids hold pre-committed transactions
        zombie.write_batch([f"pre-{checkpoint}"])
        zombie.prepare_commit(checkpoint)
    held = {k: v for k, v in sink_module._PRECOMMITTED.items() if k.startswith(f"{topic}-tx")}
    for txn_id in ids_to_fence(s.prefix, [0], s.pool_size):  # the next attempt's recover
        s.fence(txn_id)
    # fenced: the producer's fatal error (confluent-kafka raises it from flush as a SystemError
    # it never frees; the sink raises a KafkaException with the fatal error instead)
    with pytest.raises(KafkaException, match="fenced"):
        zombie.write_batch(["zombie"])  # on the third id
        zombie.prepare_commit(3)
    for txn_id in held:
        sink_module._PRECOMMITTED.pop(txn_id, None)
    zombie.close()
    current = s.create_writer(0, 1, 1)
    current.write_batch(["current"])
    s.create_committer().commit(current.prepare_commit(4))
    current.close()
    assert "current" in values(read_topic(kafka, topic))
    held.clear()
    gc.collect()  # the fenced producers (also in the caught error's frames) end now, not
    # after the broker stopped, where they would go on trying to reach it


def test_records_are_written_with_their_stream_records_timestamps(kafka):
    """As Flink's KafkaRecordSerializationSchema: the Kafka timestamp is the stream record's,
    if it has one (none, or a negative one: the producer's time), also when a restore
    re-produces a pre-committed transaction from its committable."""
    topic = kafka.create_topic()
    before = int(time.time() * 1000)
    plain = sink(kafka, topic, DeliveryGuarantee.AT_LEAST_ONCE)
    writer = plain.create_writer(0, 1, 0)
    writer.write_batch(TimestampedBatch(["a", "b"], [1_700_000_000_000, -5]))
    writer.write_batch(["c"])  # a batch without timestamps
    writer.prepare_commit(1)
    writer.close()
    s = sink(kafka, topic)
    s.recover(0, 1, 0, [])
    transactional = s.create_writer(0, 1, 0)
    transactional.write_batch(TimestampedBatch(["x"], [1_600_000_000_000]))
    committables = transactional.prepare_commit(1)
    sink_module._PRECOMMITTED.clear()  # the process died: the restore re-produces x
    transactional.close()
    s.recover(0, 1, 1, committables)
    s.create_committer().commit(committables)
    after = int(time.time() * 1000)
    stamps = {r.value: r.timestamp for r in read_topic(kafka, topic)}
    assert (stamps["a"], stamps["x"]) == (1_700_000_000_000, 1_600_000_000_000)
    assert before <= stamps["b"] <= after and before <= stamps["c"] <= after
