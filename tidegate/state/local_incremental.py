"""Task-local recovery of incremental rocksdb checkpoints: keep the snapshot's RocksDB checkpoint.

Flink keeps the hard-linked RocksDB checkpoint directory a snapshot was uploaded from as the
task-local copy of that checkpoint. So does this module: once the asynchronous phase uploaded
the snapshot (rocksdb_incremental.upload_snapshot), its directory is moved (a rename: the files
stay hard links of the database's, no byte is copied) into the `LocalStateStore` layout,
`<root>/<job id>/chk-<n>/rocksdb-<backend id>/`, instead of being deleted. When the local root
is on another filesystem than the RocksDB instance, the files are copied instead. The copies
are pruned with the other local copies (`LocalStateStore.confirm`, `remove_job`).

On restore each file of an incremental handle (shared SST files and private files, by RocksDB
name) is taken from the local copy when it is there and intact (its size and CRC-32 equal what
the handle recorded for the uploaded file, like `LocalStateStore.find`), else downloaded: one
restore may mix both. SST files are immutable, so they are hard-linked into the restore
directory; the private files (MANIFEST, CURRENT, OPTIONS, ...) are copied, as RocksDB may
rewrite them. Reads are counted per file. A local problem is logged and the remote file read:
it never fails a checkpoint or a restore.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.state.checksums import read_checksum
from tidegate.state.handles import IncrementalFile
from tidegate.state.local_recovery import LocalStateStore

log = logging.getLogger("tidegate.local_recovery")


@dataclass
class FileReads:
    """Files of incremental handles restored from local copies and from the storage."""

    local: int = 0
    remote: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, is_local: bool) -> None:
        with self._lock:
            if is_local:
                self.local += 1
            else:
                self.remote += 1


def local_copy_dir(local: LocalStateStore, checkpoint_id: int, backend_id: str) -> str:
    """Where the local copy of backend `backend_id`'s snapshot for a checkpoint is kept."""
    return local.path_of(checkpoint_id, f"rocksdb-{backend_id}")


def keep_local_copy(
    local: LocalStateStore, snapshot_dir: str, checkpoint_id: int, backend_id: str
) -> None:
    """Keep the uploaded RocksDB checkpoint in `snapshot_dir` as the task-local copy (moved
    away: `snapshot_dir` is gone afterwards, or left for its owner to delete on failure)."""
    target = local_copy_dir(local, checkpoint_id, backend_id)
    try:
        if os.path.exists(target):  # left by an earlier attempt of the same checkpoint
            shutil.rmtree(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.rename(snapshot_dir, target)
        except OSError:  # another filesystem (EXDEV): copy the files instead
            shutil.copytree(snapshot_dir, target, copy_function=shutil.copyfile)
    except OSError as e:
        log.warning("task-local recovery: cannot keep the local copy %s: %s", target, e)
        shutil.rmtree(target, ignore_errors=True)


def with_local_copies(handles: list[Any], local: LocalStateStore | None) -> list[Any]:
    """`handles` (IncrementalKeyedStateHandle) set to read local copies where there are any
    (with local recovery enabled), each with a `FileReads` counter (shared by all of them)."""
    reads = FileReads()
    out = []
    for h in handles:
        backend_id = h.handle.backend_id
        local_dir = None
        if local is not None and backend_id:
            local_dir = local_copy_dir(local, h.checkpoint_id, backend_id)
        out.append(replace(h, local_dir=local_dir, reads=reads))
    return out


def restore_from_local(local_dir: str | None, entry: IncrementalFile, target: str) -> bool:
    """Put the local copy of file `entry` (a handle's shared or private file) at `target` if
    it is intact; whether it did (False: download it)."""
    if local_dir is None or entry.checksum is None:
        return False  # a copy without a recorded checksum to compare with is never trusted
    path = os.path.join(local_dir, entry.name)
    try:
        size = os.path.getsize(path)
        if entry.size is not None and size != entry.size:
            raise ValueError(f"size {size}, expected {entry.size}")
        with open(path, "rb") as f:
            _, actual = read_checksum(f)
        if actual != entry.checksum:
            raise ValueError(f"checksum {actual}, expected {entry.checksum}")
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        log.warning(
            "task-local recovery: the local copy %s is damaged (%s); downloading %s instead",
            path,
            e,
            entry.file,
        )
        with contextlib.suppress(OSError):
            os.remove(path)  # so the next restore does not check it again
        return False
    try:
        _link_or_copy(path, target, link=entry.name.endswith(".sst"))
    except OSError as e:
        log.warning("task-local recovery: cannot restore from %s (%s): downloading", path, e)
        with contextlib.suppress(OSError):
            os.remove(target)
        return False
    return True


def _link_or_copy(source: str, target: str, link: bool) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(target)
    if link:
        try:
            os.link(source, target)
            return
        except OSError:  # another filesystem, or no hard links there
            pass
    shutil.copyfile(source, target)
