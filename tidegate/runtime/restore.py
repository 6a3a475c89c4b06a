"""State handed to one operator subtask on restore (planned by the JobMaster)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.runtime import faults
from tidegate.state.channel_state import read_channel_state
from tidegate.state.local_incremental import with_local_copies
from tidegate.state.local_recovery import LocalStateStore
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle
from tidegate.state.rocksdb_restore import restore_keyed_incremental
from tidegate.state.snapshot_format import KeyGroupData, StateFileIndex, read_key_groups

#: state files of one subtask downloaded at once on restore
MAX_PARALLEL_DOWNLOADS = 8

#: key of a subtask's channel state (unaligned checkpoints) in its ack and its restore plan
CHANNEL_STATE_KEY = "__channel_state__"


@dataclass(frozen=True)
class KeyedStateHandle:
    path: str  # absolute path or URI of an old subtask's state file
    index: StateFileIndex
    key_groups: range  # the key groups to read from it (its range ∩ the new subtask's)
    size: int | None = None  # as recorded in _metadata (task-local recovery compares them)
    checksum: str | None = None

    def source(self, local: LocalStateStore | None) -> tuple[str, bool]:
        """Where to read this file: the task-local copy if there is an intact one, else the
        checkpoint storage; and whether it is the local copy."""
        local_path = local.find(self.path, self.size, self.checksum) if local else None
        return (local_path, True) if local_path else (self.path, False)

    def read(
        self, path: str, filesystems: FileSystems = NO_OPTIONS
    ) -> Iterator[tuple[int, KeyGroupData]]:
        """The key groups this handle contributes, from `path` (see `source`)."""
        with filesystems.open(path) as f:
            yield from read_key_groups(f, self.index, self.key_groups)


@dataclass(frozen=True)
class RestoredOperatorState:
    keyed: tuple[KeyedStateHandle | IncrementalKeyedStateHandle, ...] = ()
    #: operator state of this subtask, already redistributed: name -> (mode, entries)
    operator_state: dict[str, Any] = field(default_factory=dict)

    def restore_keyed(
        self,
        backend: Any,
        local: LocalStateStore | None = None,
        filesystems: FileSystems = NO_OPTIONS,
    ) -> tuple[int, int]:
        """Load the keyed state into `backend`, reading the checkpoint storage with the job's
        `filesystems` options; returns (files read locally, remotely): state files, and each
        SST and private file of incremental rocksdb handles.

        A rescaled subtask reads parts of several old subtasks' files: they are downloaded in
        parallel (I/O overlaps) and loaded one after another in the planned order."""
        faults.restoring()
        incremental = [h for h in self.keyed if isinstance(h, IncrementalKeyedStateHandle)]
        inc_reads = (0, 0)
        if incremental:  # rocksdb incremental checkpoints (state/rocksdb_restore.py)
            incremental = [replace(h, filesystems=filesystems) for h in incremental]
            incremental = with_local_copies(incremental, local)
            restore_keyed_incremental(backend, incremental)
            reads = incremental[0].reads
            inc_reads = (reads.local, reads.remote)
        keyed = [h for h in self.keyed if isinstance(h, KeyedStateHandle)]
        sources = [h.source(local) for h in keyed]
        if len(keyed) == 1:  # the common case: stream it, key group by key group
            backend.restore(keyed[0].read(sources[0][0], filesystems))
        elif keyed:
            workers = min(len(keyed), MAX_PARALLEL_DOWNLOADS)
            with ThreadPoolExecutor(workers, thread_name_prefix="tidegate-restore") as pool:
                loaded = pool.map(
                    lambda hs: list(hs[0].read(hs[1][0], filesystems)),
                    zip(keyed, sources, strict=True),
                )
                for key_groups in loaded:  # in plan order, each as soon as it is read
                    backend.restore(key_groups)
        used_local = sum(1 for _, is_local in sources if is_local)
        return used_local + inc_reads[0], len(sources) - used_local + inc_reads[1]


@dataclass(frozen=True)
class RestoredChannelState:
    """The in-flight frames an unaligned checkpoint persisted for one subtask."""

    path: str  # absolute path or URI of the channel-state file

    def read(self, filesystems: FileSystems = NO_OPTIONS) -> list[tuple[int, list[Any]]]:
        with filesystems.open(self.path) as f:
            return read_channel_state(f, self.path)
