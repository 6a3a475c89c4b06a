"""The RocksDB keyed state backend (`rocksdb`): keyed state on local disk, one column family per
state, keys prefixed by key group (layout: `rocksdb_codec`). State may be far larger than memory.

It has the interface and the value semantics of `HeapKeyedStateBackend`, with one difference
users can see: a value changed in place after `update` (or `add`, `put`) is not stored until it
is written again, and changing a value that was read does not change the state (values that can
be changed in place are pickled when written and unpickled when read; immutable ones are shared).

Hot path (DESIGN §8): value, reducing and aggregating state keep the values of up to
`value_cache_entries` keys per state as Python objects (`rocksdb_cache`): an access of a cached
key is a dict access, with no pickle and no RocksDB call; dirty values are pickled and written
to RocksDB in batches (`rocksdb_buffer`). List and map state, and a value-like state's cache
misses, use the key bytes of the current key (key group + canonical encoding), computed once
per key and memoised (as many keys as the value cache holds); a list or map state access is a
pickle plus a dict access in the write buffer or one RocksDB read.

Snapshots: the synchronous phase hard-links the database's files into a checkpoint directory
(`RocksDBInstance.checkpoint`, which flushes the memtables first); the asynchronous phase reads
that directory and writes the canonical per-key-group state file (`rocksdb_snapshot`), so
hashmap and rocksdb jobs restore from each other's checkpoints and savepoints.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import rocksdict

from tidegate.state import rocksdb_codec as codec
from tidegate.state.handles import ROCKSDB_FILES
from tidegate.state.heap import CONTAINER_KINDS, NoKeyContextError
from tidegate.state.heap_changelog import ChangeLog
from tidegate.state.heap_incremental import HeapIncrementalSnapshot, chain_of
from tidegate.state.keyed_registry import KeyedStateRegistry, StateKind, check_key_group_range
from tidegate.state.keygroups import KeyGroupAssigner
from tidegate.state.rocksdb_cache import KeyPrefixes
from tidegate.state.rocksdb_changelog import (
    Plan,
    RocksDBRebaseSnapshot,
    changes_of,
    plan_checkpoint,
)
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle, IncrementalTracker
from tidegate.state.rocksdb_instance import RocksDBInstance, RocksDBOptions, create_instance_dir
from tidegate.state.rocksdb_restore import restore_rocksdb_backend
from tidegate.state.rocksdb_snapshot import RocksDBKeyedStateSnapshot, decode_entries
from tidegate.state.rocksdb_states import (
    RocksDBAggregatingState,
    RocksDBListState,
    RocksDBMapState,
    RocksDBReducingState,
    RocksDBValueState,
)
from tidegate.state.snapshot_format import (
    KeyedStateSnapshot,
    KeyGroupData,
    describe_key_groups,
)
from tidegate.state.ttl.factory import snapshot_transformers


class RocksDBKeyedStateBackend(KeyedStateRegistry):
    """Keyed state of one operator subtask in its own RocksDB instance.

    The runtime sets `current_key` before each record and timer (None after). Call `dispose()`
    when the subtask ends: it closes the database and deletes its directory.
    """

    STATE_CLASSES = {
        StateKind.VALUE: RocksDBValueState,
        StateKind.LIST: RocksDBListState,
        StateKind.MAP: RocksDBMapState,
        StateKind.REDUCING: RocksDBReducingState,
        StateKind.AGGREGATING: RocksDBAggregatingState,
    }

    def __init__(
        self,
        max_parallelism: int,
        key_group_range: range,
        options: RocksDBOptions | None = None,
        *,
        job_id: str = "",
        operator_uid: str = "keyed",
        subtask: int = 0,
        attempt: int = 0,
        incremental: bool = False,
        changelog: bool = False,
    ) -> None:
        check_key_group_range(max_parallelism, key_group_range)
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.options = options or RocksDBOptions()
        path = create_instance_dir(self.options, job_id, operator_uid, subtask, attempt)
        self.instance = RocksDBInstance(path, self.options, changelog)
        # a backend dropped without dispose() (its task failed to start) still frees its files
        self._close_instance = weakref.finalize(self, self.instance.close)
        self.buffer = self.instance.buffer
        #: keys per value-like state in the value cache (rocksdb_cache)
        self.cache_entries = self.options.value_cache_entries
        self._current_key: Any = None
        #: key bytes of the current key (None: not computed since it was set)
        self._prefix: bytes | None = None
        #: the key bytes of a key (memoised, as many keys as the value cache holds)
        self.prefix_of = KeyPrefixes(max_parallelism, self.cache_entries)
        self._kinds: dict[str, StateKind] = {}
        self._value_types: dict[str, Any] = {}  # declared, not used: values are pickled
        self._states: dict[str, Any] = {}
        self._column_families: dict[str, rocksdict.Rdict] = {}
        self._restored_key_groups: set[int] = set()
        #: incremental checkpoints: which SST files are uploaded (None: full snapshots)
        self.tracker = IncrementalTracker() if incremental or changelog else None
        #: changelog checkpoints (rocksdb_changelog): the entries changed since the base
        self._changes = ChangeLog() if changelog else None
        #: key -> key group, memoised across changelogs (their asynchronous phase's main cost)
        self.key_groups = KeyGroupAssigner(max_parallelism)

    # the current key ---------------------------------------------------------------------------
    @property
    def current_key(self) -> Any:
        return self._current_key

    @current_key.setter
    def current_key(self, key: Any) -> None:
        self._current_key = key
        self._prefix = None

    def current_prefix(self, state_name: str) -> bytes:
        """The key bytes of the current key; raises NoKeyContextError if there is none."""
        prefix = self._prefix
        if prefix is None:
            key = self._current_key
            if key is None:
                raise NoKeyContextError(
                    f"keyed state {state_name!r} is only available on a keyed stream (after "
                    "key_by), inside process_element/on_timer where a current key is set"
                )
            prefix = self._prefix = self.prefix_of(key)
        return prefix

    # states ------------------------------------------------------------------------------------
    def _create_state(self, name: str, cls: type[Any], *args: Any) -> Any:
        return cls(self, name, self._column_family(name), *args)

    def _column_family(self, name: str) -> rocksdict.Rdict:
        cf = self._column_families.get(name)
        if cf is None:
            cf = self._column_families[name] = self.instance.column_family(name)
        return cf

    def entries(self, name: str) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every key of state `name` (a list or dict for list and map state)."""
        kind = self._kinds.get(name)
        if kind is None:
            return iter(())
        self.buffer.flush()
        items = self._column_family(name).items()
        return (entry for _, entries in decode_entries(kind, items) for entry in entries.items())

    # snapshots ---------------------------------------------------------------------------------
    def snapshot(
        self, checkpoint_id: int | None = None
    ) -> RocksDBKeyedStateSnapshot | KeyedStateSnapshot:
        """The synchronous phase: hard-link the database's files (flushing memtables first).
        The same for a checkpoint (`checkpoint_id`) and a savepoint (None): the asynchronous
        phase decides whether it is uploaded incrementally."""
        if not self._kinds:  # no state yet: nothing to copy
            return KeyedStateSnapshot(self.max_parallelism, self.key_group_range, {})
        if self._changes is not None and checkpoint_id is not None:
            return self._changelog_snapshot(checkpoint_id, self._changes)
        return self._rocksdb_snapshot(self.instance.checkpoint())

    def _rocksdb_snapshot(self, path: str) -> RocksDBKeyedStateSnapshot:
        snapshot = RocksDBKeyedStateSnapshot(
            self.max_parallelism,
            self.key_group_range,
            {name: kind.value for name, kind in self._kinds.items()},
            path,
            self.options,
            snapshot_transformers(self),  # state TTL: cleanup in full snapshot
        )
        snapshot.tracker = self.tracker  # checkpoints upload it incrementally when set
        return snapshot

    def _changelog_snapshot(
        self, checkpoint_id: int, changes: ChangeLog
    ) -> HeapIncrementalSnapshot | RocksDBRebaseSnapshot:
        """A changelog checkpoint's synchronous phase (rocksdb_changelog): extend the base's
        chain with the entries changed since it, or rebase it on a RocksDB checkpoint."""
        assert self.tracker is not None
        since_base = changes.capture(checkpoint_id, self.buffer.checkpointed())
        base_id, base = self.tracker.current_base()
        chain = chain_of(base)
        containers = any(kind in CONTAINER_KINDS for kind in self._kinds.values())
        plan = plan_checkpoint(chain, containers)
        transformers = snapshot_transformers(self)
        kinds = {name: kind.value for name, kind in self._kinds.items()}
        if plan is Plan.EXTEND:
            content = changes_of(self, since_base, transformers)
            return HeapIncrementalSnapshot(
                content, base_id, chain, self.tracker, kinds, ROCKSDB_FILES
            )
        if plan is Plan.MATERIALIZE:
            self.buffer.flush()
        pending = self.buffer.pending()
        path = self.instance.checkpoint(flush=False)
        newer = changes_of(self, pending, transformers) if pending else None
        return RocksDBRebaseSnapshot(self._rocksdb_snapshot(path), newer, self.tracker)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.tracker is not None:
            self.tracker.notify_complete(checkpoint_id)
        if self._changes is not None:
            self._changes.notify_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if self.tracker is not None:
            self.tracker.notify_aborted(checkpoint_id)

    def restore_incremental(self, handles: list[IncrementalKeyedStateHandle]) -> None:
        """Restore from incremental handles (rocksdb_restore): open the downloaded database
        at the same key groups, else copy each handle's share of key groups as a range."""
        restore_rocksdb_backend(self, handles)
        if self._changes is not None:
            self._changes.reset()

    def restore(self, key_groups: Iterable[tuple[int, KeyGroupData]]) -> None:
        """Load key groups read from state files, before the first record is processed.

        The same contract and checks as `HeapKeyedStateBackend.restore`.
        """
        self.buffer.flush()  # restored entries are written directly, after anything buffered
        self.buffer.discard()  # and cached values may not know them
        for kg, data in key_groups:
            self._claim_restored_key_group(kg)
            batch = rocksdict.WriteBatch(raw_mode=True)
            for name, (kind, entries) in data.items():
                known = self._check_restored_entries(kg, name, kind, entries)
                self._column_family(name)
                self._put_entries(batch, self.instance.handle(name), known, entries)
            self.instance.write(batch)

    def _put_entries(
        self, batch: rocksdict.WriteBatch, cf: Any, kind: StateKind, entries: dict[Any, Any]
    ) -> None:
        dumps = codec.dumps
        for key, value in entries.items():
            prefix = codec.key_prefix(key, self.max_parallelism)
            if kind is StateKind.LIST:
                if value:
                    batch.put(prefix, codec.dumps_list(key, list(value)), cf)
            elif kind is StateKind.MAP:
                for user_key, user_value in value.items():
                    raw = prefix + codec.user_key_bytes(user_key)
                    batch.put(raw, dumps((key, user_key, user_value)), cf)
            elif value is not None:
                batch.put(prefix, dumps((key, value)), cf)

    def dispose(self) -> None:
        """Close the database and delete its directory (the backend is unusable afterwards)."""
        self._states.clear()
        self._column_families.clear()
        self._close_instance()  # closes the column families too

    def __repr__(self) -> str:
        return (
            f"RocksDBKeyedStateBackend({self.instance.path!r}, "
            f"key groups {describe_key_groups(self.key_group_range)})"
        )
