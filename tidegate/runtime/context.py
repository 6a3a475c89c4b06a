"""Contexts handed to user functions: the RuntimeContext, the process-function context, and the
initialization/snapshot contexts of CheckpointedFunction. They implement the interfaces declared
in `tidegate.datastream.functions` by shape (the runtime does not import the user API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidegate.runtime.timer_service import NonKeyedTimerService


class StreamingRuntimeContext:
    def __init__(self, operator: Any) -> None:
        self._op = operator

    def get_task_name(self) -> str:
        return self._op.name

    def get_task_name_with_subtasks(self) -> str:
        ctx = self._op.ctx
        return f"{self._op.name} ({ctx.subtask_index + 1}/{ctx.parallelism})"

    def get_number_of_parallel_subtasks(self) -> int:
        return self._op.ctx.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._op.ctx.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._op.ctx.subtask_index

    def get_attempt_number(self) -> int:
        return self._op.ctx.attempt

    def get_job_parameter(self, key: str, default_value: str | None) -> str | None:
        """The global job parameter `key` (ExecutionConfig.set_global_job_parameters /
        `pipeline.global-job-parameters`), `default_value` if it is not set."""
        return self._op.ctx.job_parameters.get(key, default_value)

    def _keyed(self):
        backend = self._op.keyed_backend
        if backend is None:
            raise RuntimeError(
                f"operator {self._op.name!r} is not keyed: keyed state (get_state, "
                "get_list_state, ...) is only available on a KeyedStream — call key_by(...) first"
            )
        return backend

    def get_state(self, state_descriptor):
        return self._keyed().get_state(state_descriptor)

    def get_list_state(self, state_descriptor):
        return self._keyed().get_list_state(state_descriptor)

    def get_map_state(self, state_descriptor):
        return self._keyed().get_map_state(state_descriptor)

    def get_reducing_state(self, state_descriptor):
        return self._keyed().get_reducing_state(state_descriptor)

    def get_aggregating_state(self, state_descriptor):
        return self._keyed().get_aggregating_state(state_descriptor)


class ProcessContext:
    """One object reused for every record (cheap): holds the current key and the current
    record's timestamp (set by the operator; None for records without one)."""

    def __init__(self, backend: Any, timers: Any = None, operator: Any = None) -> None:
        self._backend = backend
        self._timers = timers  # OperatorTimers on a keyed stream
        self._op = operator
        self._timestamp: int | None = None

    def timestamp(self) -> int | None:
        """The current record's event-time timestamp (ms), None if it has none."""
        return self._timestamp

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit `value` to the side output `output_tag` (with the record's timestamp)."""
        self._op.side_outputs.collect(output_tag, value, self._timestamp)

    def timer_service(self):
        if self._timers is None:
            return NonKeyedTimerService(self._op)
        return self._timers.service

    def get_current_key(self) -> Any:
        if self._backend is None:
            raise RuntimeError("get_current_key() is only available on a KeyedStream")
        return self._backend.current_key


@dataclass(frozen=True)
class SnapshotContext:
    checkpoint_id: int
    checkpoint_timestamp: int


class InitializationContext:
    def __init__(self, restored: bool, operator_state_store: Any, keyed_state_store: Any) -> None:
        self._restored = restored
        self.operator_state_store = operator_state_store
        self.keyed_state_store = keyed_state_store

    def is_restored(self) -> bool:
        return self._restored

    def get_operator_state_store(self):
        return self.operator_state_store

    def get_keyed_state_store(self):
        return self.keyed_state_store
