"""Reference computations the end-to-end tests compare committed output with, computed in plain
Python: the keyed running count (`key,value,count` per record, keys `value % NUM_KEYS`) and an
exact multiset comparison."""

from __future__ import annotations

import collections
from collections.abc import Iterable

from tidegate.connectors.number_seq import split_range

#: the running-count jobs key the values 0..n-1 by `value % NUM_KEYS`
NUM_KEYS = 13


def records_per_key(n: int) -> collections.Counter:
    """How many of the values 0..n-1 each key gets: the final running count of the key."""
    return collections.Counter(v % NUM_KEYS for v in range(n))


def check_exactly_once(lines: list[str], n: int, parallelism: int) -> None:
    """Committed running-count output (`key,value,count` lines) == the reference, record for
    record.

    Reference: every value 0..n-1 appears exactly once with its key; for each key the counts
    are exactly 1..n_k (each state update happened once); and the records a source subtask
    emitted for one key were counted in the order it emitted them (channels are FIFO).
    """
    by_key: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for line in lines:
        key, value, count = map(int, line.split(","))
        assert key == value % NUM_KEYS, line
        by_key[key].append((value, count))
    values = sorted(v for pairs in by_key.values() for v, _ in pairs)
    duplicated = len(values) - len(set(values))
    lost = n - len(set(values))
    assert (lost, duplicated) == (0, 0), f"{lost} lost, {duplicated} duplicated"
    assert values == list(range(n))
    splits = split_range(0, n - 1, parallelism)  # the source's splits (datagen plans these)
    for key, pairs in by_key.items():
        counts = sorted(c for _, c in pairs)
        assert counts == list(range(1, len(pairs) + 1)), f"key {key}: counts {counts[:20]}..."
        for low, high in splits:
            own = sorted((v, c) for v, c in pairs if low <= v <= high)
            assert [c for _, c in own] == sorted(c for _, c in own), f"key {key} out of order"


def same_records(got: list[str], expected: Iterable) -> None:
    """`got` holds exactly the records of `expected` (as strings), each as often, in any order;
    the message shows what is missing and what is extra."""
    have, want = collections.Counter(got), collections.Counter(str(e) for e in expected)
    missing = sorted((want - have).elements())[:10]
    extra = sorted((have - want).elements())[:10]
    assert have == want, (
        f"{have.total()} lines, expected {want.total()}; missing {missing}, extra {extra}"
    )


def check_counted_exactly_once(lines: list[str], splits: list[list[int]]) -> None:
    """Running-count output (`key,value,count` lines, keys `value % NUM_KEYS`) of a job whose
    source read the values of `splits` (each in its order, as the server holds them) equals
    the reference: every value exactly once, each key's counts exactly 1..n_k, and within one
    split each key's values counted in the split's order."""
    got: dict[int, int] = {}
    counts: dict[int, list[int]] = collections.defaultdict(list)
    duplicated = 0
    for line in lines:
        key, value, count = map(int, line.split(","))
        assert key == value % NUM_KEYS, line
        duplicated += value in got
        got[value] = count
        counts[key].append(count)
    expected = {v for split in splits for v in split}
    lost = len(expected - set(got))
    extra = sorted(set(got) - expected)[:10]
    assert (lost, duplicated, extra) == (0, 0, []), (
        f"{lost} lost, {duplicated} duplicated, extra {extra}"
    )
    for key, cs in counts.items():
        assert sorted(cs) == list(range(1, len(cs) + 1)), f"key {key}: counts {sorted(cs)[:20]}"
    for split in splits:
        for key in range(NUM_KEYS):
            ordered = [got[v] for v in split if v % NUM_KEYS == key]
            assert ordered == sorted(ordered), f"key {key} counted out of its split's order"


def check_consistent_prefix(lines: list[str]) -> None:
    """Running-count output of a job stopped midway: no value twice, and each key's counts
    exactly 1..m (what completed checkpoints committed, nothing partial)."""
    values = [int(line.split(",")[1]) for line in lines]
    assert len(values) == len(set(values)), "a value was committed twice"
    counts: dict[int, list[int]] = collections.defaultdict(list)
    for line in lines:
        key, _value, count = map(int, line.split(","))
        counts[key].append(count)
    for key, cs in counts.items():
        assert sorted(cs) == list(range(1, len(cs) + 1)), f"key {key}: counts {sorted(cs)[:20]}"
