"""Restoring keyed state from incremental rocksdb handles (rocksdb_incremental).

- rocksdb backend, one handle with exactly the new subtask's key groups (same parallelism):
  the downloaded files become the backend's database as they are, and, when the job owns the
  checkpoint, its uploaded SST files are reused by the next incremental checkpoint.
- rocksdb backend, rescaled: each downloaded database is opened read-only and only the new
  subtask's key groups are copied, as one range scan per column family (keys start with their
  key group, big-endian, so a key-group range is a contiguous run of keys).
- any other backend (hashmap): the downloaded database is read key group by key group and fed
  to `backend.restore`, like a canonical state file.
- a rocksdb changelog chain (rocksdb_changelog): the RocksDB files as above, then the changes
  of the changelogs (`replay`; other backends: applied to the key groups read);
- a hashmap chain (heap_incremental), into any backend: read key group by key group the same
  way; a hashmap backend with incremental checkpoints that restored exactly one whole handle
  of a checkpoint the job owns extends that chain (`continue_chain`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import rocksdict

from tidegate.state import rocksdb_codec as codec
from tidegate.state.handles import HEAP_CHANGELOG
from tidegate.state.heap import StateKind
from tidegate.state.heap_incremental import read_changelog_key_groups
from tidegate.state.rocksdb_changelog import replay, with_changelogs
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle, download, shared_base
from tidegate.state.rocksdb_instance import CF_PREFIX, RocksDBOptions, open_read_only
from tidegate.state.snapshot_format import KeyGroupData, describe_key_groups

#: entries copied per write batch when a rescaled restore copies a key-group range
COPY_BATCH = 10_000


def _check_max_parallelism(handle: IncrementalKeyedStateHandle, max_parallelism: int) -> None:
    recorded = handle.handle.max_parallelism
    if recorded != max_parallelism:
        raise ValueError(
            f"the incremental state in {handle.checkpoint_dir} was written with max parallelism "
            f"{recorded}, but this job runs with {max_parallelism}; key groups cannot be "
            "remapped: restore with the max parallelism the checkpoint was taken with"
        )


def restore_rocksdb_backend(backend: Any, handles: list[IncrementalKeyedStateHandle]) -> None:
    """Load `handles` into a fresh `RocksDBKeyedStateBackend` (before the first record)."""
    backend.buffer.flush()  # restored entries are written directly, after anything buffered
    backend.buffer.discard()  # and cached values may not know them
    for h in handles:
        _check_max_parallelism(h, backend.max_parallelism)
        for name, kind in h.handle.state_kinds.items():
            backend._kinds.setdefault(name, StateKind(kind))
    whole = (
        len(handles) == 1
        and handles[0].key_group_range == backend.key_group_range
        and handles[0].key_groups == backend.key_group_range
    )
    if whole:
        # Step 1 (same key groups): the downloaded database is used as it is
        h = handles[0]
        target = os.path.join(backend.instance.path, "restore")
        download(h.checkpoint_dir, h.handle, target, h.local_dir, h.reads, h.filesystems)
        backend.instance.replace_db(target)
        replay(backend, h)
        if h.reusable and backend.tracker is not None:
            backend.tracker.seed(h.checkpoint_id, shared_base(h.checkpoint_dir, h.handle))
        return
    # Step 2 (rescaled): copy the new subtask's key-group range out of each old database
    for h in handles:
        with tempfile.TemporaryDirectory(prefix="restore-", dir=backend.instance.path) as tmp:
            download(h.checkpoint_dir, h.handle, tmp, h.local_dir, h.reads, h.filesystems)
            _copy_range(backend, tmp, h)
        replay(backend, h)


def _copy_range(backend: Any, path: str, h: IncrementalKeyedStateHandle) -> None:
    start, stop = (
        codec.key_group_bound(h.key_groups.start),
        codec.key_group_bound(h.key_groups.stop),
    )
    db = open_read_only(path, backend.options)
    try:
        for name in h.handle.state_kinds:
            backend._column_family(name)
            target = backend.instance.handle(name)
            cf = db.get_column_family(CF_PREFIX + name)
            try:
                batch = rocksdict.WriteBatch(raw_mode=True)
                for n, (key, value) in enumerate(cf.items(from_key=start), 1):
                    if key >= stop:
                        break
                    batch.put(key, value, target)
                    if n % COPY_BATCH == 0:
                        backend.instance.write(batch)
                        batch = rocksdict.WriteBatch(raw_mode=True)
                backend.instance.write(batch)
            finally:
                cf.close()
    finally:
        db.close()


def read_incremental_key_groups(
    h: IncrementalKeyedStateHandle, options: RocksDBOptions | None = None
) -> Iterator[tuple[int, KeyGroupData]]:
    """The key groups `h` contributes, canonical (for backends other than rocksdb and tools;
    a hashmap chain for every backend)."""
    from tidegate.state.rocksdb_snapshot import RocksDBKeyedStateSnapshot

    if h.handle.backend == HEAP_CHANGELOG:
        yield from read_changelog_key_groups(h)
        return

    tmp = tempfile.mkdtemp(prefix="tidegate-incremental-")
    try:
        download(h.checkpoint_dir, h.handle, tmp, h.local_dir, h.reads, h.filesystems)
        snapshot = RocksDBKeyedStateSnapshot(
            h.handle.max_parallelism,
            h.key_group_range,
            dict(h.handle.state_kinds),
            tmp,
            options or RocksDBOptions(),
        )
        yield from with_changelogs(
            h, ((kg, data) for kg, data in snapshot.key_groups() if kg in h.key_groups)
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def restore_keyed_incremental(backend: Any, handles: list[IncrementalKeyedStateHandle]) -> None:
    """Restore incremental handles into any keyed backend: RocksDB files into a rocksdb
    backend directly; a hashmap chain, or RocksDB files into another backend, as key groups."""
    if hasattr(backend, "restore_incremental") and all(
        h.handle.backend != HEAP_CHANGELOG for h in handles
    ):
        backend.restore_incremental(handles)
        return
    for h in handles:
        _check_max_parallelism(h, backend.max_parallelism)
        if h.key_groups.start < backend.key_group_range.start or (
            h.key_groups.stop > backend.key_group_range.stop
        ):
            raise ValueError(
                f"key groups {describe_key_groups(h.key_groups)} are outside this subtask's "
                f"{describe_key_groups(backend.key_group_range)}"
            )
        backend.restore(read_incremental_key_groups(h))
    if hasattr(backend, "continue_chain") and len(handles) == 1:
        backend.continue_chain(handles[0])
