"""The state objects of the rocksdb backend: views of one column family, scoped to the current key.

Semantics as the heap states (tidegate/state/heap.py): None in a ValueState means absent; an empty
list or map is not stored; reading a list or map gives a copy. Values are (un)pickled on every
access, so there is no copy-on-write to do: nothing read from RocksDB is shared.

Reads and writes go through the backend's write buffer (`rocksdb_buffer`): `_read` looks in the
state's buffered writes first, `_write` buffers (None deletes). The hot paths inline both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import rocksdict

from tidegate.state import rocksdb_codec as codec
from tidegate.state.rocksdb_buffer import MISSING

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


class RocksDBValueState(_RocksDBState):
    """`ValueState`: one value per key; None means absent."""

    __slots__ = ()

    def value(self) -> Any:
        prefix = self._backend._prefix or self._prefix()
        raw = self._buf.get(prefix, MISSING)
        if raw is MISSING:
            raw = self._db.get(prefix)
        return None if raw is None else _loads(raw)[1]

    def update(self, value: Any) -> None:
        prefix = self._backend._prefix or self._prefix()
        if value is None:
            self._write(prefix, None)
            return
        raw = _dumps((self._backend._current_key, value))
        buf = self._buf
        size = len(buf)
        buf[prefix] = raw
        self._buffer.written(len(buf) - size, len(raw))


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


class RocksDBReducingState(_RocksDBState):
    """`ReducingState`: added values are combined with the reduce function `(a, b) -> c`."""

    __slots__ = ("_function",)

    def __init__(
        self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict, function: Any
    ) -> None:
        super().__init__(backend, name, db)
        self._function = function

    def get(self) -> Any:
        raw = self._read(self._prefix())
        return None if raw is None else _loads(raw)[1]

    def add(self, value: Any) -> None:
        self.add_for_key(self._backend._current_key, value, self._prefix())

    def add_for_key(self, key: Any, value: Any, prefix: bytes | None = None) -> Any:
        """`add` under an explicit key; returns the new value (the keyed reduce's hot path)."""
        if prefix is None:
            prefix = self._backend.prefix_of(key)
        buf = self._buf
        raw = buf.get(prefix, MISSING)
        if raw is MISSING:
            raw = self._db.get(prefix)
        new = value if raw is None else self._function(_loads(raw)[1], value)
        raw = _dumps((key, new))
        size = len(buf)
        buf[prefix] = raw
        self._buffer.written(len(buf) - size, len(raw))
        return new


class RocksDBAggregatingState(_RocksDBState):
    """`AggregatingState`: added values go into an accumulator; `get` returns its result."""

    __slots__ = ("_function",)

    def __init__(
        self, backend: RocksDBKeyedStateBackend, name: str, db: rocksdict.Rdict, function: Any
    ) -> None:
        super().__init__(backend, name, db)
        self._function = function

    def get(self) -> Any:
        raw = self._read(self._prefix())
        return None if raw is None else self._function.get_result(_loads(raw)[1])

    def add(self, value: Any) -> None:
        prefix = self._prefix()
        raw = self._read(prefix)
        function = self._function
        accumulator = function.create_accumulator() if raw is None else _loads(raw)[1]
        self._write(prefix, _dumps((self._backend._current_key, function.add(value, accumulator))))
