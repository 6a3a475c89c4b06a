"""The driver's side of the proof that every host sees the same storage
(checkpoint/shared_storage.py): which directories an attempt checks, and deleting its files."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tidegate.checkpoint.errors import CheckpointStorageError
from tidegate.checkpoint.shared_storage import StorageCheck, remove_check, write_check
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.connectors.base import SharedPathSink
from tidegate.runtime.plan import JobGraph

log = logging.getLogger("tidegate.jobmaster")


def write_attempt_checks(storage: CheckpointStorage, graph: JobGraph) -> tuple[StorageCheck, ...]:
    """Step 1 for one attempt: a new check file in the job's checkpoint directory (every slot
    reads it) and in every path a sink of `graph` declares shared (the slots hosting one of
    its subtasks read it). Raises CheckpointStorageError naming a path the driver cannot write."""
    directories = [(f"the checkpoint directory {storage.base_uri}", storage.job_dir, None)]
    for vertex in graph.vertices.values():
        for op in vertex.operators:
            if isinstance(op.connector, SharedPathSink):
                directories += [
                    (f"the path {path} of sink {op.uid!r}", path, vertex.vertex_id)
                    for path in op.connector.shared_paths()
                ]
    checks = []
    for what, directory, vertex_id in directories:
        try:
            checks.append(write_check(storage.filesystems, what, directory, vertex_id))
        except OSError as e:
            remove_checks(checks, storage)
            raise CheckpointStorageError(
                f"cannot write into {what} from the driver ({type(e).__name__}: {e}); the "
                "driver writes a check file there at each attempt to prove that every host "
                "sees the same storage. Use a location this process can create and write"
            ) from e
    return tuple(checks)


def remove_checks(checks: Iterable[StorageCheck], storage: CheckpointStorage) -> None:
    """Step 3: delete the check files; one that cannot be deleted is logged (it is hidden and
    harmless), never an error of the job."""
    for check in checks:
        try:
            remove_check(check, storage.filesystems)
        except OSError as e:
            log.warning("could not delete the storage check file %s: %s", check.file, e)
