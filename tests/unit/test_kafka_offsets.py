"""KafkaOffsetsInitializer resolution against a fake consumer (the broker's answers), and the
end of a partition when the broker's high watermark is too low (Tansu)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidegate.connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
    end_offset,
)


@dataclass
class Message:
    offset_: int

    def offset(self):
        return self.offset_

    def error(self):
        return None


@dataclass
class TP:
    offset: int


class FakeConsumer:
    """A partition holding offsets low..end-1, whose broker reports `high` as watermark."""

    def __init__(self, low=0, end=10, high=None, committed=-1001):
        self.low, self.end = low, end
        self.high = end if high is None else high
        self.committed_offset = committed
        self.position_ = None

    def get_watermark_offsets(self, tp, timeout):
        return self.low, self.high

    def assign(self, tps):
        self.position_ = tps[0].offset

    def unassign(self):
        self.position_ = None

    def consume(self, n, timeout):
        out = [Message(o) for o in range(self.position_, min(self.end, self.position_ + n))]
        self.position_ += len(out)
        return out

    def position(self, tps):
        return [TP(self.position_)]

    def committed(self, tps, timeout):
        return [TP(self.committed_offset)]


def test_end_offset_is_the_watermark_when_it_is_right():
    assert end_offset(FakeConsumer(end=10), "t", 0) == 10


def test_end_offset_reads_past_a_watermark_that_counts_only_a_batchs_first_record():
    assert end_offset(FakeConsumer(end=10, high=1), "t", 0) == 10


def test_an_empty_partition_ends_at_zero():
    assert end_offset(FakeConsumer(end=0, high=0), "t", 0) == 0


def test_earliest_latest_and_given_offsets():
    consumer = FakeConsumer(low=3, end=10)
    assert KafkaOffsetsInitializer.earliest().resolve(consumer, "t", 0, None) == 3
    assert KafkaOffsetsInitializer.latest().resolve(consumer, "t", 0, None) == 10
    given = KafkaOffsetsInitializer.offsets({KafkaTopicPartition("t", 0): 7})
    assert given.resolve(consumer, "t", 0, None) == 7
    assert given.resolve(consumer, "t", 1, None) == 3  # not given: EARLIEST by default


def test_committed_offsets_with_and_without_a_reset_strategy():
    with_commit = FakeConsumer(low=0, end=10, committed=4)
    committed = KafkaOffsetsInitializer.committed_offsets()
    assert committed.resolve(with_commit, "t", 0, "group") == 4
    nothing = FakeConsumer(low=2, end=10)
    latest = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST)
    assert latest.resolve(nothing, "t", 0, "group") == 10
    with pytest.raises(ValueError, match=r"partition 0 of topic 't'.*NONE"):
        committed.resolve(nothing, "t", 0, "group")
    with pytest.raises(ValueError, match="set_group_id"):
        committed.resolve(nothing, "t", 0, None)
