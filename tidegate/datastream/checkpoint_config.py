"""`CheckpointConfig` with PyFlink's method names (intervals and timeouts in milliseconds)."""

from __future__ import annotations

import os
from dataclasses import replace

from tidegate.common.time import Duration
from tidegate.datastream.checkpoint_storage import FileSystemCheckpointStorage
from tidegate.datastream.checkpointing_mode import CheckpointingMode
from tidegate.deploy.job_spec import CheckpointRetention, CheckpointSettings

#: PyFlink's name (Flink 1.x) and Flink 2's name for the same setting
ExternalizedCheckpointCleanup = CheckpointRetention
ExternalizedCheckpointRetention = CheckpointRetention


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class CheckpointConfig:
    def __init__(self) -> None:
        self._s = CheckpointSettings()
        self._storage: FileSystemCheckpointStorage | None = None

    @property
    def settings(self) -> CheckpointSettings:
        storage = self._storage.checkpoint_path if self._storage else None
        return replace(self._s, storage=storage).validate()

    def is_checkpointing_enabled(self) -> bool:
        return self._s.interval_ms is not None

    def set_checkpoint_interval(self, checkpoint_interval: int) -> CheckpointConfig:
        self._s = replace(
            self._s, interval_ms=_positive("checkpoint interval", checkpoint_interval, 10)
        )
        return self

    def get_checkpoint_interval(self) -> int:
        return -1 if self._s.interval_ms is None else self._s.interval_ms

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        if not isinstance(checkpointing_mode, CheckpointingMode):
            raise TypeError(
                f"checkpointing mode must be CheckpointingMode.EXACTLY_ONCE or AT_LEAST_ONCE, "
                f"got {checkpointing_mode!r}"
            )
        exactly = checkpointing_mode is CheckpointingMode.EXACTLY_ONCE
        self._s = replace(self._s, exactly_once=exactly)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        if self._s.exactly_once:
            return CheckpointingMode.EXACTLY_ONCE
        return CheckpointingMode.AT_LEAST_ONCE

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> CheckpointConfig:
        self._s = replace(self._s, timeout_ms=_positive("checkpoint timeout", checkpoint_timeout))
        return self

    def get_checkpoint_timeout(self) -> int:
        return self._s.timeout_ms

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int):
        self._s = replace(
            self._s, min_pause_ms=_positive("min pause", min_pause_between_checkpoints, 0)
        )
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._s.min_pause_ms

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int):
        self._s = replace(
            self._s,
            max_concurrent=_positive("max concurrent checkpoints", max_concurrent_checkpoints),
        )
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._s.max_concurrent

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int):
        self._s = replace(
            self._s,
            tolerable_failures=_positive(
                "tolerable checkpoint failure number", tolerable_checkpoint_failure_number, 0
            ),
        )
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._s.tolerable_failures

    def set_num_retained_checkpoints(self, num_retained: int) -> CheckpointConfig:
        """How many completed checkpoints to keep (Flink's `state.checkpoints.num-retained`)."""
        self._s = replace(self._s, max_retained=_positive("retained checkpoints", num_retained))
        return self

    def get_num_retained_checkpoints(self) -> int:
        return self._s.max_retained

    def set_externalized_checkpoint_retention(self, retention: CheckpointRetention):
        self._s = replace(self._s, retention=CheckpointRetention(retention))
        return self

    set_externalized_checkpoint_cleanup = set_externalized_checkpoint_retention
    enable_externalized_checkpoints = set_externalized_checkpoint_retention

    def get_externalized_checkpoint_retention(self) -> CheckpointRetention:
        return self._s.retention

    get_externalized_checkpoint_cleanup = get_externalized_checkpoint_retention

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self._s.retention is not CheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        """Unaligned checkpoints: every subtask snapshots as soon as the checkpoint is
        triggered and persists the records in flight on its inputs, so checkpoints complete
        quickly under backpressure (exactly-once only; savepoints stay aligned)."""
        self._s = replace(self._s, unaligned=bool(enabled))
        return self

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._s.unaligned

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Duration | int) -> CheckpointConfig:
        """With unaligned checkpoints enabled: start each checkpoint aligned and switch a
        subtask to unaligned once its alignment lasted this long (a Duration, or ms). 0, the
        default, means unaligned from the start."""
        millis = (
            alignment_timeout.millis
            if isinstance(alignment_timeout, Duration)
            else alignment_timeout
        )
        self._s = replace(
            self._s, aligned_timeout_ms=_positive("aligned checkpoint timeout", millis, 0)
        )
        return self

    set_alignment_timeout = set_aligned_checkpoint_timeout

    def get_aligned_checkpoint_timeout(self) -> Duration:
        return Duration(self._s.aligned_timeout_ms)

    get_alignment_timeout = get_aligned_checkpoint_timeout

    def set_default_savepoint_directory(self, directory: str | None) -> CheckpointConfig:
        """Where savepoints go when none is given when one is triggered (a local path, made
        absolute, or an fsspec URI); None unsets it."""
        if directory is not None:
            directory = str(directory)
            if not directory:
                raise ValueError("the default savepoint directory must not be empty")
            if "://" not in directory:
                directory = os.path.abspath(os.path.expanduser(directory))
        self._s = replace(self._s, savepoint_dir=directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._s.savepoint_dir

    def set_checkpoint_storage(self, storage: FileSystemCheckpointStorage) -> CheckpointConfig:
        self._storage = storage
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        return self.set_checkpoint_storage(FileSystemCheckpointStorage(checkpoint_path))

    def get_checkpoint_storage(self) -> FileSystemCheckpointStorage | None:
        return self._storage
