"""The DataStream API, with PyFlink's names and import paths."""

from tidegate.datastream.checkpoint_config import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from tidegate.datastream.checkpoint_storage import FileSystemCheckpointStorage
from tidegate.datastream.checkpointing_mode import CheckpointingMode
from tidegate.datastream.data_stream import (
    BroadcastConnectedStream,
    BroadcastStream,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from tidegate.datastream.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from tidegate.datastream.join import CoGroupedStreams, CoGroupFunction, JoinedStreams, JoinFunction
from tidegate.datastream.output_tag import OutputTag
from tidegate.datastream.state_backend import HashMapStateBackend
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
    "CoGroupFunction",
    "CoGroupedStreams",
    "DataStream",
    "DataStreamSink",
    "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention",
    "FileSystemCheckpointStorage",
    "FilterFunction",
    "FlatMapFunction",
    "HashMapStateBackend",
    "JoinFunction",
    "JoinedStreams",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "StreamExecutionEnvironment",
    "TimeDomain",
    "TimerService",
    "WindowFunction",
    "WindowedStream",
]
