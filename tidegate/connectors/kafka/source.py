"""Kafka source (PyFlink's KafkaSource): partitions as splits, offsets in the checkpoint.

When each method is called, and what it guarantees:

- `create_splits` (every subtask, first run only): one split per partition found now, without
  a position. `create_reader_for` (connectors/base.py, SplitAssigningSource) gets all splits
  (first run, or every subtask's restored splits) and keeps those `split_owner` gives this
  subtask. tidegate assigns partitions itself; the consumer uses `assign()`, never a group
  rebalance.
- The reader, when created, resolves the starting (and, with `set_bounded` or `set_unbounded`,
  stopping) offsets of its splits without a position against the broker, then assigns them to
  its consumer. It blocks on the broker once, before the subtask's loop starts.
- `poll_batch` (loop thread): one `consume` of at most `POLL_TIMEOUT_S`; records of finished
  bounded splits are dropped; each split's offset advances past the records returned. Records
  carry their Kafka timestamps and say which partition they came from (`SplitRecords`).
- `report_splits` (before the first poll, with a WatermarkStrategy: SplitReportingReader in
  connectors/base.py): from then on the reader reports each partition it reads and each that
  finishes, so watermarks are generated per partition, as in Flink's KafkaSource.
- `snapshot_splits` (checkpoint): the splits with the offset after the last record returned,
  so a restore (any parallelism) resumes exactly there. Finished splits stay in the list: they
  tell discovery that their partitions are known.
- `notify_checkpoint_complete(n)`: the offsets of checkpoint n are committed to the consumer
  group, asynchronously, for monitoring only (with `set_group_id`); they are never read back
  except by `KafkaOffsetsInitializer.committed_offsets()` on a first run.
- Discovery (unbounded sources with `partition.discovery.interval.ms` > 0): a background thread
  with a consumer of its own lists the subscribed topics' partitions and resolves the earliest
  offsets of the new ones this subtask owns (not named by any restored split or by its own);
  `poll_batch` adds them without waiting on the broker.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import Any

from tidegate.connectors.base import Boundedness, SplitListener, SplitRecords
from tidegate.connectors.kafka.offsets import KafkaOffsetsInitializer, KafkaTopicPartition
from tidegate.connectors.kafka.records import ConsumerRecord, KafkaRecordDeserializationSchema
from tidegate.connectors.kafka.splits import (
    KafkaPartitionSplit,
    assign_splits,
    new_partitions,
)

__all__ = ["KafkaSource", "KafkaSourceBuilder", "KafkaSourceReader"]

#: the longest `poll_batch` waits for records (the contract allows ~50 ms)
POLL_TIMEOUT_S = 0.02
#: the timestamp of a record without one (the runtime's "no timestamp")
NO_TIMESTAMP = -(2**63)
#: Flink's default for unbounded sources: look for new partitions every 5 minutes
DEFAULT_DISCOVERY_INTERVAL_MS = 300_000
#: properties that are tidegate's, not the consumer's
_SOURCE_KEYS = (
    "partition.discovery.interval.ms",
    "client.id.prefix",
    "commit.offsets.on.checkpoint",
)


class KafkaSource:
    """Reads Kafka topics exactly once (with checkpoints). Build with `KafkaSource.builder()`."""

    #: records carry their Kafka timestamps (connectors/base.py TimestampedRecords)
    attaches_timestamps = True

    def __init__(
        self,
        properties: dict[str, str],
        topics: tuple[str, ...],
        topic_pattern: str | None,
        partitions: tuple[KafkaTopicPartition, ...],
        deserializer: KafkaRecordDeserializationSchema,
        starting: KafkaOffsetsInitializer,
        stopping: KafkaOffsetsInitializer | None,
        boundedness: Boundedness,
    ) -> None:
        self.properties = properties
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.partitions = partitions
        self.deserializer = deserializer
        self.starting = starting
        self.stopping = stopping
        #: BOUNDED with `set_bounded`; CONTINUOUS_UNBOUNDED otherwise, also with
        #: `set_unbounded`, whose stopping offsets end the partitions (and the source) too
        self.boundedness = boundedness

    @staticmethod
    def builder() -> KafkaSourceBuilder:
        return KafkaSourceBuilder()

    @property
    def group_id(self) -> str | None:
        return self.properties.get("group.id")

    @property
    def commits_offsets(self) -> bool:
        """Offsets go to the consumer group on checkpoint completion: with a group id, unless
        the property `commit.offsets.on.checkpoint` is 'false'."""
        return bool(self.group_id) and (
            self.properties.get("commit.offsets.on.checkpoint", "true").lower() != "false"
        )

    @property
    def discovery_interval_s(self) -> float | None:
        """Seconds between partition discoveries; None: no discovery (bounded sources, explicit
        partitions, or an interval <= 0)."""
        if self.stopping is not None or self.partitions:
            return None
        ms = int(
            self.properties.get("partition.discovery.interval.ms", DEFAULT_DISCOVERY_INTERVAL_MS)
        )
        return ms / 1000 if ms > 0 else None

    def consumer_config(self, subtask_index: int) -> dict[str, Any]:
        config = {k: v for k, v in self.properties.items() if k not in _SOURCE_KEYS}
        prefix = self.properties.get("client.id.prefix", "tidegate-kafka-source")
        config.setdefault("client.id", f"{prefix}-{subtask_index}")
        config.setdefault("group.id", f"{prefix}-unused")  # librdkafka wants one; never joined
        config["enable.auto.commit"] = False
        config["enable.auto.offset.store"] = False
        return config

    def list_partitions(self, consumer: Any) -> list[tuple[str, int]]:
        """The subscribed partitions that exist now, asking through `consumer`."""
        if self.partitions:
            return sorted((tp.topic, tp.partition) for tp in self.partitions)
        metadata = consumer.list_topics(timeout=10)
        if self.topic_pattern is not None:
            pattern = re.compile(self.topic_pattern)
            names = [t for t in metadata.topics if pattern.fullmatch(t)]
        else:
            names = list(self.topics)
            missing = [t for t in names if t not in metadata.topics]
            if missing:
                raise ValueError(
                    f"Kafka topics {missing} do not exist on {self.properties['bootstrap.servers']}"
                    ": create them first (the source does not create topics)"
                )
        return sorted(
            (t, p)
            for t in names
            for p in metadata.topics[t].partitions
            if metadata.topics[t].error is None
        )

    def create_splits(self, parallelism: int) -> list[KafkaPartitionSplit]:
        """One split per partition that exists now, without a position (its reader resolves
        the starting offset)."""
        from confluent_kafka import Consumer

        consumer = Consumer(self.consumer_config(0))
        try:
            return [KafkaPartitionSplit(t, p) for t, p in self.list_partitions(consumer)]
        finally:
            consumer.close()

    def create_reader(
        self, splits: list[KafkaPartitionSplit], subtask_index: int, parallelism: int
    ) -> KafkaSourceReader:
        """A reader over exactly `splits` (no others are known to it)."""
        return KafkaSourceReader(self, splits, subtask_index, parallelism, known=None)

    def create_reader_for(
        self, all_splits: list[KafkaPartitionSplit], subtask_index: int, parallelism: int
    ) -> KafkaSourceReader:
        """A reader over the splits `split_owner` gives this subtask out of all splits (first
        run, or every subtask's restored splits: SplitAssigningSource in connectors/base.py);
        the others are known, so discovery does not take their partitions for new ones."""
        mine = assign_splits(all_splits, subtask_index, parallelism)
        known = {s.key for s in all_splits}
        return KafkaSourceReader(self, mine, subtask_index, parallelism, known=known)

    def __repr__(self) -> str:
        what = self.topic_pattern or list(self.topics) or list(self.partitions)
        return f"KafkaSource({what!r}, {self.boundedness.value})"


class KafkaSourceReader:
    """Reads the partitions of one source subtask (see the module docstring)."""

    def __init__(
        self,
        source: KafkaSource,
        splits: list[KafkaPartitionSplit],
        subtask_index: int,
        parallelism: int,
        known: set[tuple[str, int]] | None,
    ) -> None:
        from confluent_kafka import Consumer

        self._source = source
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._consumer = Consumer(source.consumer_config(subtask_index))
        #: the splits as added (their positions are in _reading / _done, _skips)
        self._splits: dict[tuple[str, int], KafkaPartitionSplit] = {}
        self._reading: dict[tuple[str, int], int] = {}  # unfinished: the next offset
        self._done: dict[tuple[str, int], int] = {}  # finished: the stopping offset
        self._stops: dict[tuple[str, int], int] = {}  # bounded: the stopping offset
        self._skips: dict[tuple[str, int], int] = {}  # timestamp start not reached yet
        value_schema = source.deserializer.value_schema
        #: a value-only deserializer's `deserialize(bytes)` (the fast path), else None
        self._value_only = None if value_schema is None else value_schema.deserialize
        #: partitions named by any split handed to this reader's subtask (restored or planned)
        self._known: set[tuple[str, int]] = set(known or ()) | {s.key for s in splits}
        self._discovered: list[list[tuple[str, int]]] = []
        self._discovery_error: BaseException | None = None
        self._stop = threading.Event()
        self._closed = False
        self._listener: SplitListener | None = None
        self._add([self._resolve(s) for s in splits])
        self._discovery: threading.Thread | None = None
        interval = source.discovery_interval_s
        if interval is not None:
            self._discovery = threading.Thread(
                target=self._discover, args=(interval,), daemon=True, name="kafka-discovery"
            )
            self._discovery.start()

    def _resolve(self, split: KafkaPartitionSplit) -> KafkaPartitionSplit:
        """Give a split without a position its starting (and stopping) offset."""
        src, consumer = self._source, self._consumer
        if split.offset is None:
            start = KafkaOffsetsInitializer.earliest() if split.start_earliest else src.starting
            offset = start.resolve(consumer, split.topic, split.partition, src.group_id)
            skip = start.timestamp_ms if start.is_timestamp else None
            split = replace(split, offset=offset, skip_before_timestamp=skip)
        if src.stopping is not None and split.stopping_offset is None:
            stop = src.stopping.resolve(consumer, split.topic, split.partition, src.group_id)
            split = replace(split, stopping_offset=stop)
        return split

    def _add(self, splits: list[KafkaPartitionSplit]) -> None:
        from confluent_kafka import TopicPartition

        for s in splits:
            self._splits[s.key] = s
            self._known.add(s.key)
            if s.finished:
                self._done[s.key] = s.offset
                continue
            self._reading[s.key] = s.offset
            if s.stopping_offset is not None:
                self._stops[s.key] = s.stopping_offset
            if s.skip_before_timestamp is not None:
                self._skips[s.key] = s.skip_before_timestamp
        active = [s for s in splits if not s.finished]
        if active:
            self._consumer.incremental_assign(
                [TopicPartition(s.topic, s.partition, s.offset) for s in active]
            )
            if self._listener is not None:
                for s in active:
                    self._listener.add_split(s.key)

    def report_splits(self, listener: SplitListener) -> None:
        """Report the partitions being read to `listener`, now and as they are added or
        finish (SplitReportingReader: per-partition watermarks)."""
        self._listener = listener
        for key in self._reading:
            listener.add_split(key)

    def _discover(self, interval_s: float) -> None:
        """Background thread: every `interval_s`, list the partitions with a consumer of its
        own, and hand the new ones this subtask owns, with their earliest offsets, to the loop
        thread (which adds them in `poll_batch`)."""
        from confluent_kafka import Consumer

        consumer = Consumer(self._source.consumer_config(self._subtask))
        earliest = KafkaOffsetsInitializer.earliest()
        try:
            while not self._stop.wait(interval_s):
                try:
                    found = self._source.list_partitions(consumer)
                    fresh = new_partitions(
                        found, set(self._known), self._subtask, self._parallelism
                    )
                    splits = [
                        KafkaPartitionSplit(t, p, offset=earliest.resolve(consumer, t, p, None))
                        for t, p in fresh
                    ]
                except Exception as e:  # reported by the next poll_batch, which fails the job
                    self._discovery_error = e
                    return
                if splits:
                    self._discovered.append(splits)
        finally:
            consumer.close()

    def _apply_discovery(self) -> None:
        while self._discovered:
            splits = self._discovered.pop(0)
            self._add([s for s in splits if s.key not in self._known])

    def poll_batch(self, max_records: int) -> list[Any] | None:
        if self._discovery_error is not None:
            raise RuntimeError(
                f"Kafka partition discovery failed: {self._discovery_error}"
            ) from self._discovery_error
        if self._discovered:
            self._apply_discovery()
        if self._discovery is None and not self._reading:
            return None
        if max_records <= 0:
            return []
        messages = self._consumer.consume(max_records, POLL_TIMEOUT_S)
        values: list[Any] = []
        timestamps: list[int] = []
        runs: list[tuple[tuple[str, int], int]] = []  # (partition, end): SplitRecords
        run_key = None
        value_only = self._value_only
        deserialize = self._source.deserializer.deserialize
        reading, stops, skips = self._reading, self._stops, self._skips
        finished: set[tuple[str, int]] = set()
        for m in messages:
            if m.error() is not None:
                self._raise_error(m)
                continue
            key = (m.topic(), m.partition())
            position = reading.get(key)
            offset = m.offset()
            if position is None or offset < position:
                continue  # prefetched after its split finished, or before its position
            stop = stops.get(key)
            if stop is not None and offset >= stop:
                reading[key] = stop
                finished.add(key)
                continue
            ts_type, ts = m.timestamp()
            if skips and key in skips:  # a timestamp start: skip records older than it
                if ts < skips[key]:
                    reading[key] = offset + 1
                    continue
                del skips[key]
            if key != run_key:
                if values:
                    runs.append((run_key, len(values)))
                run_key = key
            if value_only is not None:
                values.append(value_only(m.value()))
            else:
                values.append(deserialize(_consumer_record(m, key, offset, ts_type, ts)))
            timestamps.append(ts if ts_type else NO_TIMESTAMP)
            reading[key] = offset + 1
            if stop is not None and offset + 1 >= stop:
                finished.add(key)
        if values:
            runs.append((run_key, len(values)))
        self._finish(finished)
        return SplitRecords(values, timestamps, runs)

    def _raise_error(self, m: Any) -> None:
        from confluent_kafka import KafkaError

        error = m.error()
        if error.code() != KafkaError._PARTITION_EOF:
            raise RuntimeError(
                f"Kafka consumer error on {m.topic()}[{m.partition()}]: {error.str()}"
            )

    def _finish(self, finished: set[tuple[str, int]]) -> None:
        """Stop reading finished bounded splits (unassign them); a split whose consumer
        position passed its stop (transaction markers occupy the last offsets) is finished."""
        from confluent_kafka import TopicPartition

        reading, stops = self._reading, self._stops
        open_bounded = [k for k in reading if k in stops and k not in finished]
        if open_bounded:
            positions = self._consumer.position([TopicPartition(t, p) for t, p in open_bounded])
            for key, tp in zip(open_bounded, positions, strict=True):
                if tp.offset >= 0 and tp.offset >= stops[key]:
                    reading[key] = stops[key]
                    finished.add(key)
        if finished:
            for key in finished:
                self._done[key] = reading.pop(key)
                if self._listener is not None:
                    self._listener.finish_split(key)
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in finished])

    def snapshot_splits(self) -> list[KafkaPartitionSplit]:
        positions = {**self._done, **self._reading}
        splits = [
            replace(s, offset=positions[s.key], skip_before_timestamp=self._skips.get(s.key))
            for s in self._splits.values()
        ]
        return splits

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        """Commit the offsets of the completed checkpoint's splits to the consumer group
        (monitoring only: `CheckpointListeningReader`)."""
        from confluent_kafka import TopicPartition

        if not splits or not self._source.commits_offsets:
            return
        offsets = [
            TopicPartition(s.topic, s.partition, s.offset) for s in splits if s.offset is not None
        ]
        if offsets:
            self._consumer.commit(offsets=offsets, asynchronous=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._consumer.close()


def _consumer_record(m: Any, key: tuple[str, int], offset: int, ts_type: int, ts: int) -> Any:
    return ConsumerRecord(
        key[0],
        key[1],
        offset,
        ts if ts_type else None,
        m.key(),
        m.value(),
        tuple(m.headers() or ()),
    )


class KafkaSourceBuilder:
    """PyFlink's KafkaSourceBuilder."""

    def __init__(self) -> None:
        self._properties: dict[str, str] = {}
        self._topics: tuple[str, ...] = ()
        self._pattern: str | None = None
        self._partitions: tuple[KafkaTopicPartition, ...] = ()
        self._deserializer: KafkaRecordDeserializationSchema | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSourceBuilder:
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_group_id(self, group_id: str) -> KafkaSourceBuilder:
        """The consumer group offsets are committed to on checkpoint completion (monitoring),
        and read by `KafkaOffsetsInitializer.committed_offsets()`."""
        return self.set_property("group.id", group_id)

    def set_topics(self, *topics: str) -> KafkaSourceBuilder:
        self._topics, self._pattern, self._partitions = tuple(topics), None, ()
        return self

    def set_topic_pattern(self, topic_pattern: str) -> KafkaSourceBuilder:
        """Every topic whose whole name matches the regular expression (also topics created
        later, found by partition discovery)."""
        re.compile(topic_pattern)
        self._topics, self._pattern, self._partitions = (), topic_pattern, ()
        return self

    def set_partitions(self, partitions: set[KafkaTopicPartition]) -> KafkaSourceBuilder:
        self._topics, self._pattern = (), None
        self._partitions = tuple(sorted(partitions, key=lambda tp: (tp.topic, tp.partition)))
        return self

    def set_starting_offsets(self, initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        self._starting = initializer
        return self

    def set_unbounded(
        self, stopping_offsets_initializer: KafkaOffsetsInitializer
    ) -> KafkaSourceBuilder:
        """Stop each partition at these offsets, as `set_bounded`, but stay a
        CONTINUOUS_UNBOUNDED source (the job runs in STREAMING mode, also with the runtime
        mode AUTOMATIC); the source ends when every partition reached its stopping offset."""
        self._stopping = stopping_offsets_initializer
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED
        return self

    def set_bounded(
        self, stopping_offsets_initializer: KafkaOffsetsInitializer
    ) -> KafkaSourceBuilder:
        """Stop each partition at these offsets (resolved when the reader starts, e.g. the
        latest offsets then), so the job ends."""
        self._stopping = stopping_offsets_initializer
        self._boundedness = Boundedness.BOUNDED
        return self

    def set_value_only_deserializer(self, deserialization_schema: Any) -> KafkaSourceBuilder:
        self._deserializer = KafkaRecordDeserializationSchema.value_only(deserialization_schema)
        return self

    def set_deserializer(
        self, deserializer: KafkaRecordDeserializationSchema
    ) -> KafkaSourceBuilder:
        self._deserializer = deserializer
        return self

    def set_client_id_prefix(self, prefix: str) -> KafkaSourceBuilder:
        return self.set_property("client.id.prefix", prefix)

    def set_property(self, key: str, value: str) -> KafkaSourceBuilder:
        self._properties[key] = str(value)
        return self

    def set_properties(self, props: dict[str, str]) -> KafkaSourceBuilder:
        for key, value in props.items():
            self.set_property(key, value)
        return self

    def build(self) -> KafkaSource:
        if "bootstrap.servers" not in self._properties:
            raise ValueError("KafkaSource needs set_bootstrap_servers")
        if not (self._topics or self._pattern or self._partitions):
            raise ValueError("KafkaSource needs set_topics, set_topic_pattern or set_partitions")
        if self._deserializer is None:
            raise ValueError("KafkaSource needs set_value_only_deserializer or set_deserializer")
        return KafkaSource(
            dict(self._properties),
            self._topics,
            self._pattern,
            self._partitions,
            self._deserializer,
            self._starting,
            self._stopping,
            self._boundedness,
        )
