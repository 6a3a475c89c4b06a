"""The state objects of the rocksdb backend: views of one column family, scoped to the current key.

Semantics as the heap states (tidegate/state/heap.py): None in a ValueState means absent; an empty
list or map is not stored; reading a list or map gives a copy. Unlike the heap states, a value
changed in place after it was written is not stored until it is written again.

Value, reducing and aggregating state hold their values in the backend's value cache
(`rocksdb_cache`), keyed by the key object: a cached access is a dict access and no pickle;
values that are not immutable are kept pickled, so they are copied on every read and write as
before. List and map state write pickles through the write buffer (`rocksdb_buffer`): `_read`
looks in the state's buffered writes first, `_write` buffers (None deletes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import rocksdict

from tidegate.state import rocksdb_codec as codec
from tidegate.state.immutable import ATOMIC, is_immutable
from tidegate.state.rocksdb_cache import ABSENT, MISSING, Serialized

if TYPE_CHECKING:
    from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend

_dumps = codec.dumps
_loads = codec.loads


class _RocksDBState:
    """Base: a column family, its buffered writes, and the backend that knows the current key."""

    __slots__ = ("_backend", "_buf", "_buffer", "_db", "_name")

    def __init__(self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict) -> None:
        self._backend = backend
        self._name = name
        self._db = db
        self._buffer = backend.buffer
        self._buf = backend.buffer.table(name)

    def _prefix(self) -> bytes:
        prefix = self._backend._prefix
        return prefix if prefix is not None else self._backend.current_prefix(self._name)

    def _read(self, raw_key: bytes) -> bytes | None:
        raw = self._buf.get(raw_key, MISSING)
        return self._db.get(raw_key) if raw is MISSING else raw

    def _write(self, raw_key: bytes, raw: bytes | None) -> None:
        buf = self._buf
        size = len(buf)
        buf[raw_key] = raw
        self._buffer.written(len(buf) - size, len(raw_key) if raw is None else len(raw))

    def clear(self) -> None:
        """Remove the current key's entry."""
        self._write(self._prefix(), None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class _CachedState(_RocksDBState):
    """Base of value, reducing and aggregating state: one value per key, in the value cache
    (`_dirty`: written since the last flush; `_values`: as in RocksDB)."""

    __slots__ = ("_cache", "_dirty", "_max_dirty", "_values")

    def __init__(self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict) -> None:
        super().__init__(backend, name, db)
        self._cache = self._buffer.cache(name, backend.prefix_of, backend.cache_entries)
        self._values = self._cache.values
        self._dirty = self._cache.dirty
        self._max_dirty = self._buffer.max_dirty(self._cache)

    def _clean(self, key: Any) -> Any:
        """The value of `key` in RocksDB, or ABSENT: cached, else read and cached (a copy when
        it is not immutable)."""
        value = self._values.get(key, MISSING)
        if value is not MISSING:
            return _loads(value.raw)[1] if type(value) is Serialized else value
        instance = self._backend.instance
        raw = None if instance.empty else self._db.get(self._backend.prefix_of(key))
        if raw is None:
            value = cached = ABSENT
        else:
            value = _loads(raw)[1]
            cached = value if is_immutable(value) else Serialized(raw)
        self._values[key] = cached
        self._cache.bound()
        return value

    def _get(self, key: Any) -> Any:
        """The value of `key`, or ABSENT (a copy when it is not immutable)."""
        value = self._dirty.get(key, MISSING)
        if value is MISSING:
            return self._clean(key)
        return _loads(value.raw)[1] if type(value) is Serialized else value

    def _put(self, key: Any, value: Any) -> None:
        """`value` (ABSENT: remove) as the key's new value, to be written by a flush."""
        if type(value) not in ATOMIC and value is not ABSENT and not is_immutable(value):
            value = Serialized(_dumps((key, value)))
        dirty = self._dirty
        if len(dirty) >= self._max_dirty and key not in dirty:
            self._buffer.flush()
        dirty[key] = value

    def _current(self) -> Any:
        """The current key; raises NoKeyContextError if there is none."""
        key = self._backend._current_key
        if key is None:
            self._backend.current_prefix(self._name)  # raises
        return key

    def clear(self) -> None:
        """Remove the current key's value."""
        self._put(self._current(), ABSENT)


class RocksDBValueState(_CachedState):
    """`ValueState`: one value per key; None means absent."""

    __slots__ = ()

    def value(self) -> Any:
        value = self._get(self._current())
        return None if value is ABSENT else value

    def update(self, value: Any) -> None:
        self._put(self._current(), ABSENT if value is None else value)


class RocksDBListState(_RocksDBState):
    """`ListState`: the key's pickle, then one pickle per element (adding appends bytes)."""

    __slots__ = ()

    def get(self) -> list[Any]:
        raw = self._read(self._prefix())
        return [] if raw is None else codec.loads_all(raw)[1:]

    def add(self, value: Any) -> None:
        prefix = self._prefix()
        raw = self._read(prefix)
        if raw is None:
            raw = _dumps(self._backend._current_key)
        self._write(prefix, raw + _dumps(value))

    def add_all(self, values: Iterable[Any]) -> None:
        new = list(values)
        if not new:
            return
        prefix = self._prefix()
        raw = self._read(prefix)
        if raw is None:
            raw = _dumps(self._backend._current_key)
        self._write(prefix, b"".join([raw, *map(_dumps, new)]))

    def update(self, values: Iterable[Any]) -> None:
        prefix = self._prefix()
        new = list(values)
        self._write(prefix, codec.dumps_list(self._backend._current_key, new) if new else None)


class RocksDBMapState(_RocksDBState):
    """`MapState`: one RocksDB entry per user key, after the key's prefix."""

    __slots__ = ()

    def _entries(self) -> Iterator[tuple[bytes, bytes]]:
        """The current key's stored (raw key, raw value) pairs, in byte order."""
        prefix = self._prefix()
        self._buffer.flush()  # a scan reads RocksDB itself
        for raw_key, raw in self._db.items(from_key=prefix):
            if not raw_key.startswith(prefix):
                return
            yield raw_key, raw

    def get(self, key: Any) -> Any:
        raw = self._read(self._prefix() + codec.user_key_bytes(key))
        return None if raw is None else _loads(raw)[2]

    def put(self, key: Any, value: Any) -> None:
        raw_key = self._prefix() + codec.user_key_bytes(key)
        self._write(raw_key, _dumps((self._backend._current_key, key, value)))

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        prefix = self._prefix()
        current = self._backend._current_key
        for key, value in dict_value.items():
            self._write(prefix + codec.user_key_bytes(key), _dumps((current, key, value)))

    def remove(self, key: Any) -> None:
        self._write(self._prefix() + codec.user_key_bytes(key), None)

    def contains(self, key: Any) -> bool:
        return self._read(self._prefix() + codec.user_key_bytes(key)) is not None

    def items(self) -> list[tuple[Any, Any]]:
        """A copy of the entries (so changing the state while iterating is safe)."""
        return [_loads(raw)[1:] for _, raw in self._entries()]

    def keys(self) -> list[Any]:
        return [_loads(raw)[1] for _, raw in self._entries()]

    def values(self) -> list[Any]:
        return [_loads(raw)[2] for _, raw in self._entries()]

    def is_empty(self) -> bool:
        return next(self._entries(), None) is None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def clear(self) -> None:
        prefix = self._prefix()
        self._buffer.flush()  # a range delete must come after the buffered writes
        self._db.delete_range(prefix, codec.successor(prefix))


class RocksDBReducingState(_CachedState):
    """`ReducingState`: added values are combined with the reduce function `(a, b) -> c`."""

    __slots__ = ("_function",)

    def __init__(
        self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict, function: Any
    ) -> None:
        super().__init__(backend, name, db)
        self._function = function

    def get(self) -> Any:
        value = self._get(self._current())
        return None if value is ABSENT else value

    def add(self, value: Any) -> None:
        self.add_for_key(self._current(), value)

    def add_for_key(self, key: Any, value: Any) -> Any:
        """`add` under an explicit key; returns the new value (the keyed reduce's hot path:
        `_get` and `_put` inlined)."""
        dirty = self._dirty
        current = dirty.get(key, MISSING)
        if current is MISSING:  # not written since the last flush
            current = self._clean(key)
            if len(dirty) >= self._max_dirty:
                self._buffer.flush()
        elif type(current) is Serialized:
            current = _loads(current.raw)[1]
        new = value if current is ABSENT else self._function(current, value)
        if type(new) in ATOMIC or is_immutable(new):
            dirty[key] = new
        else:
            dirty[key] = Serialized(_dumps((key, new)))
        return new

    def add_all(self, keys: list, values: list) -> list:
        """`add_for_key` of each (key, value) pair in order; returns the new values. One loop
        over the batch instead of a call per record (the keyed reduce's hot path)."""
        dirty, function = self._dirty, self._function
        get, out = dirty.get, []
        append = out.append
        for key, value in zip(keys, values, strict=True):
            current = get(key, MISSING)
            if current is MISSING:  # not written since the last flush
                current = self._clean(key)
                if len(dirty) >= self._max_dirty:
                    self._buffer.flush()  # empties `dirty` in place
            elif type(current) is Serialized:
                current = _loads(current.raw)[1]
            new = value if current is ABSENT else function(current, value)
            if type(new) in ATOMIC or is_immutable(new):
                dirty[key] = new
            else:
                dirty[key] = Serialized(_dumps((key, new)))
            append(new)
        return out


class RocksDBAggregatingState(_CachedState):
    """`AggregatingState`: added values go into an accumulator; `get` returns its result."""

    __slots__ = ("_function",)

    def __init__(
        self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict, function: Any
    ) -> None:
        super().__init__(backend, name, db)
        self._function = function

    def get(self) -> Any:
        accumulator = self._get(self._current())
        return None if accumulator is ABSENT else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        key = self._current()
        accumulator = self._get(key)
        function = self._function
        if accumulator is ABSENT:
            accumulator = function.create_accumulator()
        self._put(key, function.add(value, accumulator))
