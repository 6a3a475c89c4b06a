"""State descriptors and state interfaces, at PyFlink's import path
(`pyflink.datastream.state`). Defined in `tidegate.state.descriptors`
(and `tidegate.state.broadcast_state`)."""

from tidegate.state.broadcast_state import BroadcastState, ReadOnlyBroadcastState
from tidegate.state.descriptors import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from tidegate.state.ttl_config import StateTtlConfig

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]
