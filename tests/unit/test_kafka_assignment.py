"""The pure decisions of the Kafka connector: which subtask reads a partition, which new
partitions a reader takes, which transactional ids a restore fences."""

from __future__ import annotations

import itertools

import pytest

from tidegate.connectors.base import writer_subtask
from tidegate.connectors.kafka.splits import (
    KafkaPartitionSplit,
    assign_splits,
    new_partitions,
    split_owner,
)
from tidegate.connectors.kafka.transactions import (
    ids_to_fence,
    taken_over_indexes,
    transactional_id,
)


def test_every_partition_has_exactly_one_owner_at_every_parallelism():
    splits = [KafkaPartitionSplit(t, p, offset=p) for t in ("a", "bb") for p in range(7)]
    for parallelism in (1, 2, 3, 5, 8):
        taken = [assign_splits(splits, i, parallelism) for i in range(parallelism)]
        flat = [s for part in taken for s in part]
        assert sorted(s.key for s in flat) == sorted(s.key for s in splits)
        assert all(
            split_owner(s.topic, s.partition, parallelism) == i
            for i, part in enumerate(taken)
            for s in part
        )


def test_consecutive_partitions_of_a_topic_spread_over_the_subtasks():
    owners = [split_owner("orders", p, 3) for p in range(6)]
    assert sorted(owners[:3]) == [0, 1, 2] and owners[:3] == owners[3:]


def test_a_rescale_keeps_each_splits_position():
    splits = [KafkaPartitionSplit("t", p, offset=10 * p, stopping_offset=99) for p in range(4)]
    after = list(itertools.chain.from_iterable(assign_splits(splits, i, 3) for i in range(3)))
    assert {s.key: s.offset for s in after} == {s.key: s.offset for s in splits}


def test_a_duplicate_split_is_taken_once():
    split = KafkaPartitionSplit("t", 0, offset=5)
    owner = split_owner("t", 0, 2)
    assert assign_splits([split, split], owner, 2) == [split]


def test_new_partitions_are_the_unknown_ones_this_subtask_owns():
    found = [("t", p) for p in range(6)]
    known = {("t", 0), ("t", 1), ("t", 2)}
    taken = [new_partitions(found, known, i, 2) for i in range(2)]
    assert sorted(tp for part in taken for tp in part) == [("t", 3), ("t", 4), ("t", 5)]
    assert all(split_owner(t, p, 2) == i for i, part in enumerate(taken) for t, p in part)


def test_a_finished_split_is_finished_only_at_its_stopping_offset():
    assert not KafkaPartitionSplit("t", 0, offset=3).finished
    assert not KafkaPartitionSplit("t", 0, offset=3, stopping_offset=4).finished
    assert KafkaPartitionSplit("t", 0, offset=4, stopping_offset=4).finished
    assert not KafkaPartitionSplit("t", 0, stopping_offset=0).finished  # not resolved yet


def test_split_owner_rejects_nonsense():
    with pytest.raises(ValueError, match="parallelism"):
        split_owner("t", 0, 0)


def test_transactional_ids_name_prefix_writer_and_slot():
    assert transactional_id("job", 2, 1) == "job-2-1"
    assert ids_to_fence("job", [1, 0, 1], 2) == ["job-0-0", "job-0-1", "job-1-0", "job-1-1"]
    with pytest.raises(ValueError, match="pool size"):
        ids_to_fence("job", [0], 0)


@pytest.mark.parametrize(("old", "new"), [(3, 2), (2, 3), (4, 1), (3, 3)])
def test_after_a_rescale_every_old_writer_index_is_fenced_by_exactly_one_subtask(old, new):
    restored = range(old)
    fenced = [taken_over_indexes(i, new, restored) for i in range(new)]
    flat = sorted(k for part in fenced for k in part)
    assert flat == sorted(set(range(old)) | set(range(new)))
    assert all(writer_subtask(k, new) == i for i, part in enumerate(fenced) for k in part)
