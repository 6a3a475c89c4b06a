"""A small write-back buffer in front of a RocksDB instance: the rocksdb backend's hot path.

A call into RocksDB from Python costs about a microsecond (the binding, not RocksDB), several
times a dict access. List and map state therefore write serialized values (bytes, so nothing
the user holds can change them) into one dict per state, and read through it. Value, reducing
and aggregating state keep their values as objects in a `StateCache` (`rocksdb_cache`)
registered here, serialized only when flushed. The buffer goes to RocksDB in one `WriteBatch`
when the list and map states hold `max_entries` entries or `max_bytes` bytes, or a state's
cache holds `max_entries` dirty keys, and before anything reads RocksDB directly: a snapshot's
checkpoint, a map state's scan or range delete, `entries()`. A deleted key is buffered as None.

Memory: at most `max_entries` keys and about `max_bytes` of serialized values of list and map
state (counted per write, so an overwritten value still counts: the bound errs on the safe
side); the caches' own bound is theirs (`rocksdb_cache`).

With the changelog (`changelog`, state/rocksdb_changelog.py) a state's cache holds up to its
own bound of dirty keys (not `max_entries`): a checkpoint persists them as a changelog instead
of flushing (`checkpointed`), and a flush writes the pending ones too.
"""

from __future__ import annotations

from typing import Any

import rocksdict

from tidegate.state.rocksdb_cache import ABSENT, Serialized, StateCache
from tidegate.state.rocksdb_codec import dumps

DEFAULT_MAX_ENTRIES = 16_384
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class WriteBuffer:
    """Buffered writes per state (column family), flushed together."""

    def __init__(
        self,
        write: Any,
        handle: Any,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        changelog: bool = False,
    ) -> None:
        #: write(batch) applies a WriteBatch; handle(name) is the column family of a state
        self._write = write
        self._handle = handle
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.changelog = changelog
        self._tables: dict[str, dict[bytes, bytes | None]] = {}
        self._caches: dict[str, StateCache] = {}
        self.entries = 0
        self.bytes = 0

    def table(self, name: str) -> dict[bytes, bytes | None]:
        """The buffer of state `name`: raw key -> raw value, None for a delete. Cleared in
        place on flush, so a state keeps the same dict for its whole life."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = {}
        return table

    def cache(self, name: str, prefix_of: Any, max_entries: int) -> StateCache:
        """The value cache of state `name` (one per state, flushed with the buffer)."""
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = StateCache(
                name, prefix_of, max_entries, self.flush, self.changelog
            )
        return cache

    def max_dirty(self, cache: StateCache) -> int:
        """Dirty keys of `cache` that make a write flush the buffer."""
        return cache.max_entries if self.changelog else self.max_entries

    def checkpointed(self) -> dict[str, dict[Any, Any]]:
        """Changelog: every cache's entries changed since the last checkpoint, by state (the
        caches' own dicts: the caller copies and empties them, `heap_changelog.ChangeLog
        .capture`)."""
        return {name: cache.checkpointed() for name, cache in self._caches.items()}

    def written(self, new_entries: int, size: int) -> None:
        """Count one buffered write of `size` bytes that added `new_entries` (0 or 1) keys;
        flush if the buffer is full."""
        self.entries += new_entries
        self.bytes += size
        if self.entries >= self.max_entries or self.bytes >= self.max_bytes:
            self.flush()

    def pending(self) -> dict[str, dict[Any, Any]]:
        """Changelog: copies of the caches' pending entries (in changelogs, not in RocksDB)."""
        return {name: dict(c.pending) for name, c in self._caches.items() if c.pending}

    def flush(self) -> None:
        """Write every buffered entry to RocksDB (one batch) and empty the buffer."""
        caches = self._caches.values()
        if not any(self._tables.values()) and not any(c.dirty or c.pending for c in caches):
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        for cache in caches:
            if cache.pending:  # older than the dirty entries: put first
                self._put_cached(batch, cache, cache.pending)
            if cache.dirty:
                self._put_cached(batch, cache, cache.dirty)
        for name, table in self._tables.items():
            if not table:
                continue
            handle = self._handle(name)
            for key, value in table.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        self._write(batch)
        for cache in caches:
            cache.flushed()
        self._clear_tables()

    def _put_cached(
        self, batch: rocksdict.WriteBatch, cache: StateCache, entries: dict[Any, Any]
    ) -> None:
        """`entries` of `cache` into `batch`, as `(key, value)` pickles."""
        handle = self._handle(cache.name)
        prefix_of = cache.prefix_of
        for key, value in entries.items():
            if value is ABSENT:
                batch.delete(prefix_of(key), handle)
            elif type(value) is Serialized:
                batch.put(prefix_of(key), value.raw, handle)
            else:
                batch.put(prefix_of(key), dumps((key, value)), handle)

    def discard(self) -> None:
        """Forget the buffered writes and the cached values (the database is being closed or
        replaced by restored files)."""
        for cache in self._caches.values():
            cache.clear()
        self._clear_tables()

    def _clear_tables(self) -> None:
        for table in self._tables.values():
            table.clear()
        self.entries = 0
        self.bytes = 0
