"""BroadcastStream and BroadcastConnectedStream (PyFlink's names; re-exported by
`tidegate.datastream.data_stream`).

`DataStream.broadcast(descriptor, ...)` gives a BroadcastStream: its records go to every
subtask of the operator it is connected to, which keeps them in broadcast state (one map state
per MapStateDescriptor). `DataStream.connect(broadcast_stream)` or
`KeyedStream.connect(broadcast_stream)` gives a BroadcastConnectedStream, and `.process(...)`
with a BroadcastProcessFunction (resp. KeyedBroadcastProcessFunction) adds the two-input
broadcast process operator (tidegate/runtime/broadcast.py).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tidegate.common.typeinfo import as_type_info
from tidegate.datastream.core_functions import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
)
from tidegate.runtime.broadcast import BroadcastProcessOperator
from tidegate.state.descriptors import MapStateDescriptor

if TYPE_CHECKING:
    from tidegate.datastream.data_stream import DataStream
    from tidegate.graph.stream_graph import Transformation
    from tidegate.runtime.partitioners import Partitioner

__all__ = ["BroadcastConnectedStream", "BroadcastStream"]


def _check_descriptors(descriptors: tuple[Any, ...]) -> tuple[MapStateDescriptor, ...]:
    names: set[str] = set()
    for d in descriptors:
        if not isinstance(d, MapStateDescriptor):
            raise TypeError(
                "broadcast(...) takes MapStateDescriptors (broadcast state is a map state), "
                f"got {type(d).__name__}"
            )
        if d.name in names:
            raise ValueError(f"broadcast state {d.name!r} is given twice to broadcast(...)")
        names.add(d.name)
    return tuple(descriptors)


class BroadcastStream:
    """A stream broadcast to every subtask of the operator it is connected to, with the
    broadcast states (MapStateDescriptors) that operator keeps."""

    def __init__(
        self,
        env: Any,
        inputs: list[tuple[Transformation, Partitioner | None]],
        descriptors: tuple[MapStateDescriptor, ...],
    ) -> None:
        self._env = env
        self._inputs = inputs
        self.broadcast_state_descriptors = _check_descriptors(descriptors)


class BroadcastConnectedStream:
    """A DataStream or KeyedStream connected to a BroadcastStream; `process` adds the
    operator that reads both."""

    def __init__(self, non_broadcast_stream: DataStream, broadcast_stream: BroadcastStream) -> None:
        if broadcast_stream._env is not non_broadcast_stream._env:
            raise ValueError("connect() streams of one StreamExecutionEnvironment")
        self.non_broadcast_stream = non_broadcast_stream
        self.broadcast_stream = broadcast_stream

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        stream, broadcast = self.non_broadcast_stream, self.broadcast_stream
        selector = stream._key_selector()
        if selector is not None and not isinstance(func, KeyedBroadcastProcessFunction):
            raise TypeError(
                "a KeyedStream connected to a BroadcastStream is processed by a "
                f"KeyedBroadcastProcessFunction, got {type(func).__name__}"
            )
        if selector is None and not isinstance(func, BroadcastProcessFunction):
            hint = (
                " (a KeyedBroadcastProcessFunction needs a KeyedStream: key_by(...) first)"
                if isinstance(func, KeyedBroadcastProcessFunction)
                else ""
            )
            raise TypeError(
                "a DataStream connected to a BroadcastStream is processed by a "
                f"BroadcastProcessFunction, got {type(func).__name__}{hint}"
            )
        first, second = list(stream._inputs), list(broadcast._inputs)
        op = partial(
            BroadcastProcessOperator, func, broadcast.broadcast_state_descriptors, selector
        )
        return stream._add(
            "broadcast_process",
            "Co-Process-Broadcast" + ("-Keyed" if selector is not None else ""),
            op,
            inputs=first + second,
            keyed=selector is not None,
            input_indices=(0,) * len(first) + (1,) * len(second),
            output_type=as_type_info(output_type, "process(output_type=...)"),
        )
