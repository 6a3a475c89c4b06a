"""PyFlink's `pyflink.datastream.functions`: every user function class, gathered from the
modules that define them (core_functions, co_functions, join, window_functions,
async_function, async_retry_strategies)."""

from __future__ import annotations

from tidegate.datastream.async_function import AsyncFunction
from tidegate.datastream.async_retry_strategies import AsyncRetryPredicate, AsyncRetryStrategy
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
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
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
