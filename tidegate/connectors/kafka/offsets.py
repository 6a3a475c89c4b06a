"""Starting and stopping offsets (PyFlink's KafkaOffsetsInitializer) and their resolution.

An initializer is a description; the reader that owns a split resolves it against the broker
once, when the split has no position yet, and the resolved offsets go into the checkpoint, so
a restore never resolves them again.

The end of a partition (`latest`) is not taken from the broker's high watermark alone: some
Kafka-protocol brokers (Tansu) report a high watermark that is the base offset of the last
record batch plus one, not the offset after its last record. `end_offset` therefore reads the
last batch itself (from high watermark - 1) and takes the offset after the last record it
returns, if that is higher. On Apache Kafka both agree.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaTopicPartition",
    "end_offset",
]

#: how long `end_offset` waits for the records of the last batch
END_PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class KafkaTopicPartition:
    """A partition of a topic (PyFlink's KafkaTopicPartition)."""

    topic: str
    partition: int


class KafkaOffsetResetStrategy(enum.Enum):
    """Where to start when a committed or given offset does not exist."""

    LATEST = 0
    EARLIEST = 1
    NONE = 2


class _Kind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    COMMITTED = "committed"
    TIMESTAMP = "timestamp"
    OFFSETS = "offsets"


@dataclass(frozen=True, slots=True)
class KafkaOffsetsInitializer:
    """Which offset a partition starts (or, bounded, stops) at. Build with the static methods."""

    kind: _Kind
    reset: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE
    timestamp_ms: int | None = None
    given_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict, hash=False)

    @staticmethod
    def earliest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer(_Kind.EARLIEST)

    @staticmethod
    def latest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer(_Kind.LATEST)

    @staticmethod
    def committed_offsets(
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
    ) -> KafkaOffsetsInitializer:
        """The consumer group's committed offsets (needs `set_group_id`); a partition without
        one starts per `offset_reset_strategy` (NONE: the job fails, naming the partition)."""
        return KafkaOffsetsInitializer(_Kind.COMMITTED, offset_reset_strategy)

    @staticmethod
    def timestamp(timestamp: int) -> KafkaOffsetsInitializer:
        """The first record whose timestamp (ms) is >= `timestamp` (the end if none is)."""
        return KafkaOffsetsInitializer(_Kind.TIMESTAMP, timestamp_ms=int(timestamp))

    @staticmethod
    def offsets(
        offsets: Mapping[KafkaTopicPartition, int],
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST,
    ) -> KafkaOffsetsInitializer:
        """Given offsets per partition; a partition not given starts per
        `offset_reset_strategy`."""
        given = {(tp.topic, tp.partition): int(o) for tp, o in offsets.items()}
        return KafkaOffsetsInitializer(_Kind.OFFSETS, offset_reset_strategy, given_offsets=given)

    @property
    def is_timestamp(self) -> bool:
        return self.kind is _Kind.TIMESTAMP

    def resolve(self, consumer: Any, topic: str, partition: int, group_id: str | None) -> int:
        """The offset for one partition, asking the broker through `consumer` (a
        confluent_kafka.Consumer). Blocks on the broker; called when a reader starts."""
        from confluent_kafka import TopicPartition

        match self.kind:
            case _Kind.EARLIEST:
                return _earliest(consumer, topic, partition)
            case _Kind.LATEST:
                return end_offset(consumer, topic, partition)
            case _Kind.TIMESTAMP:
                # the broker's answer may be the start of a batch before it (Tansu); the reader
                # skips records older than the timestamp until the first one at or after it
                found = consumer.offsets_for_times(
                    [TopicPartition(topic, partition, self.timestamp_ms)], timeout=10
                )[0]
                if found.offset < 0:
                    return end_offset(consumer, topic, partition)
                return found.offset
            case _Kind.COMMITTED:
                if not group_id:
                    raise ValueError(
                        "KafkaOffsetsInitializer.committed_offsets() needs a consumer group: "
                        "call set_group_id on the KafkaSource builder"
                    )
                tp = consumer.committed([TopicPartition(topic, partition)], timeout=10)[0]
                if tp.offset >= 0:
                    return tp.offset
                return self._reset(consumer, topic, partition, "no committed offset")
            case _Kind.OFFSETS:
                given = self.given_offsets.get((topic, partition))
                if given is not None:
                    return given
                return self._reset(consumer, topic, partition, "no offset given")
        raise AssertionError(self.kind)

    def _reset(self, consumer: Any, topic: str, partition: int, why: str) -> int:
        if self.reset is KafkaOffsetResetStrategy.EARLIEST:
            return _earliest(consumer, topic, partition)
        if self.reset is KafkaOffsetResetStrategy.LATEST:
            return end_offset(consumer, topic, partition)
        raise ValueError(
            f"{why} for partition {partition} of topic {topic!r}, and the offset reset strategy "
            "is NONE: pass KafkaOffsetResetStrategy.EARLIEST or LATEST"
        )


def _earliest(consumer: Any, topic: str, partition: int) -> int:
    from confluent_kafka import TopicPartition

    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    return low


def end_offset(consumer: Any, topic: str, partition: int) -> int:
    """The offset after the last record of the partition now (see the module docstring).

    Uses `consumer`'s assignment temporarily: call it before the reader assigns its splits."""
    from confluent_kafka import TopicPartition

    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    if high <= 0:
        return max(high, 0)
    consumer.assign([TopicPartition(topic, partition, high - 1)])
    end = high
    deadline = time.monotonic() + END_PROBE_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(1000, 0.2)
            if not messages:
                if end > high or _position(consumer, topic, partition) >= high:
                    break
                continue
            for m in messages:
                if m.error() is None:
                    end = max(end, m.offset() + 1)
            if len(messages) < 1000:
                break
    finally:
        consumer.unassign()
    return end


def _position(consumer: Any, topic: str, partition: int) -> int:
    from confluent_kafka import TopicPartition

    return consumer.position([TopicPartition(topic, partition)])[0].offset
