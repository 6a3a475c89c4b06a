"""Partitioners route whole batches: `bind(channels, max_parallelism)` returns
`route(records, buffers)`, which appends each record to the buffer of its channel."""

from __future__ import annotations

import collections
import pickle

import cloudpickle
import pytest

from tidegate.runtime.partitioners import (
    BroadcastPartitioner,
    ForwardPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    ShufflePartitioner,
)
from tidegate.state.keygroups import (
    assign_to_key_group,
    key_group_range,
    subtask_for_key_group,
)


def route_batches(partitioner, channels: int, batches, max_parallelism: int = 128):
    route = partitioner.bind(channels, max_parallelism)
    buffers: list[list] = [[] for _ in range(channels)]
    for batch in batches:
        route(list(batch), buffers)
    return buffers


# forward -----------------------------------------------------------------------------------
def test_forward_sends_everything_to_its_single_channel_in_order():
    assert ForwardPartitioner.pointwise
    buffers = route_batches(ForwardPartitioner(), 1, [[1, 2, 3], [4], []])
    assert buffers == [[1, 2, 3, 4]]


# rebalance ---------------------------------------------------------------------------------
def test_rebalance_is_all_to_all():
    assert not RebalancePartitioner.pointwise


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 7])
def test_rebalance_sends_every_record_exactly_once_keeping_per_channel_order(channels):
    records = list(range(1000))
    buffers = route_batches(RebalancePartitioner(), channels, [records[:333], records[333:]])
    assert sorted(r for b in buffers for r in b) == records
    for b in buffers:
        assert b == sorted(b)


@pytest.mark.parametrize("channels", [2, 3, 5])
def test_rebalance_round_robin_is_even_within_one_batch(channels):
    buffers = route_batches(RebalancePartitioner(), channels, [list(range(channels * 40))])
    assert [len(b) for b in buffers] == [40] * channels


@pytest.mark.parametrize("channels", [2, 3, 4])
def test_rebalance_spreads_evenly_across_many_small_batches(channels):
    # Batches of one record (or fewer records than channels) must not all go to one channel:
    # the round-robin position carries over from batch to batch.
    for size in (1, 2, channels - 1 or 1, channels + 1):
        buffers = route_batches(RebalancePartitioner(), channels, [[0] * size] * (channels * 30))
        counts = [len(b) for b in buffers]
        assert max(counts) - min(counts) <= 1, (size, counts)


def test_rebalance_is_strict_round_robin_over_the_whole_stream():
    route = RebalancePartitioner().bind(3, 128)
    buffers: list[list] = [[], [], []]
    for batch in ([0, 1], [2], [3, 4, 5, 6], [7]):
        route(batch, buffers)
    # whatever channel it started on, record i went to channel (start + i) % 3
    start = next(c for c, b in enumerate(buffers) if 0 in b)
    for c, b in enumerate(buffers):
        assert b == [i for i in range(8) if (start + i) % 3 == c]


def test_rebalance_writers_start_on_different_channels():
    # Each upstream subtask binds its own router; a random start avoids all of them hitting
    # channel 0 first (Flink does the same).
    starts = set()
    for _ in range(200):
        buffers = route_batches(RebalancePartitioner(), 4, [[1]])
        starts.add(next(c for c, b in enumerate(buffers) if b))
    assert starts == {0, 1, 2, 3}


def test_rebalance_with_an_empty_batch_routes_nothing():
    assert route_batches(RebalancePartitioner(), 3, [[]]) == [[], [], []]


# shuffle -----------------------------------------------------------------------------------
def test_shuffle_sends_every_record_exactly_once_to_random_channels():
    records = list(range(4000))
    buffers = route_batches(ShufflePartitioner(), 4, [records[:1000], records[1000:]])
    assert sorted(r for b in buffers for r in b) == records
    for b in buffers:
        assert b == sorted(b)  # order is kept within a channel
        assert 800 < len(b) < 1200  # random but not degenerate (p of failing is negligible)


def test_shuffle_to_one_channel_sends_everything_there():
    assert route_batches(ShufflePartitioner(), 1, [[1, 2], [3]]) == [[1, 2, 3]]


# broadcast ---------------------------------------------------------------------------------
@pytest.mark.parametrize("channels", [1, 2, 5])
def test_broadcast_sends_every_record_to_every_channel(channels):
    buffers = route_batches(BroadcastPartitioner(), channels, [[1, 2], [3]])
    assert buffers == [[1, 2, 3]] * channels


# key groups --------------------------------------------------------------------------------
def key_of(record):
    return record[0]


@pytest.mark.parametrize(
    ("channels", "max_parallelism"), [(1, 128), (2, 128), (3, 128), (4, 13), (5, 256), (3, 7)]
)
def test_key_group_partitioner_agrees_with_subtask_for_key_group(channels, max_parallelism):
    keys = [f"user-{i}" for i in range(300)] + list(range(300)) + [(i, "x") for i in range(50)]
    records = [(k, n) for n, k in enumerate(keys)]
    buffers = route_batches(
        KeyGroupStreamPartitioner(key_of), channels, [records[:100], records[100:]], max_parallelism
    )
    for channel, buffer in enumerate(buffers):
        for key, _ in buffer:
            kg = assign_to_key_group(key, max_parallelism)
            assert subtask_for_key_group(kg, channels, max_parallelism) == channel
            assert kg in key_group_range(channel, channels, max_parallelism)
    assert sorted(n for b in buffers for _, n in b) == list(range(len(records)))


def test_key_group_partitioner_sends_one_key_always_to_one_channel():
    records = [(k, i) for i in range(50) for k in ("a", "b")]
    buffers = route_batches(KeyGroupStreamPartitioner(key_of), 4, [records[:37], records[37:]])
    for key in ("a", "b"):
        holders = [c for c, b in enumerate(buffers) if any(k == key for k, _ in b)]
        assert len(holders) == 1
        assert [n for k, n in buffers[holders[0]] if k == key] == list(range(50))


def test_key_group_partitioner_uses_every_channel_for_many_keys():
    records = [(i, i) for i in range(2000)]
    buffers = route_batches(KeyGroupStreamPartitioner(key_of), 4, [records])
    assert all(len(b) > 300 for b in buffers), [len(b) for b in buffers]


def test_a_bound_key_group_partitioner_is_independent_of_pythons_hash_seed():
    # The expected channels are computed from the documented formula (DESIGN §6), so they are
    # the same in every process, whatever PYTHONHASHSEED is.
    keys = ["alpha", "beta", 42, (1, "x"), None, 3.5, b"raw"]
    buffers = route_batches(KeyGroupStreamPartitioner(lambda r: r), 3, [keys])
    for channel, buffer in enumerate(buffers):
        for key in buffer:
            assert assign_to_key_group(key, 128) * 3 // 128 == channel


# shipping ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "partitioner",
    [
        ForwardPartitioner(),
        RebalancePartitioner(),
        ShufflePartitioner(),
        BroadcastPartitioner(),
        KeyGroupStreamPartitioner(lambda r: r % 3),
    ],
)
def test_partitioners_survive_the_trip_to_the_slots(partitioner):
    # The job graph (with its partitioners) is cloudpickled into the deployment.
    copy = pickle.loads(cloudpickle.dumps(partitioner))
    assert type(copy) is type(partitioner)
    buffers = route_batches(copy, 1 if copy.pointwise else 2, [[1, 2, 3]])
    assert sum(len(b) for b in buffers) >= 3


def test_only_forward_is_pointwise():
    kinds = [RebalancePartitioner, ShufflePartitioner, BroadcastPartitioner]
    assert ForwardPartitioner.pointwise
    assert not any(k.pointwise for k in kinds)
    assert not KeyGroupStreamPartitioner(key_of).pointwise


def test_routing_counts_add_up_for_every_partitioner():
    records = list(range(97))
    counts = collections.Counter()
    for name, p, ch in [
        ("rebalance", RebalancePartitioner(), 3),
        ("shuffle", ShufflePartitioner(), 3),
        ("key", KeyGroupStreamPartitioner(lambda r: r), 3),
        ("broadcast", BroadcastPartitioner(), 3),
    ]:
        counts[name] = sum(len(b) for b in route_batches(p, ch, [records]))
    assert counts == {"rebalance": 97, "shuffle": 97, "key": 97, "broadcast": 97 * 3}
