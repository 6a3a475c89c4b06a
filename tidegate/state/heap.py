"""The heap keyed state backend (`hashmap`): keyed state in Python dicts, written per key group.

Storage is one flat dict per state, `{key: value}`, and `current_key` is a plain attribute the
runtime sets before each record or timer. No key group is computed per state access: key groups
are computed only when a snapshot is written, off the subtask loop (DESIGN §8).

Values are held by reference, as in Flink's heap backend. Treat a value as immutable once it is
in state: to change it, build a new object (or a copy) and `update` it. A value changed in place
is not isolated from a checkpoint still being written (its snapshot holds the same object), and
on the rocksdb backend the change is lost unless `update` is called again. The containers of list
and map states, and the accumulators of reducing and aggregating states, are the backend's own
and are isolated from snapshots: the first two are copied when a snapshot is taken, the others
copied on write, because `reduce`/`add` may change their first argument in place.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tidegate.state.handles import HEAP_CHANGELOG
from tidegate.state.heap_changelog import (
    ChangeLog,
    KeyedStateChanges,
    capture_changes,
    needs_materialization,
)
from tidegate.state.heap_incremental import HeapIncrementalSnapshot, chain_of
from tidegate.state.immutable import is_immutable
from tidegate.state.keyed_registry import KeyedStateRegistry, StateKind, check_key_group_range
from tidegate.state.keygroups import KeyGroupAssigner
from tidegate.state.rocksdb_incremental import (
    IncrementalKeyedStateHandle,
    IncrementalTracker,
    shared_base,
)
from tidegate.state.snapshot_format import KeyedStateSnapshot, KeyGroupData
from tidegate.state.ttl.factory import snapshot_transformers

_ABSENT: Any = object()


CONTAINER_KINDS = (StateKind.LIST, StateKind.MAP)


class NoKeyContextError(RuntimeError):
    """Keyed state was used while no key is set (outside a keyed function's record/timer)."""


class _KeyedState:
    """Base of the heap states: a view of one table, scoped to the backend's current key."""

    __slots__ = ("_backend", "_changed", "_name", "_table")

    def __init__(self, backend: HeapKeyedStateBackend, name: str, table: dict[Any, Any]) -> None:
        self._backend = backend
        self._name = name
        self._table = table
        #: incremental checkpoints: the keys changed since the last snapshot (None: off); every
        #: change adds its key here, inline (a method call would cost more than the change)
        self._changed = backend.change_set(name)

    def _key(self) -> Any:
        key = self._backend.current_key
        if key is None:
            raise NoKeyContextError(
                f"keyed state {self._name!r} is only available on a keyed stream (after "
                "key_by), inside process_element/on_timer where a current key is set"
            )
        return key

    def clear(self) -> None:
        """Remove the current key's entry."""
        key = self._key()
        if self._table.pop(key, _ABSENT) is not _ABSENT and self._changed is not None:
            self._changed.add(key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class HeapValueState(_KeyedState):
    """`ValueState`: one value per key; None means absent."""

    __slots__ = ()

    def value(self) -> Any:
        return self._table.get(self._key())

    def update(self, value: Any) -> None:
        key = self._key()
        if value is None:
            self._table.pop(key, None)
        else:
            self._table[key] = value
        if self._changed is not None:
            self._changed.add(key)


class HeapListState(_KeyedState):
    """`ListState`: a list per key; an empty list is not stored."""

    __slots__ = ()

    def get(self) -> list[Any]:
        """A copy of the elements (so adding while iterating is safe); [] if none."""
        elements = self._table.get(self._key())
        return [] if elements is None else list(elements)

    def add(self, value: Any) -> None:
        key = self._key()
        elements = self._table.get(key)
        if elements is None:
            self._table[key] = [value]
        else:
            elements.append(value)
        if self._changed is not None:
            self._changed.add(key)

    def add_all(self, values: Iterable[Any]) -> None:
        key = self._key()
        new = list(values)
        elements = self._table.get(key)
        if elements is not None:
            elements.extend(new)
        elif new:
            self._table[key] = new
        if self._changed is not None:
            self._changed.add(key)

    def update(self, values: Iterable[Any]) -> None:
        key = self._key()
        new = list(values)
        if new:
            self._table[key] = new
        else:
            self._table.pop(key, None)
        if self._changed is not None:
            self._changed.add(key)


class HeapMapState(_KeyedState):
    """`MapState`: a dict of user keys per key; an empty dict is not stored."""

    __slots__ = ()

    def _map(self) -> dict[Any, Any]:
        return self._table.get(self._key()) or {}

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        current = self._key()
        user_map = self._table.get(current)
        if user_map is None:
            self._table[current] = {key: value}
        else:
            user_map[key] = value
        if self._changed is not None:
            self._changed.add(current)

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        current = self._key()
        user_map = self._table.get(current)
        if user_map is not None:
            user_map.update(dict_value)
        elif dict_value:
            self._table[current] = dict(dict_value)
        if self._changed is not None:
            self._changed.add(current)

    def remove(self, key: Any) -> None:
        current = self._key()
        user_map = self._table.get(current)
        if user_map is not None:
            user_map.pop(key, None)
            if not user_map:
                del self._table[current]
            if self._changed is not None:
                self._changed.add(current)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def items(self) -> list[tuple[Any, Any]]:
        """A copy of the entries (so changing the state while iterating is safe)."""
        return list(self._map().items())

    def keys(self) -> list[Any]:
        return list(self._map())

    def values(self) -> list[Any]:
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class _MergingState(_KeyedState):
    """Base of reducing and aggregating state: a function changes their values (copy on write)."""

    __slots__ = ("_epoch", "_function", "_private")

    def __init__(
        self, backend: HeapKeyedStateBackend, name: str, table: dict[Any, Any], function: Any
    ) -> None:
        super().__init__(backend, name, table)
        self._function = function
        self._epoch = 0
        self._private: set[Any] = set()

    def _writable(self, key: Any) -> Any:
        """The stored value of `key` (or _ABSENT), safe to change in place.

        A snapshot taken since the value was stored holds the same object, so the first change
        of each key after a snapshot works on a deep copy (Flink's heap backend copies on write
        too). `_private` holds the keys whose object was made since the last snapshot.
        """
        value = self._table.get(key, _ABSENT)
        if not self._backend.snapshots_in_flight or is_immutable(value):
            return value  # no snapshot holds it, or nobody can change it in place
        epoch = self._backend._snapshots_taken
        if self._epoch != epoch:
            self._epoch = epoch
            self._private = set()
        if key not in self._private:
            self._private.add(key)
            if value is not _ABSENT:
                value = copy.deepcopy(value)
        return value


class HeapReducingState(_MergingState):
    """`ReducingState`: added values are combined with the reduce function `(a, b) -> c`."""

    __slots__ = ()

    def get(self) -> Any:
        return self._table.get(self._key())

    def add(self, value: Any) -> None:
        self.add_for_key(self._key(), value)

    def add_for_key(self, key: Any, value: Any) -> Any:
        """`add` under an explicit key; returns the new value (the keyed reduce's hot path)."""
        current = self._writable(key)
        new = value if current is _ABSENT else self._function(current, value)
        self._table[key] = new
        if self._changed is not None:
            self._changed.add(key)
        return new

    def add_all(self, keys: list, values: list) -> list:
        """`add_for_key` of each (key, value) pair in order; returns the new values. One loop
        over the batch: about a quarter less per record than a call of `add_for_key` each."""
        if self._backend.snapshots_in_flight:  # values may need their copy on write
            return list(map(self.add_for_key, keys, values))
        table, function = self._table, self._function
        get, out = table.get, []
        append = out.append
        for key, value in zip(keys, values, strict=True):
            current = get(key, _ABSENT)
            new = value if current is _ABSENT else function(current, value)
            table[key] = new
            append(new)
        if self._changed is not None:
            self._changed.update(keys)
        return out


class HeapAggregatingState(_MergingState):
    """`AggregatingState`: added values go into an accumulator; `get` returns its result."""

    __slots__ = ()

    def get(self) -> Any:
        accumulator = self._table.get(self._key(), _ABSENT)
        return None if accumulator is _ABSENT else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        key = self._key()
        accumulator = self._writable(key)
        if accumulator is _ABSENT:
            accumulator = self._function.create_accumulator()
        self._table[key] = self._function.add(value, accumulator)
        if self._changed is not None:
            self._changed.add(key)


class HeapKeyedStateBackend(KeyedStateRegistry):
    """Keyed state of one operator subtask, for the key groups in `key_group_range`.

    The runtime sets `current_key` before each record and timer and resets it to None after.
    State objects are created once per name (in `open()`) and reused for every record.
    With `incremental`, checkpoints write only what changed (state/heap_changelog.py).
    """

    STATE_CLASSES = {
        StateKind.VALUE: HeapValueState,
        StateKind.LIST: HeapListState,
        StateKind.MAP: HeapMapState,
        StateKind.REDUCING: HeapReducingState,
        StateKind.AGGREGATING: HeapAggregatingState,
    }

    def __init__(
        self, max_parallelism: int, key_group_range: range, *, incremental: bool = False
    ) -> None:
        check_key_group_range(max_parallelism, key_group_range)
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.current_key: Any = None
        self._tables: dict[str, dict[Any, Any]] = {}
        self._kinds: dict[str, StateKind] = {}
        self._value_types: dict[str, Any] = {}
        self._states: dict[str, _KeyedState] = {}
        self._snapshots_taken = 0
        self.snapshots_in_flight = 0
        self._in_flight_lock = threading.Lock()
        #: memoises key -> key group across snapshots (the async phase's main cost)
        self._key_groups = KeyGroupAssigner(max_parallelism)
        self._restored_key_groups: set[int] = set()
        #: incremental checkpoints: the chain of files written (None: full snapshots) ...
        self.tracker = IncrementalTracker() if incremental else None
        #: ... the keys changed since its base, per checkpoint ...
        self._changes = ChangeLog() if incremental else None
        #: ... and since the last checkpoint, per state (the state objects add to these sets)
        self._change_sets: dict[str, set[Any]] | None = {} if incremental else None

    def change_set(self, name: str) -> set[Any] | None:
        """The set the state objects of `name` add changed keys to (None: not tracked)."""
        if self._change_sets is None:
            return None
        return self._change_sets.setdefault(name, set())

    def _table_of(self, name: str) -> dict[Any, Any]:
        return self._tables.setdefault(name, {})

    def _create_state(self, name: str, cls: type[Any], *args: Any) -> Any:
        return cls(self, name, self._table_of(name), *args)

    def table(self, name: str) -> dict[Any, Any]:
        """The live `{key: value}` dict of registered state `name`.

        For built-in operators' hot loops, which may skip the per-call key check of the state
        objects. Only for reading: changes must go through the state objects (a snapshot may
        hold the values, and incremental checkpoints see only the changes made there).
        """
        if name not in self._states:
            raise KeyError(f"state {name!r} is not registered; call get_state() first")
        return self._tables[name]

    def entries(self, name: str) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every key of state `name`, registered or restored (any order).

        For restoring what lives in keyed state (e.g. timers). Lists and dicts of list and map
        state are copies; the entries are taken when called, so changing the state meanwhile
        is safe.
        """
        table = self._tables.get(name, {})
        if self._kinds.get(name) in CONTAINER_KINDS:
            return iter([(key, value.copy()) for key, value in table.items()])
        return iter(list(table.items()))

    def snapshot(
        self, checkpoint_id: int | None = None
    ) -> KeyedStateSnapshot | HeapIncrementalSnapshot:
        """The synchronous phase of a snapshot: a consistent copy, made cheaply.

        Full (a savepoint, `checkpoint_id` None, or full checkpoints): a shallow copy of each
        table, plus copies of the lists and dicts of list and map state (changed in place by
        `add`/`put`). With incremental checkpoints, a checkpoint copies only the entries
        changed since the last completed checkpoint, unless the chain of files needs a new
        materialization (heap_changelog). No hashing and no serialization: `write` does those.
        """
        if checkpoint_id is None or self.tracker is None or self._changes is None:
            return self._full_snapshot()
        base_id, base = self.tracker.current_base()
        chain = chain_of(base)
        changed = self._changes.capture(checkpoint_id, self._change_sets or {})
        kinds = {name: kind.value for name, kind in self._kinds.items()}
        if needs_materialization(chain):
            content: Any = self._full_snapshot()
        else:
            tables = {name: (kinds[name], table) for name, table in self._tables.items()}
            containers = [name for name, kind in self._kinds.items() if kind in CONTAINER_KINDS]
            values, removed = capture_changes(tables, changed, containers)
            content = self._in_flight(KeyedStateChanges(self._snapshot_of(values), removed))
        return HeapIncrementalSnapshot(content, base_id, chain, self.tracker, kinds)

    def _full_snapshot(self) -> KeyedStateSnapshot:
        tables: dict[str, tuple[str, dict[Any, Any]]] = {}
        for name, table in self._tables.items():
            kind = self._kinds[name]
            if kind in CONTAINER_KINDS:
                tables[name] = (kind.value, {key: v.copy() for key, v in table.items()})
            else:
                tables[name] = (kind.value, table.copy())
        return self._in_flight(self._snapshot_of(tables))

    def _snapshot_of(self, tables: dict[str, tuple[str, dict[Any, Any]]]) -> KeyedStateSnapshot:
        return KeyedStateSnapshot(
            self.max_parallelism,
            self.key_group_range,
            tables,
            self._key_groups.key_group,
            transformers=snapshot_transformers(self),  # state TTL: cleanup in full snapshot
            value_types=self._value_types,
        )

    def _in_flight(self, snapshot: Any) -> Any:
        """Values are shared with `snapshot` until it is written (and dropped): only then
        must reducing/aggregating values be copied before they are changed in place."""
        self._snapshots_taken += 1  # a new epoch for copy-on-write of reducing/aggregating values
        with self._in_flight_lock:
            self.snapshots_in_flight += 1
        weakref.finalize(snapshot, self._snapshot_released)
        return snapshot

    def _snapshot_released(self) -> None:
        with self._in_flight_lock:
            self.snapshots_in_flight -= 1

    def restore(self, key_groups: Iterable[tuple[int, KeyGroupData]]) -> None:
        """Load key groups read from state files, before the first record is processed.

        Call once per old state file that overlaps this backend's range, typically with
        `snapshot_format.read_key_groups(f, index, backend.key_group_range)`. Every key group
        must lie in this backend's range and be loaded once (ValueError otherwise), and every
        key must belong to the key group it was stored under (CorruptStateError otherwise: the
        state was written with another max parallelism or key hash, or is damaged).
        """
        for kg, data in key_groups:
            self._claim_restored_key_group(kg)
            for name, (kind, entries) in data.items():
                self._check_restored_entries(kg, name, kind, entries)
                self._table_of(name).update(entries)

    def continue_chain(self, h: IncrementalKeyedStateHandle) -> None:
        """After restoring exactly the hashmap chain `h` (all of this subtask's key groups)
        of a checkpoint the job owns: the next checkpoints extend its chain instead of
        materializing again."""
        whole = h.key_groups == self.key_group_range == h.handle.key_group_range
        if self.tracker is None or self._changes is None or not h.reusable or not whole:
            return
        if h.handle.backend == HEAP_CHANGELOG:
            self.tracker.seed(h.checkpoint_id, shared_base(h.checkpoint_dir, h.handle))
            self._changes.reset()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.tracker is not None and self._changes is not None:
            self.tracker.notify_complete(checkpoint_id)
            self._changes.notify_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if self.tracker is not None:
            self.tracker.notify_aborted(checkpoint_id)
