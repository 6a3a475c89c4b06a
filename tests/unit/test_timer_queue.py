"""runtime/timer_queue.py: the order a heap of (timestamp, sequence, key) gives, by buckets."""

from __future__ import annotations

import heapq
import itertools
import random
import sys

import pytest

from tidegate.runtime.timer_queue import TimerQueue


def queue_of(entries) -> TimerQueue:
    q = TimerQueue()
    for timestamp, key in entries:
        q.push(timestamp, key)
    return q


def test_timestamps_ascending_and_registration_order_within_one():
    q = queue_of([(20, "a"), (10, "b"), (20, "c"), (10, "d"), (5, "e")])
    assert len(q) == 5 and q.first() == (5, "e")
    assert [q.pop() for _ in range(5)] == [(5, "e"), (10, "b"), (10, "d"), (20, "a"), (20, "c")]
    assert len(q) == 0 and q.first() is None and not q.buckets and not q.times
    with pytest.raises(IndexError):
        q.pop()


def test_pop_until_yields_whole_due_buckets_and_leaves_the_rest():
    q = queue_of([(3, "x"), (1, "a"), (1, "b"), (2, "c"), (4, "y")])
    assert [(t, list(b)) for t, b in q.pop_until(3)] == [(1, ["a", "b"]), (2, ["c"]), (3, ["x"])]
    assert len(q) == 1 and q.pop() == (4, "y")
    assert list(q.pop_until(100)) == []


def test_entries_pushed_while_popping_fire_in_heap_order():
    """A timer registered while due ones fire: at its timestamp after those queued before it,
    or before the bucket being popped when earlier."""
    q = queue_of([(10, "a"), (10, "b"), (20, "c")])
    assert q.pop() == (10, "a")
    q.push(10, "late-same")
    q.push(7, "earlier")
    assert [q.pop() for _ in range(4)] == [(7, "earlier"), (10, "b"), (10, "late-same"), (20, "c")]
    assert not q.positions and not q.buckets


def test_a_bucket_popped_in_part_keeps_its_place_for_pop_until_and_retain():
    q = queue_of([(1, "a"), (1, "b"), (1, "c"), (1, "d"), (2, "e")])
    assert q.pop() == (1, "a") and q.first() == (1, "b") and q.positions == {1: 1}
    q.retain(lambda t, k: k != "c")
    assert q.first() == (1, "b") and len(q) == 3 and not q.positions
    assert q.pop() == (1, "b")
    assert [(t, list(b)) for t, b in q.pop_until(5)] == [(1, ["d"]), (2, ["e"])]
    assert len(q) == 0 and not q.positions


def test_a_timer_per_distinct_timestamp_costs_a_small_list_not_a_deque():
    q = queue_of((t, t) for t in range(1000))
    assert all(type(b) is list and sys.getsizeof(b) <= 72 for b in q.buckets.values())


def test_retain_drops_entries_and_keeps_the_order():
    q = queue_of([(1, "a"), (2, "b"), (1, "c"), (3, "d"), (2, "e")])
    q.retain(lambda t, k: k not in ("a", "e", "d"))
    assert len(q) == 2 and 3 not in q.buckets
    assert [q.pop() for _ in range(2)] == [(1, "c"), (2, "b")]


def test_random_scripts_pop_what_a_sequenced_heap_pops():
    rng = random.Random(7)
    for _ in range(200):
        q, heap, seq = TimerQueue(), [], itertools.count()
        for _ in range(rng.randrange(1, 200)):
            if heap and rng.random() < 0.35:
                expected = heapq.heappop(heap)
                assert q.pop() == (expected[0], expected[2])
            else:
                t, key = rng.randrange(0, 20), rng.randrange(1000)
                q.push(t, key)
                heapq.heappush(heap, (t, next(seq), key))
            assert len(q) == len(heap)
            assert q.first() == ((heap[0][0], heap[0][2]) if heap else None)
        limit = rng.randrange(0, 25)
        popped = [(t, k) for t, bucket in q.pop_until(limit) for k in bucket]
        expected = []
        while heap and heap[0][0] <= limit:
            t, _, k = heapq.heappop(heap)
            expected.append((t, k))
        assert popped == expected and len(q) == len(heap)
