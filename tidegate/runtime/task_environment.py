"""What every subtask of one slot shares: the attempt's settings and the slot's services
(Flink's `Environment` of a task), created once by the slot and handed to each StreamTask."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.buffer_timeout import BufferTimeout
from tidegate.runtime.deployment import Deployment
from tidegate.state.local_recovery import LocalStateStore


@dataclass(frozen=True)
class TaskEnvironment:
    attempt: int
    job_id: str
    #: the number of key groups
    max_parallelism: int
    #: aligned barriers (exactly-once) or only counted ones (at-least-once)
    exactly_once: bool
    #: records a source polls at a time
    batch_size: int
    #: how long a record writer may hold a partly filled batch (None: until it is full)
    buffer_timeout_s: float | None
    #: the attempt restored from a checkpoint or savepoint
    is_restored: bool
    #: the control connection to the driver (runtime.control.ControlClient)
    control: Any
    storage: CheckpointStorage
    #: runs the asynchronous snapshot phases
    executor: Executor
    #: task-local copies of checkpoints (None: local recovery is off)
    local_state: LocalStateStore | None = None
    #: creates keyed state backends (datastream.state_backend; None: hashmap)
    state_backend: Any = None
    #: the job runs in BATCH mode (runtime/plan.py JobGraph.batch)
    batch: bool = False
    #: the job's global parameters (runtime/plan.py JobGraph.job_parameters)
    job_parameters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        deployment: Deployment,
        control: Any,
        storage: CheckpointStorage,
        executor: Executor,
        local_state: LocalStateStore | None,
    ) -> TaskEnvironment:
        return cls(
            attempt=deployment.attempt,
            job_id=deployment.job_id,
            max_parallelism=deployment.graph.max_parallelism,
            exactly_once=deployment.exactly_once,
            batch_size=deployment.batch_size,
            buffer_timeout_s=BufferTimeout.of_millis(deployment.buffer_timeout_ms).timeout_s,
            is_restored=deployment.restored_checkpoint_id is not None,
            control=control,
            storage=storage,
            executor=executor,
            local_state=local_state,
            state_backend=deployment.state_backend,
            batch=deployment.graph.batch,
            job_parameters=deployment.graph.job_parameters,
        )
