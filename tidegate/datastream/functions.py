"""PyFlink's `pyflink.datastream.functions`: every user function class, gathered from the
modules that define them (core_functions, co_functions, join, window_functions)."""

from __future__ import annotations

from tidegate.datastream.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    ProcessJoinFunction,
)
from tidegate.datastream.core_functions import (
    AggregateFunction,
    BaseBroadcastProcessFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    FilterFunction,
    FlatMapFunction,
    Function,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from tidegate.datastream.join import (
    CoGroupFunction,
    JoinFunction,
)
from tidegate.datastream.window_functions import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "CheckpointListener",
    "CheckpointedFunction",
    "CoFlatMapFunction",
    "CoGroupFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "JoinFunction",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "MapFunction",
    "Partitioner",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessJoinFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "WindowFunction",
]
