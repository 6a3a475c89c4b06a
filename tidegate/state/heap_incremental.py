"""Incremental checkpoints of the hashmap backend: writing a checkpoint's materialization or
changelog into `<job dir>/shared/`, and reading a chain back key group by key group (the design
and the pure logic are in state/heap_changelog.py; the format in docs/checkpoint-format.md).

The chain's files are canonical state files (snapshot_format): a materialization holds every
key group as `{state: (kind, {key: value})}`, a changelog holds the changed key groups as
`{state: (kind, {key: new value}, [removed keys])}`. Every backend (and the state processor)
restores a chain through `read_changelog_key_groups`, which yields canonical key groups.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from tidegate.state.handles import HEAP_CHANGELOG, IncrementalFile, IncrementalHandle
from tidegate.state.heap_changelog import ChainFile, apply_changes, chain_name, check_chain
from tidegate.state.incremental_handles import relative_to, resolve, shared_dir
from tidegate.state.rocksdb_incremental import (
    IncrementalKeyedStateHandle,
    IncrementalTracker,
    delete_quietly,
)
from tidegate.state.snapshot_format import (
    CorruptStateError,
    KeyedStateSnapshot,
    KeyGroupData,
    read_index,
    read_key_group,
    write_state_file,
)


def chain_of(base: Mapping[str, Mapping[str, Any]]) -> tuple[ChainFile, ...]:
    """A tracker's base (name -> path, size, checksum; in chain order) as chain files."""
    return tuple(
        ChainFile(name, info["path"], int(info["size"] or 0), info["checksum"])
        for name, info in base.items()
    )


@dataclass(frozen=True)
class HeapIncrementalSnapshot:
    """The synchronous phase of an incremental heap checkpoint: a full snapshot (to be
    materialized) or the changes since the base, and the base's chain it extends (also the
    rocksdb backend's changelog checkpoints, `backend` ROCKSDB_FILES: state/rocksdb_changelog)."""

    #: a KeyedStateSnapshot (materialization) or a KeyedStateChanges (changelog)
    content: Any
    #: the completed checkpoint whose chain this one extends (None: none)
    base_id: int | None
    chain: tuple[ChainFile, ...]
    tracker: IncrementalTracker
    state_kinds: Mapping[str, str]
    #: the handle's `backend`: what the chain's first files are
    backend: str = HEAP_CHANGELOG

    @property
    def materialized(self) -> bool:
        return isinstance(self.content, KeyedStateSnapshot)

    @property
    def key_group_range(self) -> range:
        return self.content.key_group_range

    @property
    def max_parallelism(self) -> int:
        return self.content.max_parallelism

    def upload(
        self, storage: Any, checkpoint_dir: str, stem: str, checkpoint_id: int
    ) -> IncrementalHandle:
        """The asynchronous phase: write the new file into `shared/`; the handle's incremental
        part (the chain, oldest first). The new file becomes the next checkpoints' base once
        the tracker is told `checkpoint_id` completed."""
        name = chain_name(self.materialized, checkpoint_id)
        new = write_chain_file(storage, self.content, stem, name)
        chain = (new,) if self.materialized else (*self.chain, new)
        return chain_handle(
            self.tracker,
            checkpoint_id,
            self.base_id,
            chain,
            {new.name},
            checkpoint_dir,
            self,
            self.backend,
        )


def write_chain_file(storage: Any, content: Any, stem: str, name: str) -> ChainFile:
    """Write `content` (a snapshot or changes) as the chain file `name` into `shared/`."""
    shared_root = shared_dir(storage.job_dir)
    out = storage.create_artifact(shared_root, f"{stem}-{name.partition('-')[0]}", ".state")
    try:
        with out:
            write_state_file(out, content, None)
    except BaseException:
        delete_quietly(storage, f"{shared_root}/{out.name}")
        raise
    return ChainFile(name, f"{shared_root}/{out.name}", out.size, out.checksum)


def chain_handle(
    tracker: IncrementalTracker,
    checkpoint_id: int,
    base_id: int | None,
    chain: tuple[ChainFile, ...],
    uploaded: set[str],
    checkpoint_dir: str,
    snapshot: Any,
    backend: str,
) -> IncrementalHandle:
    """Record `chain` (the files named in `uploaded` are new) as checkpoint `checkpoint_id`'s
    in the tracker; its handle (`snapshot`: key groups, max parallelism, state kinds)."""
    tracker.record(
        checkpoint_id,
        {f.name: {"path": f.path, "size": f.size, "checksum": f.checksum} for f in chain},
    )
    shared = tuple(
        IncrementalFile(
            name=f.name,
            file=relative_to(checkpoint_dir, f.path),
            size=f.size,
            checksum=f.checksum,
            uploaded=f.name in uploaded,
        )
        for f in chain
    )
    return IncrementalHandle(
        backend_id=tracker.backend_id,
        base_checkpoint_id=base_id,
        key_group_range=snapshot.key_group_range,
        max_parallelism=snapshot.max_parallelism,
        state_kinds=dict(snapshot.state_kinds),
        shared=shared,
        private=(),
        backend=backend,
    )


def read_changelog_key_groups(h: IncrementalKeyedStateHandle) -> Iterator[tuple[int, KeyGroupData]]:
    """The key groups of `h.key_groups` that handle `h` (a chain) holds, ascending, canonical:
    each read from the materialization, then changed by the changelogs in order. All files
    stay open while the key groups are read; one key group is in memory at a time."""
    inc = h.handle
    where = f"the incremental hashmap state of {h.checkpoint_dir}"
    check_chain([f.name for f in inc.shared], where)
    for kg, (data, *changelogs) in read_chain(h, inc.shared):
        if any(len(entry) != 2 for entry in data.values()):
            raise CorruptStateError(
                f"key group {kg} of {inc.shared[0].file} ({where})",
                "it holds changes, not entries: this is not a materialization",
            )
        for entry, changes in zip(inc.shared[1:], changelogs, strict=True):
            apply_changes(data, changes, f"key group {kg} of {entry.file} ({where})")
        if data:
            yield kg, data


def read_chain(
    h: IncrementalKeyedStateHandle, entries: Sequence[IncrementalFile]
) -> Iterator[tuple[int, list[Any]]]:
    """The key groups of `h.key_groups` that any of the state files `entries` (of handle `h`)
    holds, ascending: each with what every file has for it, in the order of `entries` (empty
    if nothing). All files stay open while the key groups are read."""
    with ExitStack() as stack:
        files = []
        for entry in entries:
            files.append(
                stack.enter_context(h.filesystems.open(resolve(h.checkpoint_dir, entry.file)))
            )
            if h.reads is not None:
                h.reads.count(False)
        indexes = [read_index(f) for f in files]
        wanted = sorted(
            {kg for index in indexes for kg in index.key_group_offsets if kg in h.key_groups}
        )
        for kg in wanted:
            yield (
                kg,
                [read_key_group(f, index, kg) for f, index in zip(files, indexes, strict=True)],
            )
