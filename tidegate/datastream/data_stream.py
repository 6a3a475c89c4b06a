"""DataStream, KeyedStream and DataStreamSink with PyFlink's method names."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tidegate.common.typeinfo import TypeInformation, Types, as_type_info
from tidegate.connectors.base import Sink, TypedSink
from tidegate.connectors.print_sink import PrintSink
from tidegate.datastream import event_time
from tidegate.datastream.aggregations import Aggregation, FieldAggregation
from tidegate.datastream.broadcast_stream import BroadcastConnectedStream, BroadcastStream
from tidegate.datastream.connected_streams import ConnectedStreams, IntervalJoin
from tidegate.datastream.core_functions import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
)
from tidegate.datastream.core_functions import (
    Partitioner as UserPartitioner,
)
from tidegate.graph.stream_graph import Transformation
from tidegate.runtime.connector_operators import SinkOperator
from tidegate.runtime.operators import (
    FilterOperator,
    FlatMapOperator,
    KeyedReduceOperator,
    MapOperator,
    ProcessOperator,
    SideOutputOperator,
)
from tidegate.runtime.partitioners import (
    BroadcastPartitioner,
    CustomPartitioner,
    ForwardPartitioner,
    KeyGroupStreamPartitioner,
    Partitioner,
    RebalancePartitioner,
    ShufflePartitioner,
)

if TYPE_CHECKING:
    from tidegate.datastream.stream_execution_environment import StreamExecutionEnvironment


def _callable(func: Any, cls: type, method: str, what: str):
    """(function object for open/close hooks, the per-record callable)."""
    if isinstance(func, cls):
        return func, getattr(func, method)
    if callable(func):
        return None, func
    raise TypeError(f"{what} expects a {cls.__name__} or a callable, got {type(func).__name__}")


class DataStream:
    """A stream of records; `inputs` are the upstream transformations with the partitioner the
    next operator reads them with (several after `union`)."""

    def __init__(
        self,
        env: StreamExecutionEnvironment,
        inputs: list[tuple[Transformation, Partitioner | None]],
    ) -> None:
        self._env = env
        self._inputs = inputs

    # the transformation this stream is the output of (for name/uid/parallelism) ----------------
    @property
    def _transformation(self) -> Transformation:
        if len(self._inputs) != 1 or self._inputs[0][1] is not None:
            raise ValueError(
                "set_parallelism/uid/name apply to an operator; this stream is a union or a "
                "repartitioning (rebalance/shuffle/broadcast/forward/key_by) of one"
            )
        return self._inputs[0][0]

    def name(self, name: str) -> DataStream:
        self._transformation.name = name
        return self

    def get_execution_environment(self) -> Any:
        """The StreamExecutionEnvironment this stream belongs to."""
        return self._env

    def get_execution_config(self) -> Any:
        """The environment's ExecutionConfig (`env.get_config()`)."""
        return self._env.get_config()

    def get_name(self) -> str:
        return self._transformation.name

    def uid(self, uid: str) -> DataStream:
        """A stable id for this operator's state: give every stateful operator one, so a
        checkpoint or savepoint maps onto a changed job."""
        self._transformation.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        if int(parallelism) < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        t = self._transformation
        if t.kind == "source" and getattr(t, "non_parallel", False) and parallelism != 1:
            raise ValueError(f"{t.name} is a non-parallel source; its parallelism must be 1")
        t.parallelism = int(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._transformation.parallelism or self._env.get_parallelism()

    def get_type(self) -> TypeInformation:
        """The declared type of this stream's records (PICKLED_BYTE_ARRAY if none was
        declared, as in PyFlink): it decides how `print()` writes them."""
        return self._declared_type() or Types.PICKLED_BYTE_ARRAY()

    def _declared_type(self) -> TypeInformation | None:
        """The type the operator this stream reads declared (the first input's after a
        union), None if it declared none."""
        return self._inputs[0][0].output_type

    def disable_chaining(self) -> DataStream:
        self._transformation.chaining = False
        return self

    def start_new_chain(self) -> DataStream:
        self._transformation.start_new_chain = True
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> DataStream:
        """Accepted for PyFlink compatibility: every slot shares all vertices in tidegate."""
        return self

    # operators ---------------------------------------------------------------------------------
    def _add(
        self,
        kind: str,
        name: str,
        make_operator,
        *,
        keyed: bool = False,
        inputs=None,
        input_indices: tuple[int, ...] = (),
        output_type: TypeInformation | None = None,
        connector: Any = None,
    ) -> DataStream:
        """The output of a new operator reading `inputs` (default: this stream) that emits
        records of `output_type` (None: undeclared); a sink's `connector` is handed to
        `make_operator` when the job is built. The modules of the other stream types
        (connected, broadcast, windowed ...) add their operators through this method of a
        stream they hold, so that they never import this module."""
        t = self._env._stream_graph.add(
            kind=kind,
            name=name,
            make_operator=make_operator,
            inputs=list(inputs if inputs is not None else self._inputs),
            keyed=keyed,
            input_indices=input_indices,
            output_type=output_type,
            connector=connector,
        )
        return DataStream(self._env, [(t, None)])

    def _key_selector(self):
        return None

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        fn, call = _callable(func, MapFunction, "map", "map")
        sel = self._key_selector()
        op = partial(MapOperator, fn, call, sel)
        out = as_type_info(output_type, "map(output_type=...)")
        return self._add("map", "Map", op, keyed=sel is not None, output_type=out)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        fn, call = _callable(func, FlatMapFunction, "flat_map", "flat_map")
        sel = self._key_selector()
        op = partial(FlatMapOperator, fn, call, sel)
        out = as_type_info(output_type, "flat_map(output_type=...)")
        return self._add("flat_map", "FlatMap", op, keyed=sel is not None, output_type=out)

    def filter(self, func: Any) -> DataStream:
        fn, call = _callable(func, FilterFunction, "filter", "filter")
        sel = self._key_selector()
        op = partial(FilterOperator, fn, call, sel)
        out = self._declared_type()  # the records are the input's
        return self._add("filter", "Filter", op, keyed=sel is not None, output_type=out)

    def process(self, func: ProcessFunction, output_type: Any = None) -> DataStream:
        if not isinstance(func, ProcessFunction | KeyedProcessFunction):
            raise TypeError("process() expects a ProcessFunction or KeyedProcessFunction")
        if isinstance(func, KeyedProcessFunction) and self._key_selector() is None:
            raise TypeError("a KeyedProcessFunction needs a KeyedStream: call key_by(...) first")
        sel = self._key_selector()
        op = partial(ProcessOperator, func, func.process_element, sel)
        out = as_type_info(output_type, "process(output_type=...)")
        return self._add("process", "Process", op, keyed=sel is not None, output_type=out)

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> DataStream:
        """Give each record an event-time timestamp and generate watermarks from here on
        (upstream watermarks are dropped); see tidegate.common.WatermarkStrategy."""
        return event_time.assign_timestamps_and_watermarks(self, watermark_strategy)

    def get_side_output(self, output_tag: Any) -> DataStream:
        """The side output `output_tag` of this operator (`ctx.output(tag, value)`)."""
        return event_time.get_side_output(self, output_tag, SideOutputOperator)

    def window_all(self, window_assigner: Any) -> Any:
        """Windows over the whole stream (one subtask): an AllWindowedStream."""
        from tidegate.datastream.windowed_stream import AllWindowedStream

        return AllWindowedStream(self, window_assigner)

    def join(self, other: DataStream) -> Any:
        """A window join with `other`: `.where(k1).equal_to(k2).window(a).apply(f)`."""
        from tidegate.datastream.join import JoinedStreams

        return JoinedStreams(self, other)

    def co_group(self, other: DataStream) -> Any:
        """A window coGroup with `other`: `.where(k1).equal_to(k2).window(a).apply(f)`."""
        from tidegate.datastream.join import CoGroupedStreams

        return CoGroupedStreams(self, other)

    def key_by(self, key_selector: Any, key_type: Any = None) -> KeyedStream:
        _fn, select = _callable(key_selector, KeySelector, "get_key", "key_by")
        as_type_info(key_type, "key_by(key_type=...)")
        return KeyedStream(self._env, self._plain_inputs(), select)

    def union(self, *streams: DataStream) -> DataStream:
        inputs = list(self._inputs)
        for s in streams:
            inputs.extend(s._inputs)
        return DataStream(self._env, inputs)

    def _plain_inputs(self) -> list[tuple[Transformation, Partitioner | None]]:
        return list(self._inputs)

    def _repartition(self, partitioner: Partitioner) -> DataStream:
        return DataStream(self._env, [(t, partitioner) for t, _ in self._inputs])

    def rebalance(self) -> DataStream:
        return self._repartition(RebalancePartitioner())

    def shuffle(self) -> DataStream:
        return self._repartition(ShufflePartitioner())

    def broadcast(
        self, broadcast_state_descriptor: Any = None, *other_broadcast_state_descriptors: Any
    ) -> DataStream | BroadcastStream:
        """Every record to every downstream subtask; with MapStateDescriptors, a
        BroadcastStream to `connect` to, whose operator keeps those broadcast states."""
        stream = self._repartition(BroadcastPartitioner())
        if broadcast_state_descriptor is None:
            return stream
        descriptors = (broadcast_state_descriptor, *other_broadcast_state_descriptors)
        return BroadcastStream(self._env, stream._inputs, descriptors)

    def connect(self, ds: Any) -> Any:
        """Connect a BroadcastStream (from `broadcast(descriptor)`): a
        BroadcastConnectedStream; or another DataStream: ConnectedStreams, to process both
        with one two-input operator (CoMap/CoFlatMap/Co(Keyed)ProcessFunction)."""
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if not isinstance(ds, DataStream):
            raise TypeError(
                "connect() takes a DataStream, a KeyedStream or a BroadcastStream (from "
                f"DataStream.broadcast(descriptor)), got {type(ds).__name__}"
            )
        return ConnectedStreams(self, ds)

    def forward(self) -> DataStream:
        return self._repartition(ForwardPartitioner())

    def rescale(self) -> DataStream:
        """Round-robin to the downstream subtasks. Flink sends each upstream subtask's records
        only to a local subset of them; tidegate's slots all exchange data over the network,
        so this is `rebalance()`."""
        return self._repartition(RebalancePartitioner())

    def partition_custom(self, partitioner: Any, key_selector: Any) -> DataStream:
        """Each record to the downstream subtask `partitioner.partition(key, n)` picks, `key`
        being `key_selector`'s (a Partitioner or function; a KeySelector or function)."""
        _fn, partition = _callable(partitioner, UserPartitioner, "partition", "partition_custom")
        _fn, select = _callable(key_selector, KeySelector, "get_key", "partition_custom")
        return self._repartition(CustomPartitioner(partition, select))

    # sinks -------------------------------------------------------------------------------------
    def sink_to(self, sink: Sink) -> DataStreamSink:
        if not isinstance(sink, Sink):
            raise TypeError(
                f"sink_to expects a Sink (e.g. FileSink.for_row_format(...).build()), "
                f"got {type(sink).__name__}"
            )
        if isinstance(sink, TypedSink):
            types = {t.output_type for t, _ in self._inputs}
            sink = sink.for_input_type(types.pop() if len(types) == 1 else None)
        t = self._add("sink", f"Sink: {type(sink).__name__}", SinkOperator, connector=sink)
        return DataStreamSink(t)

    def add_sink(self, sink_func: Sink) -> DataStreamSink:
        """PyFlink's way to add a sink function: here a tidegate Sink (e.g. a JdbcSink),
        added as by `sink_to`; PyFlink's Java-backed SinkFunctions do not exist."""
        if not isinstance(sink_func, Sink):
            raise TypeError(
                "add_sink expects a tidegate Sink (e.g. JdbcSink.sink(...)); PyFlink's other "
                f"SinkFunctions wrap Java sinks: use sink_to() with a Sink, got "
                f"{type(sink_func).__name__}"
            )
        return self.sink_to(sink_func)

    def execute_and_collect(
        self, job_execution_name: str | None = None, limit: int | None = None
    ) -> Any:
        """Run the job and return this stream's records to the driver, exactly once: with a
        `limit`, a list of at most that many (the job is cancelled when they are there);
        without, a CloseableIterator over all of them (datastream/collect.py)."""
        from tidegate.datastream.collect import execute_and_collect

        return execute_and_collect(self, job_execution_name, limit)

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """Write every record to the driver's stdout as PyFlink prints it: as Flink's Java
        `toString` of the stream's declared type (`(hi,0,5,4)` for a Tuple), `+I[hi,0,5,4]`
        for a Row, `str(record)` if no type was declared."""
        types = {t.output_type for t, _ in self._inputs}
        if len(types) > 1:
            raise ValueError(
                "print() of a union of streams of different declared types "
                f"{sorted(map(repr, types))}: Flink unions streams of one type; declare the same "
                "output_type on each"
            )
        declared_by = self._inputs[0][0].name
        sink = PrintSink(sink_identifier, type_info=self._declared_type(), declared_by=declared_by)
        t = self._add("sink", "Sink: Print to Std. Out", SinkOperator, connector=sink)
        return DataStreamSink(t)


class KeyedStream(DataStream):
    """A stream partitioned by key: operators on it may use keyed state, scoped to each key."""

    def __init__(self, env, inputs, key_selector) -> None:
        super().__init__(env, [(t, KeyGroupStreamPartitioner(key_selector)) for t, _ in inputs])
        self._selector = key_selector

    def _key_selector(self):
        return self._selector

    def reduce(self, func: Any) -> DataStream:
        fn, call = _callable(func, ReduceFunction, "reduce", "reduce")
        out = self._declared_type()  # the reduced records are the input's
        op = partial(KeyedReduceOperator, fn, call, self._selector, state_type=out)
        return self._add("reduce", "Keyed Reduce", op, keyed=True, output_type=out)

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        """Rolling sum of a field per key (datastream/aggregations.py)."""
        return self._aggregate(Aggregation.SUM, position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        """Rolling minimum of a field per key; the other fields are the key's first record's."""
        return self._aggregate(Aggregation.MIN, position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        """Rolling maximum of a field per key; the other fields are the key's first record's."""
        return self._aggregate(Aggregation.MAX, position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        """Per key, the record with the smallest field so far (the first one on ties)."""
        return self._aggregate(Aggregation.MIN_BY, position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        """Per key, the record with the largest field so far (the first one on ties)."""
        return self._aggregate(Aggregation.MAX_BY, position_to_max_by)

    def _aggregate(self, aggregation: Aggregation, position: int | str) -> DataStream:
        stream = self.reduce(FieldAggregation(aggregation, position))
        return stream.name(f"Keyed {aggregation.value.replace('_', ' ').title()}")

    def window(self, window_assigner: Any) -> Any:
        """Windows per key (e.g. TumblingEventTimeWindows.of(...)): a WindowedStream."""
        from tidegate.datastream.windowed_stream import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> Any:
        """Windows of `size` elements per key, every `slide` elements (0: tumbling)."""
        from tidegate.datastream.windowed_stream import count_window

        return count_window(self, size, slide)

    def interval_join(self, other_keyed_stream: KeyedStream) -> Any:
        """Flink's interval join (event time): `.between(lower, upper).process(f)`."""
        return IntervalJoin(self, other_keyed_stream)

    def _plain_inputs(self):
        return [(t, None) for t, _ in self._inputs]

    def _repartition(self, partitioner: Partitioner) -> DataStream:
        raise TypeError("a KeyedStream cannot be repartitioned; repartition before key_by")

    def union(self, *streams: DataStream) -> DataStream:
        raise TypeError("union() a KeyedStream's input streams, then key_by the union")


class DataStreamSink:
    def __init__(self, stream: DataStream) -> None:
        self._stream = stream

    def name(self, name: str) -> DataStreamSink:
        self._stream.name(name)
        return self

    def uid(self, uid: str) -> DataStreamSink:
        self._stream.uid(uid)
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        self._stream.set_parallelism(parallelism)
        return self

    def disable_chaining(self) -> DataStreamSink:
        self._stream.disable_chaining()
        return self
