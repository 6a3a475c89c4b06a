"""The TaskEnvironment of a stream task that unit tests build by hand (no Spark, no driver):
attempt 0 of job "job", exactly-once, 128 key groups, not restored."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.task_environment import TaskEnvironment


def task_environment(
    storage: CheckpointStorage,
    *,
    control: Any = None,
    executor: Executor | None = None,
    buffer_timeout_s: float | None = 0.001,
) -> TaskEnvironment:
    return TaskEnvironment(
        attempt=0,
        job_id="job",
        max_parallelism=128,
        exactly_once=True,
        batch_size=100,
        buffer_timeout_s=buffer_timeout_s,
        is_restored=False,
        control=control,
        storage=storage,
        executor=executor,
    )
