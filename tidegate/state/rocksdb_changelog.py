"""Changelog checkpoints of the rocksdb backend (`state.backend.changelog.enabled`).

Without it, every checkpoint writes the value caches' dirty entries to RocksDB (a pickle and a
`WriteBatch.put` per key) and hard-links the database: with many keys, each update costs a
RocksDB write. With it (Flink's changelog state backend, FLIP-158, adapted to the value cache of
`rocksdb_cache`), a checkpoint's state is a **chain**, as the hashmap backend's incremental
checkpoints (state/heap_changelog.py):

- the files of a RocksDB checkpoint (SST files, and the MANIFEST, CURRENT and OPTIONS files, all
  in `<job dir>/shared/`, so that later checkpoints can reference them), then
- changelogs, oldest first: canonical state files of changes (`{state: (kind, {key: value},
  [removed keys])}` per key group, heap_changelog's format) holding the value caches' entries
  that are newer than what those RocksDB files have.

Each checkpoint is one of (`plan_checkpoint`, pure):

- EXTEND: the chain of the last completed checkpoint plus one changelog of every entry changed
  since it (`heap_changelog.ChangeLog`; the entries stay in memory, pending, not written to
  RocksDB);
- REBASE: a RocksDB checkpoint as the database is now (no flush), plus one changelog of the
  pending entries (those not in RocksDB): when there is no chain yet, or the chain has
  MAX_CHANGELOGS changelogs (which bounds what a restore replays);
- MATERIALIZE: flush everything to RocksDB, then a RocksDB checkpoint alone (today's incremental
  checkpoint): when a list or map state is registered (their writes go to RocksDB, not into
  changelogs).

Pending entries reach RocksDB only when a state's cache would forget one (its bound: at most
`state.backend.rocksdb.value-cache.entries` keys), at a MATERIALIZE, a savepoint (canonical, as
before), or a read of RocksDB as a whole (`entries()`, a map scan).

Restore (`replay`, `with_changelogs`): the RocksDB files as before (the whole database, or each
old database's key-group range when rescaled), then the changelogs' changes of the restored key
groups, in order; backends other than rocksdb (and the State Processor API) read the key groups
of the RocksDB files and apply the changes (`heap_changelog.apply_changes`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rocksdict

from tidegate.state import rocksdb_codec as codec
from tidegate.state.handles import ROCKSDB_FILES, IncrementalFile, IncrementalHandle
from tidegate.state.heap import CONTAINER_KINDS, StateKind
from tidegate.state.heap_changelog import (
    CHANGELOG,
    ChainFile,
    KeyedStateChanges,
    apply_changes,
    chain_name,
)
from tidegate.state.heap_incremental import (
    chain_handle,
    chain_of,
    read_chain,
    write_chain_file,
)
from tidegate.state.incremental_handles import resolve
from tidegate.state.rocksdb_cache import ABSENT, Serialized
from tidegate.state.rocksdb_incremental import (
    IncrementalKeyedStateHandle,
    IncrementalTracker,
    delete_quietly,
    shared_base,
    upload_incremental,
)
from tidegate.state.snapshot_format import CorruptStateError, KeyedStateSnapshot, KeyGroupData

#: changelogs a chain may have before the next checkpoint rebases it
MAX_CHANGELOGS = 10
#: the RocksDB file every database has: a chain with it holds a whole database
CURRENT = "CURRENT"


class Plan(enum.Enum):
    EXTEND = "extend"
    REBASE = "rebase"
    MATERIALIZE = "materialize"


def plan_checkpoint(chain: Sequence[ChainFile], containers: bool) -> Plan:
    """What the next checkpoint writes, given the base's chain (empty: no completed checkpoint
    of this backend) and whether list or map state is registered."""
    if containers:
        return Plan.MATERIALIZE
    if not any(f.name == CURRENT for f in chain):  # none, or not a changelog chain
        return Plan.REBASE
    if sum(f.is_changelog for f in chain) >= MAX_CHANGELOGS:
        return Plan.REBASE
    return Plan.EXTEND


def stored_value(transform: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """A cached value (`Serialized`, ABSENT or the value) -> the value, None if absent, then
    through `transform` (state TTL's cleanup in full snapshot) when there is one."""
    loads = codec.loads

    def value_of(cached: Any) -> Any:
        if cached is ABSENT:
            return None
        value = loads(cached.raw)[1] if type(cached) is Serialized else cached
        return value if transform is None or value is None else transform(value)

    return value_of


def changes_of(
    backend: Any,
    cached: Mapping[str, dict[Any, Any]],
    transformers: Mapping[str, Callable[[Any], Any]],
) -> KeyedStateChanges:
    """A changelog of the rocksdb `backend`'s cached entries (state -> {key: cached value};
    owned by the result), key groups from the backend's memo (`key_groups`)."""
    tables = {name: (backend._kinds[name].value, e) for name, e in cached.items() if e}
    return KeyedStateChanges(
        KeyedStateSnapshot(
            backend.max_parallelism,
            backend.key_group_range,
            tables,
            backend.key_groups.key_group,
            transformers={name: stored_value(transformers.get(name)) for name in tables},
        ),
        {},
    )


@dataclass(frozen=True)
class RocksDBRebaseSnapshot:
    """The synchronous phase of a REBASE or MATERIALIZE checkpoint: a RocksDB checkpoint
    directory (a `RocksDBKeyedStateSnapshot`) and the changes newer than it (None: none)."""

    rocksdb: Any
    changes: KeyedStateChanges | None
    tracker: IncrementalTracker

    @property
    def key_group_range(self) -> range:
        return self.rocksdb.key_group_range

    @property
    def max_parallelism(self) -> int:
        return self.rocksdb.max_parallelism

    @property
    def state_kinds(self) -> dict[str, str]:
        return self.rocksdb.state_kinds

    def upload(
        self, storage: Any, checkpoint_dir: str, stem: str, checkpoint_id: int
    ) -> IncrementalHandle:
        """The asynchronous phase: the RocksDB files (new SST files and every other file) and
        the changelog into `shared/`; the handle lists the chain."""
        try:
            inc = upload_incremental(
                self.rocksdb.path,
                storage,
                checkpoint_dir,
                stem,
                checkpoint_id,
                self.tracker,
                self.rocksdb,
                share_private=True,
            )
        finally:
            self.rocksdb.discard()
        if self.changes is None:
            return inc
        try:
            new = write_chain_file(storage, self.changes, stem, chain_name(False, checkpoint_id))
        except BaseException:
            for f in inc.shared:
                if f.uploaded:
                    delete_quietly(storage, resolve(checkpoint_dir, f.file))
            raise
        chain = (*chain_of(shared_base(checkpoint_dir, inc)), new)
        uploaded = {f.name for f in inc.shared if f.uploaded} | {new.name}
        return chain_handle(
            self.tracker,
            checkpoint_id,
            inc.base_checkpoint_id,
            chain,
            uploaded,
            checkpoint_dir,
            self,
            ROCKSDB_FILES,
        )


def changelogs(inc: IncrementalHandle) -> list[IncrementalFile]:
    """The changelogs of a rocksdb handle's chain, oldest first (none without the changelog)."""
    return [f for f in inc.shared if f.name.startswith(CHANGELOG)]


def _changes(
    h: IncrementalKeyedStateHandle,
) -> Iterator[tuple[int, list[tuple[str, Any]]]]:
    """The restored key groups' changes in `h`'s changelogs: (kg, [(where, changes), ...])."""
    entries = changelogs(h.handle)
    if not entries:
        return
    for kg, groups in read_chain(h, entries):
        yield (
            kg,
            [
                (f"key group {kg} of {entry.file} (the rocksdb changelog of {h.checkpoint_dir})", c)
                for entry, c in zip(entries, groups, strict=True)
                if c
            ],
        )


def replay(backend: Any, h: IncrementalKeyedStateHandle) -> None:
    """Write the changes of `h`'s changelogs for `h.key_groups` into the rocksdb `backend`,
    whose database holds `h`'s RocksDB files' entries of those key groups already."""
    m = backend.max_parallelism
    dumps = codec.dumps
    for _, changes in _changes(h):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for where, group in changes:
            for name, change in group.items():
                if len(change) != 3:
                    raise CorruptStateError(where, f"state {name!r} holds entries, not changes")
                kind, upserts, removed = change
                if StateKind(kind) in CONTAINER_KINDS:
                    raise CorruptStateError(
                        where,
                        f"state {name!r} is {kind} state: rocksdb changelogs hold value, "
                        "reducing and aggregating state only",
                    )
                backend._kinds.setdefault(name, StateKind(kind))
                backend._column_family(name)
                cf = backend.instance.handle(name)
                for key in removed:
                    batch.delete(codec.key_prefix(key, m), cf)
                for key, value in upserts.items():
                    batch.put(codec.key_prefix(key, m), dumps((key, value)), cf)
        backend.instance.write(batch)


def with_changelogs(
    h: IncrementalKeyedStateHandle, base: Iterator[tuple[int, KeyGroupData]]
) -> Iterator[tuple[int, KeyGroupData]]:
    """The key groups of `base` (`h`'s RocksDB files, ascending) with `h`'s changelogs
    applied, ascending (key groups only the changelogs have included)."""
    changes = _changes(h)
    b, c = next(base, None), next(changes, None)
    while b is not None or c is not None:
        if c is None or (b is not None and b[0] < c[0]):
            assert b is not None
            yield b
            b = next(base, None)
            continue
        kg, groups = c
        data: KeyGroupData = {}
        if b is not None and b[0] == kg:
            data = b[1]
            b = next(base, None)
        for where, group in groups:
            apply_changes(data, group, where)
        if data:
            yield kg, data
        c = next(changes, None)
