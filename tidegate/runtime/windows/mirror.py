"""Keyed map state entries mirrored in memory, for the batched window paths on backends
without a heap table (rocksdb).

The batched paths (sessions.py, slicing.py) read a key's entries of one map state many times
(every batch that touches the key, every firing), and on the heap they read the backend's live
table. On RocksDB each read of a key's entries is a prefix scan that decodes them, and a scan
walks the deletions of every entry the key ever had until a compaction drops them (windows
come and go: ~120 us a scan after a few hundred windows). A `KeyMirror` reads a key's entries
with one scan the first time and keeps them; the path writes through the state as before and
tells the mirror what it changed, so the mirror equals the state for every key it holds. It
holds at most MAX_MIRRORED_KEYS keys; beyond, the older half is forgotten (read again when
needed).
"""

from __future__ import annotations

from typing import Any

#: keys a mirror holds at most (beyond, the older half is forgotten)
MAX_MIRRORED_KEYS = 65_536


class KeyMirror:
    """`get(key)` is the key's {user key: value} like the heap backend's table (None: no
    entries); the backend's current key must be `key` when it is read."""

    __slots__ = ("_items", "_keys")

    def __init__(self, state: Any) -> None:
        self._items = state.items  # of the backend's current key
        self._keys: dict[Any, dict[Any, Any]] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        entries = self._keys.get(key)
        if entries is None:
            keys = self._keys
            if len(keys) >= MAX_MIRRORED_KEYS:
                for old in list(keys)[: len(keys) // 2]:
                    del keys[old]
            entries = keys[key] = dict(self._items())
        return entries or default

    def put(self, key: Any, user_key: Any, value: Any) -> None:
        """`user_key` of `key` was written."""
        entries = self._keys.get(key)
        if entries is not None:
            entries[user_key] = value

    def put_all(self, key: Any, entries: dict[Any, Any]) -> None:
        mirrored = self._keys.get(key)
        if mirrored is not None:
            mirrored.update(entries)

    def remove(self, key: Any, user_key: Any) -> None:
        """`user_key` of `key` was removed."""
        entries = self._keys.get(key)
        if entries is not None:
            entries.pop(user_key, None)
