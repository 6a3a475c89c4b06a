"""The DataStream API, with PyFlink's names and import paths."""

from tidegate.datastream.checkpoint_config import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from tidegate.datastream.checkpoint_storage import FileSystemCheckpointStorage
from tidegate.datastream.checkpointing_mode import CheckpointingMode
from tidegate.datastream.connected_streams import ConnectedStreams, IntervalJoin, IntervalJoined
from tidegate.datastream.data_stream import (
    BroadcastConnectedStream,
    BroadcastStream,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from tidegate.datastream.execution_mode import RuntimeExecutionMode
from tidegate.datastream.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ProcessJoinFunction,
    ReduceFunction,
    RuntimeContext,
)
from tidegate.datastream.join import CoGroupedStreams, CoGroupFunction, JoinedStreams, JoinFunction
from tidegate.datastream.output_tag import OutputTag
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from tidegate.datastream.stream_execution_environment import StreamExecutionEnvironment
from tidegate.datastream.time_domain import TimeDomain
from tidegate.datastream.timerservice import TimerService
from tidegate.datastream.window_functions import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from tidegate.datastream.windowed_stream import AllWindowedStream, WindowedStream

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AllWindowedStream",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CheckpointConfig",
    "CheckpointListener",
    "CheckpointedFunction",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoGroupFunction",
    "CoGroupedStreams",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "EmbeddedRocksDBStateBackend",
    "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention",
    "FileSystemCheckpointStorage",
    "FilterFunction",
    "FlatMapFunction",
    "HashMapStateBackend",
    "IntervalJoin",
    "IntervalJoined",
    "JoinFunction",
    "JoinedStreams",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "Partitioner",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessJoinFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "StreamExecutionEnvironment",
    "TimeDomain",
    "TimerService",
    "WindowFunction",
    "WindowedStream",
]
