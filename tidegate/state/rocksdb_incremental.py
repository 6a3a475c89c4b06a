"""Incremental checkpoints of the rocksdb backend: upload only SST files not uploaded before.

Snapshot (`upload_incremental`, the asynchronous phase; the synchronous phase made a hard-linked
RocksDB checkpoint): every `*.sst` file the backend's confirmed base has is referenced again
(same shared file, same checksum); every other SST file is uploaded to `<job dir>/shared/`
under a unique name; the small private files (MANIFEST, CURRENT, OPTIONS, ...) go into the
checkpoint's own directory. The uploads of checkpoint n become the base only once the backend
is told n completed (`IncrementalTracker.notify_complete`): files of a checkpoint that may still
be aborted are never reused.

Restore (`download`): the files are copied back under their RocksDB names (or, with task-local
recovery, taken from the kept local copy: local_incremental) into a fresh directory, which is
then opened as a database (rocksdb_backend) or read key group by key group (any other backend).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.errors import CheckpointError
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.state.handles import IncrementalFile, IncrementalHandle
from tidegate.state.heap_changelog import CHANGELOG
from tidegate.state.incremental_handles import relative_to, resolve, shared_dir
from tidegate.state.local_incremental import FileReads, keep_local_copy, restore_from_local
from tidegate.state.local_recovery import LocalStateStore

#: files copied at once when an incremental handle is downloaded
DOWNLOAD_THREADS = 4
_CHUNK = 1 << 20


@dataclass
class IncrementalTracker:
    """Which SST files of this backend are uploaded, by the last confirmed checkpoint."""

    backend_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: the confirmed checkpoint whose uploads are reused (None: none yet, the next is full)
    base_id: int | None = None
    #: SST name -> {"path" (absolute), "size", "checksum"}
    base: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def current_base(self) -> tuple[int | None, dict[str, dict[str, Any]]]:
        with self._lock:
            return self.base_id, dict(self.base)

    def record(self, checkpoint_id: int, files: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self.pending[checkpoint_id] = files

    def seed(self, checkpoint_id: int, files: dict[str, dict[str, Any]]) -> None:
        """Reuse the files of a restored checkpoint this job owns."""
        with self._lock:
            self.base_id, self.base = checkpoint_id, dict(files)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: its uploads become the base (a savepoint's
        id has none: the base stays). Older pending uploads can no longer complete."""
        with self._lock:
            files = self.pending.pop(checkpoint_id, None)
            for older in [c for c in self.pending if c < checkpoint_id]:
                del self.pending[older]
            if files is not None and (self.base_id is None or checkpoint_id > self.base_id):
                self.base_id, self.base = checkpoint_id, files

    def notify_aborted(self, checkpoint_id: int) -> None:
        with self._lock:
            self.pending.pop(checkpoint_id, None)


def upload_incremental(
    snapshot_dir: str,
    storage: Any,
    checkpoint_dir: str,
    stem: str,
    checkpoint_id: int,
    tracker: IncrementalTracker,
    snapshot: Any,
    share_private: bool = False,
) -> IncrementalHandle:
    """Upload the RocksDB checkpoint in `snapshot_dir` incrementally; return the handle's
    incremental part (`snapshot` gives key groups, max parallelism and state kinds). On
    failure the files uploaded so far are deleted again (nothing references them).
    `share_private`: the private files go to `shared/` too (uploaded anew each time), so that
    the changelog checkpoints after this one can reference them (state/rocksdb_changelog)."""
    base_id, base = tracker.current_base()
    shared_root = shared_dir(storage.job_dir)
    shared: list[IncrementalFile] = []
    private: list[IncrementalFile] = []
    files: dict[str, dict[str, Any]] = {}
    uploaded: list[str] = []
    try:
        for name in sorted(os.listdir(snapshot_dir)):
            local = os.path.join(snapshot_dir, name)
            if not name.endswith(".sst") and not share_private:
                written = _upload(storage, checkpoint_dir, f"{stem}-{name}", "", local)
                private.append(
                    IncrementalFile(
                        name=name, file=written.name, size=written.size, checksum=written.checksum
                    )
                )
                continue
            known = base.get(name) if name.endswith(".sst") else None
            if known is None:
                stored, suffix = (name[:-4], ".sst") if name.endswith(".sst") else (name, "")
                written = _upload(storage, shared_root, f"{stem}-{stored}", suffix, local)
                path = f"{shared_root}/{written.name}"
                uploaded.append(path)
                known = {"path": path, "size": written.size, "checksum": written.checksum}
            files[name] = known
            shared.append(
                IncrementalFile(
                    name=name,
                    file=relative_to(checkpoint_dir, known["path"]),
                    size=known["size"],
                    checksum=known["checksum"],
                    uploaded=known["path"] in uploaded,
                )
            )
    except BaseException:
        for path in uploaded:
            delete_quietly(storage, path)
        raise
    tracker.record(checkpoint_id, files)
    return IncrementalHandle(
        backend_id=tracker.backend_id,
        base_checkpoint_id=base_id,
        key_group_range=snapshot.key_group_range,
        max_parallelism=snapshot.max_parallelism,
        state_kinds=dict(snapshot.state_kinds),
        shared=tuple(shared),
        private=tuple(private),
    )


def upload_snapshot(
    snapshot: Any,
    storage: Any,
    checkpoint_dir: str,
    stem: str,
    checkpoint_id: int,
    local: LocalStateStore | None = None,
) -> IncrementalHandle:
    """The asynchronous phase of an incremental checkpoint of a `RocksDBKeyedStateSnapshot`
    (whose `tracker` is set); its hard-linked directory is deleted afterwards, or, with
    task-local recovery (`local`), kept as the local copy (local_incremental)."""
    try:
        inc = upload_incremental(
            snapshot.path, storage, checkpoint_dir, stem, checkpoint_id, snapshot.tracker, snapshot
        )
        if local is not None:
            keep_local_copy(local, snapshot.path, checkpoint_id, snapshot.tracker.backend_id)
        return inc
    finally:
        snapshot.discard()


def _upload(storage: Any, directory: str, stem: str, suffix: str, local: str) -> Any:
    """Copy `local` into a new checkpoint file; the closed writer (name, size, checksum)."""
    with open(local, "rb") as src, storage.create_artifact(directory, stem, suffix) as out:
        shutil.copyfileobj(src, out, _CHUNK)
    return out


def db_files(inc: IncrementalHandle) -> list[IncrementalFile]:
    """The RocksDB files of a handle (without the changelogs of state/rocksdb_changelog)."""
    return [f for f in inc.files if not f.name.startswith(CHANGELOG)]


def delete_quietly(storage: Any, path: str) -> None:
    with contextlib.suppress(OSError, ValueError, CheckpointError):  # best effort
        storage.delete_file(path)


def shared_base(checkpoint_dir: str, inc: IncrementalHandle) -> dict[str, dict[str, Any]]:
    """A handle's shared files as a tracker base (SST name -> absolute path, size, checksum)."""
    return {
        f.name: {"path": resolve(checkpoint_dir, f.file), "size": f.size, "checksum": f.checksum}
        for f in inc.shared
    }


def download(
    checkpoint_dir: str,
    inc: IncrementalHandle,
    target: str,
    local_dir: str | None = None,
    reads: FileReads | None = None,
    filesystems: FileSystems = NO_OPTIONS,
) -> None:
    """Copy every file of the incremental handle `inc` into `target` under its RocksDB name
    (in parallel), opened with the job's `filesystems` options. The driver verified sizes and
    checksums before the restore started. With a task-local copy (`local_dir`), each intact
    file is taken from there instead; `reads` counts the files taken locally and downloaded."""
    os.makedirs(target, exist_ok=True)
    entries = db_files(inc)

    def fetch(entry: IncrementalFile) -> None:
        is_local = restore_from_local(local_dir, entry, os.path.join(target, entry.name))
        if reads is not None:
            reads.count(is_local)
        if is_local:
            return
        source = resolve(checkpoint_dir, entry.file)
        with (
            filesystems.open(source) as src,
            open(os.path.join(target, entry.name), "wb") as out,
        ):
            shutil.copyfileobj(src, out, _CHUNK)

    workers = max(1, min(DOWNLOAD_THREADS, len(entries)))
    with ThreadPoolExecutor(workers, thread_name_prefix="tidegate-download") as pool:
        list(pool.map(fetch, entries))


@dataclass(frozen=True)
class IncrementalKeyedStateHandle:
    """What one new subtask restores from one old subtask's incremental handle."""

    #: the checkpoint directory the handle's relative paths start from
    checkpoint_dir: str
    checkpoint_id: int
    #: the handle's incremental part
    handle: IncrementalHandle
    #: the key groups to take from it (its range ∩ the new subtask's)
    key_groups: range
    #: the job owns the restored checkpoint (its own, or claimed): its files may be reused
    reusable: bool = False
    #: task-local recovery: the directory of this handle's local copy (local_incremental)
    local_dir: str | None = field(default=None, compare=False)
    #: counts the files restored from the local copy and from the storage
    reads: FileReads | None = field(default=None, compare=False)
    #: the job's filesystem options, to read the handle's files with (set where it is read)
    filesystems: FileSystems = field(default=NO_OPTIONS, compare=False)

    @property
    def key_group_range(self) -> range:
        return self.handle.key_group_range
