"""The core user function classes with PyFlink's names and signatures: `Function`,
`RuntimeContext`, the one-input and broadcast process functions and the checkpoint hooks.
Users import them from `tidegate.datastream.functions` (PyFlink's module), which gathers these
and the co-, join and window functions.

Plain callables work everywhere a function class does (`ds.map(lambda x: x + 1)`); a class is
needed for `open(runtime_context)` (to create state) and `close()`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Protocol


class RuntimeContext(abc.ABC):
    """What a function sees of the subtask that runs it (PyFlink's method names)."""

    @abc.abstractmethod
    def get_task_name(self) -> str: ...

    @abc.abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abc.abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abc.abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abc.abstractmethod
    def get_attempt_number(self) -> int: ...

    @abc.abstractmethod
    def get_job_parameter(self, key: str, default_value: str | None) -> str | None: ...

    def get_task_name_with_subtasks(self) -> str:
        return (
            f"{self.get_task_name()} ({self.get_index_of_this_subtask() + 1}/"
            f"{self.get_number_of_parallel_subtasks()})"
        )

    @abc.abstractmethod
    def get_state(self, state_descriptor): ...

    @abc.abstractmethod
    def get_list_state(self, state_descriptor): ...

    @abc.abstractmethod
    def get_map_state(self, state_descriptor): ...

    @abc.abstractmethod
    def get_reducing_state(self, state_descriptor): ...

    @abc.abstractmethod
    def get_aggregating_state(self, state_descriptor): ...


class Function:
    def open(self, runtime_context: RuntimeContext) -> None:
        """Called once per subtask before the first record (after state was restored)."""

    def close(self) -> None:
        """Called once when the subtask ends or is cancelled."""


class MapFunction(Function):
    @abc.abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(Function):
    @abc.abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]: ...


class FilterFunction(Function):
    @abc.abstractmethod
    def filter(self, value: Any) -> bool: ...


class ReduceFunction(Function):
    @abc.abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class Partitioner(Function):
    """For `DataStream.partition_custom`: the downstream subtask of a key."""

    @abc.abstractmethod
    def partition(self, key: Any, num_partitions: int) -> int: ...


class AggregateFunction(Function):
    @abc.abstractmethod
    def create_accumulator(self) -> Any: ...

    @abc.abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abc.abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement merge()")


class KeySelector(Function):
    @abc.abstractmethod
    def get_key(self, value: Any) -> Any: ...


class ProcessFunction(Function):
    class Context(abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def timer_service(self): ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            """Emit `value` to the side output `output_tag` (an OutputTag)."""

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        """Yield (or return an iterable of) output records; returning None emits nothing."""


class KeyedProcessFunction(Function):
    class Context(ProcessFunction.Context):
        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(Context):
        @abc.abstractmethod
        def time_domain(self): ...

    @abc.abstractmethod
    def process_element(
        self, value: Any, ctx: KeyedProcessFunction.Context
    ) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        return None


class FunctionSnapshotContext(Protocol):
    checkpoint_id: int
    checkpoint_timestamp: int


class FunctionInitializationContext(Protocol):
    """Given to `CheckpointedFunction.initialize_state`."""

    def is_restored(self) -> bool: ...

    @property
    def operator_state_store(self): ...

    @property
    def keyed_state_store(self): ...


class CheckpointedFunction(abc.ABC):
    """A function with operator state of its own (Flink's CheckpointedFunction).

    `initialize_state` runs before `open`, on every (re)start; `snapshot_state` runs in the
    synchronous phase of each checkpoint, so list states must hold what to restore from.
    """

    @abc.abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None: ...

    @abc.abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None: ...


class CheckpointListener:
    """Told when a checkpoint completed (all subtasks acked and `_metadata` is durable) or was
    aborted. Notifications can be lost on failure: after a restore, act on the restored state."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Called on the subtask's loop thread after checkpoint `checkpoint_id` completed."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Called when checkpoint `checkpoint_id` was aborted (best effort)."""


class BaseBroadcastProcessFunction(Function):
    """What BroadcastProcessFunction and KeyedBroadcastProcessFunction share: two contexts,
    read-only on the regular side and read-write on the broadcast side (see docs/guide.md,
    "Broadcast state")."""

    class BaseContext(abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def current_watermark(self) -> int: ...

    class Context(BaseContext):
        """`ctx` of `process_broadcast_element`."""

        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor):
            """The writable BroadcastState of a MapStateDescriptor passed to broadcast(...)."""

    class ReadOnlyContext(BaseContext):
        """`ctx` of `process_element`."""

        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor):
            """The ReadOnlyBroadcastState of a MapStateDescriptor passed to broadcast(...)."""


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """Processes a (non-keyed) DataStream connected to a BroadcastStream."""

    class Context(BaseBroadcastProcessFunction.Context): ...

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext): ...

    @abc.abstractmethod
    def process_element(
        self, value: Any, ctx: BroadcastProcessFunction.ReadOnlyContext
    ) -> Iterable[Any] | None:
        """A record of the regular stream; broadcast state is read-only here."""

    @abc.abstractmethod
    def process_broadcast_element(
        self, value: Any, ctx: BroadcastProcessFunction.Context
    ) -> Iterable[Any] | None:
        """A record of the broadcast stream (every subtask gets each); update the broadcast
        state here, the same way on every subtask (deterministically)."""


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """Processes a KeyedStream connected to a BroadcastStream: keyed state as in a
    KeyedProcessFunction (through the runtime context in `open`), plus broadcast state."""

    class Context(BaseBroadcastProcessFunction.Context):
        @abc.abstractmethod
        def apply_to_keyed_state(self, state_descriptor, function) -> None:
            """Call `function(key, state)` for every key of this subtask with that state."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext):
        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

        @abc.abstractmethod
        def timer_service(self): ...

    class OnTimerContext(ReadOnlyContext):
        """The `ctx` of `on_timer`: also the firing timer's time domain."""

        @abc.abstractmethod
        def time_domain(self) -> Any: ...

    @abc.abstractmethod
    def process_element(
        self, value: Any, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext
    ) -> Iterable[Any] | None:
        """A record of the keyed stream, with its key current; broadcast state is read-only."""

    @abc.abstractmethod
    def process_broadcast_element(
        self, value: Any, ctx: KeyedBroadcastProcessFunction.Context
    ) -> Iterable[Any] | None:
        """A record of the broadcast stream (every subtask gets each); no key is current."""

    def on_timer(self, timestamp: int, ctx: Any):
        return None


def _register_runtime_contexts() -> None:
    """The runtime implements these interfaces by shape (it must not import the user API);
    registering them makes `isinstance(ctx, RuntimeContext)` true, as in PyFlink."""
    from tidegate.runtime.context import ProcessContext, StreamingRuntimeContext

    RuntimeContext.register(StreamingRuntimeContext)
    KeyedProcessFunction.Context.register(ProcessContext)
    ProcessFunction.Context.register(ProcessContext)
    from tidegate.runtime.broadcast import (
        BroadcastContext,
        BroadcastOnTimerContext,
        ReadOnlyBroadcastContext,
    )

    for cls in (BroadcastProcessFunction, KeyedBroadcastProcessFunction):
        cls.Context.register(BroadcastContext)
        cls.ReadOnlyContext.register(ReadOnlyBroadcastContext)
    KeyedBroadcastProcessFunction.OnTimerContext.register(BroadcastOnTimerContext)


_register_runtime_contexts()
