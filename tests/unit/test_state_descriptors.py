"""State descriptors and interfaces keep PyFlink's names; the heap states implement them."""

from __future__ import annotations

import pytest

from tidegate.common.typeinfo import Types
from tidegate.datastream.functions import AggregateFunction, ReduceFunction
from tidegate.state.descriptors import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from tidegate.state.heap import HeapKeyedStateBackend


class Sum(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


def test_descriptors_take_pyflink_positional_arguments_and_keep_type_hints():
    value = ValueStateDescriptor("count", Types.LONG())
    listed = ListStateDescriptor("seen", Types.STRING())
    mapped = MapStateDescriptor("by_id", Types.STRING(), Types.INT())
    reducing = ReducingStateDescriptor("sum", Sum(), Types.LONG())
    aggregating = AggregatingStateDescriptor("avg", Average(), Types.TUPLE([Types.LONG()]))

    assert value.name == value.get_name() == "count"
    assert value.type_info == Types.LONG()
    assert listed.type_info == Types.STRING()
    assert (mapped.key_type_info, mapped.value_type_info) == (Types.STRING(), Types.INT())
    assert isinstance(reducing.get_reduce_function(), Sum)
    assert isinstance(aggregating.get_agg_function(), Average)


def test_type_information_is_optional_and_may_be_anything():
    assert ValueStateDescriptor("v").type_info is None
    assert ListStateDescriptor("l", elem_type_info=int).type_info is int


def test_an_empty_state_name_is_rejected():
    with pytest.raises(ValueError, match="non-empty string"):
        ValueStateDescriptor("")


def test_a_reduce_function_must_be_callable_or_have_reduce():
    ReducingStateDescriptor("plain", lambda a, b: a + b)
    with pytest.raises(TypeError, match="reduce_function"):
        ReducingStateDescriptor("bad", 42)


def test_an_aggregate_function_must_have_the_aggregate_function_methods():
    with pytest.raises(TypeError, match="lacks create_accumulator, add, get_result"):
        AggregatingStateDescriptor("bad", object())


def test_descriptors_are_immutable_values():
    descriptor = ValueStateDescriptor("count")
    assert descriptor == ValueStateDescriptor("count")
    with pytest.raises(AttributeError):
        descriptor.name = "other"  # type: ignore[misc]


def test_heap_states_satisfy_the_public_state_interfaces():
    backend = HeapKeyedStateBackend(128, range(128))
    assert isinstance(backend.get_state(ValueStateDescriptor("v")), ValueState)
    assert isinstance(backend.get_list_state(ListStateDescriptor("l")), ListState)
    assert isinstance(backend.get_map_state(MapStateDescriptor("m")), MapState)
    reducing = backend.get_reducing_state(ReducingStateDescriptor("r", Sum()))
    assert isinstance(reducing, ReducingState)
    aggregating = backend.get_aggregating_state(AggregatingStateDescriptor("a", Average()))
    assert isinstance(aggregating, AggregatingState)
    assert not isinstance(backend.get_state(ValueStateDescriptor("v")), ListState)
