"""The rocksdb backend's cache of values: value, reducing and aggregating state read and written
as Python objects, serialized only when they go to RocksDB.

A `StateCache` maps a key (the object the job keyed by) to the state's value for it:

* an immutable value (`immutable.is_immutable`: numbers, strings, tuples of them ...) is held
  as the object itself: reading it returns that object and writing it stores it, no pickle.
  Nobody can change it after `update`, so this keeps the rocksdb backend's copy semantics:
  what was written is what is stored;
* any other value (a list, a dict, a user object) is pickled when it is written (`Serialized`)
  and unpickled on every read, as before the cache: changing it after `update`, or changing what
  `value()` returned, does not change the state until it is written again (Flink's RocksDB
  semantics; the hashmap backend shares the object instead);
* `ABSENT`: the key has no value (none in RocksDB, or removed).

A write goes to the state's dirty entries. `WriteBuffer.flush` writes them to RocksDB in one
batch, pickled as `(key, value)` (`rocksdb_codec`'s layout, unchanged), and makes them clean
values; a read looks at the dirty entries, then the clean ones, then RocksDB (and caches what
it read). A state flushes the buffer when it has `WriteBuffer.max_entries` dirty keys (so a
snapshot's flush stays short), and a snapshot's synchronous phase flushes first, so a
checkpoint holds every update made before its barrier.

Memory: at most `max_entries` clean values per state, plus the dirty ones. When there are more,
the older half of the clean values, in the order they entered the cache, is forgotten; a
forgotten key's next access reads RocksDB again.

With the changelog (`state.backend.changelog.enabled`, state/rocksdb_changelog.py) a checkpoint
does not flush: `checkpointed()` moves the dirty entries to the clean values and to `pending`
(in a checkpoint's changelog, not yet in RocksDB), and `changed` collects every key changed
since the last checkpoint with its value (the dirty entries, and those a flush wrote meanwhile)
for the next changelog. A flush writes the pending entries too; the cache flushes before it
would forget a pending value (`bound`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from tidegate.state.rocksdb_codec import key_prefix

#: keys cached per state before the older half is dropped (a few hundred bytes each for small
#: values: the key, the value and the dict slot)
DEFAULT_MAX_ENTRIES = 1 << 20

#: `get(key, MISSING)` of a cache or buffer is MISSING: not there, read RocksDB
MISSING: Any = object()
#: a cached key without a value (none stored, or removed: deleted from RocksDB when flushed)
ABSENT: Any = object()


class KeyPrefixes:
    """The RocksDB key bytes of keys (`rocksdb_codec.key_prefix`), memoised: at most `limit`
    keys, then the memo starts again. Holds no reference to the backend (the caches keep it)."""

    __slots__ = ("_memo", "limit", "max_parallelism")

    def __init__(self, max_parallelism: int, limit: int) -> None:
        self.max_parallelism = max_parallelism
        self.limit = limit
        self._memo: dict[Any, bytes] = {}

    def __call__(self, key: Any) -> bytes:
        prefix = self._memo.get(key)
        if prefix is None:
            if len(self._memo) >= self.limit:
                self._memo.clear()
            prefix = self._memo[key] = key_prefix(key, self.max_parallelism)
        return prefix


class Serialized:
    """A cached value that is not immutable: its stored pickle `(key, value)`."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


class StateCache:
    """The cached values of one state (column family): those RocksDB has, and newer ones."""

    __slots__ = (
        "changed",
        "dirty",
        "flush",
        "max_entries",
        "name",
        "pending",
        "prefix_of",
        "values",
    )

    def __init__(
        self,
        name: str,
        prefix_of: Callable[[Any], bytes],
        max_entries: int,
        flush: Callable[[], None],
        changelog: bool = False,
    ) -> None:
        self.name = name
        #: key -> its RocksDB key bytes (the backend's `KeyPrefixes`)
        self.prefix_of = prefix_of
        self.max_entries = max_entries
        #: writes every dirty and pending entry to RocksDB (the buffer's flush)
        self.flush = flush
        #: key -> value, `Serialized` or ABSENT, as RocksDB (or, when pending, a changelog) has it
        self.values: dict[Any, Any] = {}
        #: key -> value, `Serialized` or ABSENT, written since the last flush or checkpoint
        self.dirty: dict[Any, Any] = {}
        #: changelog only (else None): entries in a checkpoint's changelog, not yet in RocksDB
        self.pending: dict[Any, Any] | None = {} if changelog else None
        #: changelog only: key -> newest value, changed since the last checkpoint and flushed
        self.changed: dict[Any, Any] | None = {} if changelog else None

    def flushed(self) -> None:
        """The dirty (and pending) entries are in RocksDB now: they are clean values."""
        if self.changed is not None and self.pending is not None:
            self.changed.update(self.dirty)
            self.pending.clear()
        self.values.update(self.dirty)
        self.dirty.clear()
        self.bound()

    def checkpointed(self) -> dict[Any, Any]:
        """Changelog: a checkpoint takes every entry changed since the last one (key -> value,
        `Serialized` or ABSENT), returned: the caller copies it and empties it
        (`heap_changelog.ChangeLog.capture`). The dirty entries become clean values, pending
        until a flush writes them to RocksDB (the next miss bounds the cache)."""
        changed, pending = self.changed, self.pending
        assert changed is not None and pending is not None, "not a changelog cache"
        dirty = self.dirty
        pending.update(dirty)
        self.values.update(dirty)
        if not changed:  # nothing flushed since the last checkpoint: the dirty entries
            return dirty
        changed.update(dirty)
        dirty.clear()
        return changed

    def bound(self) -> None:
        """Beyond `max_entries` clean values: forget the older half (after writing the pending
        ones to RocksDB: a forgotten key is read from there)."""
        values = self.values
        if len(values) > self.max_entries:
            if self.pending:
                self.flush()  # ends with bound() again, with nothing pending
                return
            kept = list(itertools.islice(values.items(), len(values) // 2, None))
            values.clear()
            values.update(kept)

    def clear(self) -> None:
        """Forget every entry, dirty ones too (the instance is being disposed or replaced)."""
        self.values.clear()
        self.dirty.clear()
        if self.pending is not None and self.changed is not None:
            self.pending.clear()
            self.changed.clear()
