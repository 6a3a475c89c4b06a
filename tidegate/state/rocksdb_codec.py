"""How the `rocksdb` state backend lays keyed state out in RocksDB keys and values.

Keys (bytes, compared as unsigned bytes by RocksDB)::

    key group (u16 BE) | len(encoded key) (u32 BE) | encoded key [| encoded user key]

The encoded key is the canonical encoding the key-group hash is computed from
(`keygroups._encode`): equal keys give equal bytes. Big-endian key groups first make a key-group
range one contiguous run of keys (scanned, deleted or ingested as a range); the length makes the
per-key prefix unambiguous, so the entries of one key's map state are a contiguous run too.

Values are pickles (plain pickle, cloudpickle for what pickle refuses, such as classes defined in
the job script) and carry the original key objects, so a snapshot writes the very keys the job
used: value, reducing and aggregating state store `(key, value)`; map state stores
`(key, user key, value)` per user key; list state stores `key` followed by one pickle per
element, so adding an element appends bytes without unpickling the list.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from typing import Any

import cloudpickle

from tidegate.common import pickling
from tidegate.state.keygroups import _encode, _fmix32

_PREFIX = struct.Struct(">HI")
_HEAD = _PREFIX.size
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_crc32 = zlib.crc32
_pack_prefix = _PREFIX.pack

loads = pickle.loads


def key_prefix(key: Any, max_parallelism: int) -> bytes:
    """The key bytes of `key` (its key group first); equal to `stable_hash`'s placement."""
    encoded = _encode(key)
    key_group = _fmix32(_crc32(encoded)) % max_parallelism
    return _pack_prefix(key_group, len(encoded)) + encoded


#: user key -> its encoding, memoised: map states of many keys mostly share their user keys (a
#: window operator's windows, a timer service's timestamps). Sound because equal keys encode
#: equally (1 and 1.0 alike); cleared when full
_USER_KEYS: dict[Any, bytes] = {}
_USER_KEYS_LIMIT = 1 << 14


def user_key_bytes(user_key: Any) -> bytes:
    """The suffix of a map state entry for `user_key`."""
    try:
        encoded = _USER_KEYS.get(user_key)
    except TypeError:  # unhashable: _encode raises the actionable error (or encodes it)
        return _encode(user_key)
    if encoded is None:
        if len(_USER_KEYS) >= _USER_KEYS_LIMIT:
            _USER_KEYS.clear()
        encoded = _USER_KEYS[user_key] = _encode(user_key)
    return encoded


def key_group_of(raw_key: bytes) -> int:
    return (raw_key[0] << 8) | raw_key[1]


def entry_prefix(raw_key: bytes) -> bytes:
    """The per-key prefix of a stored key (for map entries: without the user key)."""
    (length,) = struct.unpack_from(">I", raw_key, 2)
    return raw_key[: _HEAD + length]


def key_group_bound(key_group: int) -> bytes:
    """The smallest key of `key_group` (the exclusive end of the key groups before it)."""
    return key_group.to_bytes(2, "big")


def successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with `prefix`."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes([stripped[-1] + 1])


def dumps(obj: Any) -> bytes:
    """`common.pickling.dumps` without its by-value registry check (a fifth of a small value's
    pickling): values are written in the slots, where nothing is registered by value."""
    try:
        return pickle.dumps(obj, _PROTOCOL)
    except pickling.REFUSED:
        return cloudpickle.dumps(obj, _PROTOCOL)


def dumps_list(key: Any, elements: list[Any]) -> bytes:
    return b"".join([dumps(key), *map(dumps, elements)])


def loads_all(raw: bytes) -> list[Any]:
    """Every pickle of a list-state value: [key, element, element, ...]."""
    stream = io.BytesIO(raw)
    unpickler = pickle.Unpickler(stream)
    size = len(raw)
    out = []
    while stream.tell() < size:
        out.append(unpickler.load())
    return out
