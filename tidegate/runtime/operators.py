"""Runtime operators. Each processes a whole batch (a list) and hands its output batch to its
outputs: chained operators or record writers. Batches are never mutated after emission, since
one batch may go to several outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidegate.runtime.context import (
    InitializationContext,
    ProcessContext,
    SnapshotContext,
    StreamingRuntimeContext,
)
from tidegate.runtime.timer_service import OperatorTimers
from tidegate.state.descriptors import ReducingStateDescriptor
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.keygroups import key_group_range
from tidegate.state.operator_state import OperatorStateBackend
from tidegate.state.ttl.factory import batch_cleanup


@dataclass(frozen=True)
class OperatorRuntime:
    """Where an operator instance runs; given by the task before `initialize_state`."""

    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt: int
    #: the job restored from a checkpoint or savepoint (even if this operator had no state in it)
    is_restored: bool = False
    #: task-local copies of checkpoints (LocalStateStore), if local recovery is enabled
    local_state: Any = None
    #: creates the keyed state backend (datastream.state_backend; None: hashmap)
    state_backend: Any = None
    job_id: str = ""


@dataclass
class OperatorSnapshot:
    """Result of the synchronous snapshot phase, written to a file in the asynchronous phase."""

    keyed: Any | None
    operator: dict | None


def _then(process_batch: Any, after_batch: Any) -> Any:
    """`process_batch`, followed by `after_batch(number of records)`."""

    def process_then(records: list) -> None:
        process_batch(records)
        after_batch(len(records))

    return process_then


def create_keyed_backend(runtime: OperatorRuntime, uid: str, key_group_range: range) -> Any:
    """The keyed state backend the job configured (hashmap when none is)."""
    if runtime.state_backend is None:
        return HeapKeyedStateBackend(runtime.max_parallelism, key_group_range)
    return runtime.state_backend.create_keyed_state_backend(
        runtime.max_parallelism,
        key_group_range,
        job_id=runtime.job_id,
        operator_uid=uid,
        subtask=runtime.subtask_index,
        attempt=runtime.attempt,
    )


class StreamOperator:
    """Base: state plumbing, lifecycle, and user-function hooks (open/close, CheckpointedFunction,
    CheckpointListener). Subclasses implement `process_batch`."""

    keyed = False

    def __init__(self, function: Any = None, *, uid: str = "", name: str = "") -> None:
        self.function = function
        self.uid = uid
        self.name = name
        self.outputs: list[Any] = []
        self.keyed_backend: Any = None
        self.operator_state = OperatorStateBackend()
        self.ctx: OperatorRuntime
        #: keyed-state files read on restore: (from task-local copies, from checkpoint storage)
        self.restored_files = (0, 0)

    # lifecycle -------------------------------------------------------------------------------
    def initialize_state(self, runtime: OperatorRuntime, restored: Any | None) -> None:
        """Create state backends and load restored state (`restored`: RestoredOperatorState)."""
        self.ctx = runtime
        if self.keyed:
            kg_range = key_group_range(
                runtime.subtask_index, runtime.parallelism, runtime.max_parallelism
            )
            self.keyed_backend = create_keyed_backend(runtime, self.uid, kg_range)
        if restored is not None:
            if self.keyed_backend is not None:
                self.restored_files = restored.restore_keyed(
                    self.keyed_backend, runtime.local_state
                )
            self.operator_state.restore(restored.operator_state)
        fn = self.function
        if hasattr(fn, "initialize_state") and hasattr(fn, "snapshot_state"):
            fn.initialize_state(
                InitializationContext(
                    runtime.is_restored or restored is not None,
                    self.operator_state,
                    self.keyed_backend,
                )
            )

    def open(self) -> None:
        if hasattr(self.function, "open"):
            self.function.open(StreamingRuntimeContext(self))
        ttl_cleanup = batch_cleanup(self.keyed_backend) if self.keyed_backend is not None else None
        if ttl_cleanup is not None:  # state TTL cleans up after each batch (state/ttl/cleanup.py)
            self.process_batch = _then(self.process_batch, ttl_cleanup)

    def process_batch(self, records: list) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of input: flush whatever is buffered (nothing for most operators)."""

    def close(self) -> None:
        try:
            if hasattr(self.function, "close"):
                self.function.close()
        finally:
            if hasattr(self.keyed_backend, "dispose"):  # rocksdb: close it, delete its files
                self.keyed_backend.dispose()

    # checkpoints ----------------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int) -> OperatorSnapshot | None:
        fn = self.function
        if hasattr(fn, "snapshot_state") and hasattr(fn, "initialize_state"):
            fn.snapshot_state(SnapshotContext(checkpoint_id, timestamp_ms))
        keyed = self.keyed_backend.snapshot() if self.keyed_backend is not None else None
        operator = self.operator_state.snapshot() or None
        if keyed is None and operator is None:
            return None
        return OperatorSnapshot(keyed, operator)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if hasattr(self.keyed_backend, "notify_checkpoint_complete"):  # incremental rocksdb
            self.keyed_backend.notify_checkpoint_complete(checkpoint_id)
        if hasattr(self.function, "notify_checkpoint_complete"):
            self.function.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if hasattr(self.keyed_backend, "notify_checkpoint_aborted"):
            self.keyed_backend.notify_checkpoint_aborted(checkpoint_id)
        if hasattr(self.function, "notify_checkpoint_aborted"):
            self.function.notify_checkpoint_aborted(checkpoint_id)

    def emit(self, records: list) -> None:
        for out in self.outputs:
            out.process_batch(records)


class MapOperator(StreamOperator):
    def __init__(self, function, call, key_selector=None, **kw) -> None:
        super().__init__(function, **kw)
        self.call = call
        self.key_selector = key_selector
        self.keyed = key_selector is not None

    def process_batch(self, records: list) -> None:
        call = self.call
        if self.keyed_backend is None:
            out = [call(r) for r in records]
        else:
            backend, select, out = self.keyed_backend, self.key_selector, []
            for r in records:
                backend.current_key = select(r)
                out.append(call(r))
        self.emit(out)


class FilterOperator(MapOperator):
    def process_batch(self, records: list) -> None:
        call = self.call
        if self.keyed_backend is None:
            out = [r for r in records if call(r)]
        else:
            backend, select, out = self.keyed_backend, self.key_selector, []
            for r in records:
                backend.current_key = select(r)
                if call(r):
                    out.append(r)
        if out:
            self.emit(out)


class FlatMapOperator(MapOperator):
    def process_batch(self, records: list) -> None:
        call, backend, select, out = self.call, self.keyed_backend, self.key_selector, []
        for r in records:
            if backend is not None:
                backend.current_key = select(r)
            produced = call(r)
            if produced is not None:
                out.extend(produced)
        if out:
            self.emit(out)


class ProcessOperator(MapOperator):
    """ProcessFunction / KeyedProcessFunction: `process_element(value, ctx)` yields outputs."""

    def open(self) -> None:
        #: timers (runtime/timer_service.py) exist on keyed streams only
        self.timers = OperatorTimers(self) if self.keyed_backend is not None else None
        self.process_context = ProcessContext(self.keyed_backend, self.timers)
        super().open()

    def finish(self) -> None:
        if self.timers is not None:  # the watermark reaches its maximum: event-time timers fire
            self.timers.end_of_input()
        super().finish()

    def process_batch(self, records: list) -> None:
        call, ctx = self.call, self.process_context
        backend, select, out = self.keyed_backend, self.key_selector, []
        for r in records:
            if backend is not None:
                backend.current_key = select(r)
            produced = call(r, ctx)
            if produced is not None:
                out.extend(produced)
        if out:
            self.emit(out)


class KeyedReduceOperator(MapOperator):
    """Rolling reduce per key (KeyedStream.reduce): emits the new aggregate for every record.
    The aggregate lives in ReducingState, whose copy-on-write keeps a checkpoint that is still
    being written isolated from reduce functions that change their first argument in place."""

    _STATE = "__reduce__"

    def open(self) -> None:
        desc = ReducingStateDescriptor(self._STATE, self.call)
        self._add = self.keyed_backend.get_reducing_state(desc).add_for_key
        super().open()

    def process_batch(self, records: list) -> None:
        add, select = self._add, self.key_selector
        self.emit([add(select(r), r) for r in records])
