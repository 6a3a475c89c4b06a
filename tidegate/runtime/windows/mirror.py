"""Keyed map state entries mirrored in memory, for the batched window paths on backends
without a heap table (rocksdb).

The batched paths (sessions.py, slicing.py) read a key's entries of one map state many times
(every batch that touches the key, every firing), and on the heap they read the backend's live
table. On RocksDB each read of a key's entries is a prefix scan that decodes them, and a scan
walks the deletions of every entry the key ever had until a compaction drops them (windows
come and go: ~120 us a scan after a few hundred windows). A `KeyMirror` reads a key's entries
with one scan the first time and keeps them; the path writes through the mirror, which writes
the state, so the mirror equals the state for every key it holds. It
holds at most MAX_MIRRORED_KEYS keys; beyond, the older half is forgotten (read again when
needed).
"""

from __future__ import annotations

from typing import Any

#: keys a mirror holds at most (beyond, the older half is forgotten)
MAX_MIRRORED_KEYS = 65_536


class KeyMirror:
    """A map state read like the heap backend's table and written like the state itself:
    `get(key)` is the key's {user key: value} (None: no entries; the backend's current key
    must be `key` when it is read), `put` / `put_all` / `remove` change the backend's current
    key's entries in the state and in the mirror."""

    __slots__ = ("_backend", "_keys", "_state")

    def __init__(self, backend: Any, state: Any) -> None:
        self._backend, self._state = backend, state
        self._keys: dict[Any, dict[Any, Any]] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        entries = self._keys.get(key)
        if entries is None:
            keys = self._keys
            if len(keys) >= MAX_MIRRORED_KEYS:
                for old in list(keys)[: len(keys) // 2]:
                    del keys[old]
            entries = keys[key] = dict(self._state.items())
        return entries or default

    def put(self, user_key: Any, value: Any) -> None:
        self._state.put(user_key, value)
        entries = self._keys.get(self._backend.current_key)
        if entries is not None:
            entries[user_key] = value

    def put_all(self, entries: dict[Any, Any]) -> None:
        self._state.put_all(entries)
        mirrored = self._keys.get(self._backend.current_key)
        if mirrored is not None:
            mirrored.update(entries)

    def remove(self, user_key: Any) -> None:
        self._state.remove(user_key)
        entries = self._keys.get(self._backend.current_key)
        if entries is not None:
            entries.pop(user_key, None)
