"""Checkpoint storage (PyFlink's `FileSystemCheckpointStorage`): where snapshots are written."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class FileSystemCheckpointStorage:
    """A directory on any filesystem fsspec can write: a local path, `file://`, `s3://`,
    `hdfs://`, `gs://` ... On a cluster it must be shared by the driver and every executor."""

    checkpoint_path: str

    def __post_init__(self) -> None:
        if not self.checkpoint_path:
            raise ValueError("checkpoint storage needs a directory path or URI")
        if "://" not in self.checkpoint_path:
            object.__setattr__(self, "checkpoint_path", os.path.abspath(self.checkpoint_path))
