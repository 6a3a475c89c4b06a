"""KeyedStream's field aggregations (datastream/aggregations.py) with Flink's semantics, and the
custom partitioner's routing (runtime/partitioners.py)."""

from __future__ import annotations

import collections
import functools

import pytest

from tidegate.datastream.aggregations import Aggregation, FieldAggregation
from tidegate.runtime.partitioners import CustomPartitioner
from tidegate.runtime.records import TimestampedBatch

RECORDS = [("a", 3, "first"), ("a", 1, "second"), ("a", 5, "third"), ("a", 1, "fourth")]


def _rolling(aggregation: Aggregation, position, records):
    f = FieldAggregation(aggregation, position)
    out, acc = [], None
    for r in records:
        acc = r if acc is None else f.reduce(acc, r)
        out.append(acc)
    return out


def test_sum_adds_the_field_and_keeps_the_first_records_other_fields():
    assert _rolling(Aggregation.SUM, 1, RECORDS)[-1] == ("a", 10, "first")


def test_min_and_max_keep_the_extreme_value_in_the_first_record_as_flink_does():
    assert _rolling(Aggregation.MIN, 1, RECORDS) == [
        ("a", 3, "first"),
        ("a", 1, "first"),
        ("a", 1, "first"),
        ("a", 1, "first"),
    ]
    assert _rolling(Aggregation.MAX, 1, RECORDS)[-1] == ("a", 5, "first")


def test_min_by_and_max_by_keep_the_whole_record_and_the_first_one_on_ties():
    assert _rolling(Aggregation.MIN_BY, 1, RECORDS)[-1] == ("a", 1, "second")
    assert _rolling(Aggregation.MAX_BY, 1, RECORDS)[-1] == ("a", 5, "third")


def test_lists_are_changed_in_place_and_named_tuples_keep_their_type():
    Point = collections.namedtuple("Point", "name value")
    assert _rolling(Aggregation.SUM, 1, [Point("p", 1), Point("p", 2)])[-1] == Point("p", 3)
    first = ["x", 1]
    assert _rolling(Aggregation.SUM, 1, [first, ["x", 4]])[-1] is first
    assert first == ["x", 5]


def test_basic_values_aggregate_as_a_whole_and_only_at_position_zero():
    assert _rolling(Aggregation.SUM, 0, [1, 2, 3]) == [1, 3, 6]
    assert _rolling(Aggregation.MAX_BY, 0, [2, 7, 4])[-1] == 7
    with pytest.raises(TypeError, match=r"only field 0, the value itself"):
        _rolling(Aggregation.SUM, 1, [1, 2])


def test_a_field_the_record_lacks_is_an_error_naming_it():
    with pytest.raises(TypeError, match=r"has no field 7"):
        _rolling(Aggregation.SUM, 7, RECORDS)
    with pytest.raises(TypeError, match=r"has no field 'count'"):
        _rolling(Aggregation.SUM, "count", RECORDS)
    with pytest.raises(TypeError, match=r"field position \(int\) or a field name"):
        FieldAggregation(Aggregation.MIN, 1.5)


def test_a_custom_partitioner_routes_values_and_timestamps_by_the_key():
    part = CustomPartitioner(lambda key, n: key % n, lambda r: r[0])
    buffers = [[], [], []]
    part.bind(3, 128)([(4, "a"), (5, "b"), (3, "c")], buffers)
    assert buffers == [[(3, "c")], [(4, "a")], [(5, "b")]]
    batch = TimestampedBatch([(1, "x"), (2, "y")], [10, 20])
    values, stamps = [[], [], []], [[], [], []]
    part.bind_timestamped(3, 128)(batch, batch.timestamps, values, stamps)
    assert (values, stamps) == ([[], [(1, "x")], [(2, "y")]], [[], [10], [20]])


@pytest.mark.parametrize("bad", [3, -1, "1", None])
def test_a_custom_partitioner_returning_no_valid_channel_fails_naming_the_key(bad):
    route = CustomPartitioner(functools.partial(lambda b, key, n: b, bad), lambda r: r).bind(3, 1)
    with pytest.raises(ValueError, match=r"for key 'k'; it must return an int in \[0, 3\)"):
        route(["k"], [[], [], []])
