"""Incremental RocksDB handles for the state processor: reading their key groups, and rewriting
them as canonical state files (a savepoint must be self-contained).

An incremental subtask handle (state/incremental_handles.py) keeps its keyed state in a
RocksDB checkpoint (SST and private files, mostly under the job's `shared/`), and its operator
state in its canonical state file (`file` + `index`). The key groups of one handle are in one
RocksDB checkpoint, so one Spark task reads one handle: it downloads the files into a temporary
directory and reads the key groups out of them (state/rocksdb_restore.py), canonical, exactly
as a restore into a hashmap backend does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common.filesystems import FileSystems
from tidegate.state.handles import StateHandle
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle
from tidegate.state.rocksdb_restore import read_incremental_key_groups
from tidegate.state.snapshot_format import (
    KeyGroupData,
    read_operator_state,
    write_state_file,
)

__all__ = ["IncrementalSource", "rewrite_canonical", "stored_bytes"]


def stored_bytes(handle: StateHandle) -> int:
    """Bytes of the files an incremental handle's keyed state is made of (shared and private,
    reused files included: what a reader downloads)."""
    assert handle.incremental is not None
    return sum(f.size or 0 for f in handle.incremental.files)


@dataclass(frozen=True)
class IncrementalSource:
    """One incremental subtask handle, as a Spark task needs it (picklable)."""

    subtask: int
    #: the checkpoint directory the handle's relative paths start from
    directory: str
    checkpoint_id: int
    #: the whole subtask handle (its state file and its incremental part)
    handle: StateHandle
    #: the snapshot's filesystem options
    filesystems: FileSystems

    @property
    def incremental(self) -> Any:
        assert self.handle.incremental is not None, "not an incremental handle"
        return self.handle.incremental

    @property
    def key_group_range(self) -> range:
        """The key groups the handle holds (its RocksDB checkpoint's range)."""
        return self.incremental.key_group_range

    @property
    def max_parallelism(self) -> int:
        return self.incremental.max_parallelism

    @property
    def state_kinds(self) -> dict[str, str]:
        return dict(self.incremental.state_kinds)

    def key_groups(self) -> Iterator[tuple[int, KeyGroupData]]:
        """The handle's non-empty key groups, ascending, canonical (downloads its files into
        a temporary directory, removed when the iteration ends)."""
        inc = self.incremental
        h = IncrementalKeyedStateHandle(
            self.directory,
            self.checkpoint_id,
            inc,
            inc.key_group_range,
            filesystems=self.filesystems,
        )
        yield from read_incremental_key_groups(h)


def rewrite_canonical(
    source: IncrementalSource, stem: str, target_dir: str, filesystems: FileSystems
) -> tuple[int, StateHandle]:
    """Write `source`'s keyed state (read from its RocksDB files) and operator state (read
    from its state file) as one canonical state file `<stem>-...state` in `target_dir`;
    returns (subtask, handle). Runs in a Spark task."""
    path = f"{source.directory.rstrip('/')}/{source.handle.file}"
    with source.filesystems.open(path) as f:
        operator = read_operator_state(f, source.handle.index) or None
    storage = CheckpointStorage(target_dir, "state-processor", filesystems)
    with storage.create_artifact(target_dir, stem, ".state") as out:
        new_index = write_state_file(out, source, operator)
    handle = StateHandle(
        file=out.name,
        size=out.size,
        checksum=out.checksum,
        index=new_index,
        key_group_range=source.key_group_range,
    )
    return source.subtask, handle
