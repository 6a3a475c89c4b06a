"""State scoped to a key *and a window* (trigger state, `ProcessWindowFunction`'s
`context.window_state()`), built on the keyed backend's public map state: the state named `n`
of a window-scoped store with prefix `p` is the map state `p:n` of the current key, keyed by
window. Values in it are replaced, never changed in place (a snapshot may hold them), so every
backend checkpoints, restores and rescales it with the key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from tidegate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from tidegate.state.immutable import is_immutable


def private_copy(value: Any) -> Any:
    """`value`, or a deep copy of it if a function could change it in place (values in state
    must not change while a snapshot holds them)."""
    return value if is_immutable(value) else copy.deepcopy(value)


def _call(function: Any, method: str) -> Callable[..., Any]:
    return getattr(function, method, function)


class _WindowState:
    __slots__ = ("_map", "_scope")

    def __init__(self, map_state: Any, scope: WindowScope) -> None:
        self._map = map_state
        self._scope = scope

    def _get(self) -> Any:
        return self._map.get(self._scope.window)

    def _put(self, value: Any) -> None:
        if value is None:
            self._map.remove(self._scope.window)
        else:
            self._map.put(self._scope.window, value)

    def clear(self) -> None:
        self._map.remove(self._scope.window)


class WindowValueState(_WindowState):
    __slots__ = ()

    def value(self) -> Any:
        return self._get()

    def update(self, value: Any) -> None:
        self._put(value)


class WindowListState(_WindowState):
    __slots__ = ()

    def get(self) -> list[Any]:
        return list(self._get() or ())

    def add(self, value: Any) -> None:
        self._put((*(self._get() or ()), value))

    def add_all(self, values: Iterable[Any]) -> None:
        self._put((*(self._get() or ()), *values) or None)

    def update(self, values: Iterable[Any]) -> None:
        self._put(tuple(values) or None)


class WindowReducingState(_WindowState):
    __slots__ = ("_reduce",)

    def __init__(self, map_state: Any, scope: WindowScope, reduce: Callable) -> None:
        super().__init__(map_state, scope)
        self._reduce = reduce

    def get(self) -> Any:
        return self._get()

    def add(self, value: Any) -> None:
        current = self._get()
        self._put(value if current is None else self._reduce(private_copy(current), value))


class WindowAggregatingState(_WindowState):
    __slots__ = ("_agg",)

    def __init__(self, map_state: Any, scope: WindowScope, agg: Any) -> None:
        super().__init__(map_state, scope)
        self._agg = agg

    def get(self) -> Any:
        acc = self._get()
        return None if acc is None else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._get()
        acc = self._agg.create_accumulator() if acc is None else private_copy(acc)
        self._put(self._agg.add(value, acc))


class WindowMapState(_WindowState):
    __slots__ = ()

    def _dict(self) -> dict[Any, Any]:
        return dict(self._get() or {})

    def get(self, key: Any) -> Any:
        return (self._get() or {}).get(key)

    def put(self, key: Any, value: Any) -> None:
        d = self._dict()
        d[key] = value
        self._put(d)

    def put_all(self, values: dict[Any, Any]) -> None:
        d = self._dict()
        d.update(values)
        self._put(d or None)

    def remove(self, key: Any) -> None:
        d = self._dict()
        d.pop(key, None)
        self._put(d or None)

    def contains(self, key: Any) -> bool:
        return key in (self._get() or {})

    def items(self) -> list[tuple[Any, Any]]:
        return list((self._get() or {}).items())

    def keys(self) -> list[Any]:
        return list(self._get() or {})

    def values(self) -> list[Any]:
        return list((self._get() or {}).values())

    def is_empty(self) -> bool:
        return not self._get()

    def __iter__(self) -> Any:
        return iter(self.keys())


class WindowScope:
    """A store of window-scoped states (named `prefix:name` in the keyed backend) for the
    window in `self.window`, which the operator sets before each use."""

    def __init__(self, backend: Any, prefix: str) -> None:
        self._backend = backend
        self._prefix = prefix
        self.window: Any = None
        self._states: dict[str, tuple[StateDescriptor, Any]] = {}

    def _map(self, descriptor: StateDescriptor) -> Any:
        return self._backend.get_map_state(MapStateDescriptor(f"{self._prefix}:{descriptor.name}"))

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The state `descriptor` names, for the current key and window."""
        known = self._states.get(descriptor.name)
        if known is not None:
            if type(known[0]) is not type(descriptor):
                raise ValueError(
                    f"window state {descriptor.name!r} was first used as a "
                    f"{type(known[0]).__name__}, now as a {type(descriptor).__name__}"
                )
            return known[1]
        state = self._make(descriptor)
        self._states[descriptor.name] = (descriptor, state)
        return state

    def _make(self, d: StateDescriptor) -> Any:
        m = self._map(d)
        if isinstance(d, ReducingStateDescriptor):
            return WindowReducingState(m, self, _call(d.reduce_function, "reduce"))
        if isinstance(d, AggregatingStateDescriptor):
            return WindowAggregatingState(m, self, d.agg_function)
        if isinstance(d, ListStateDescriptor):
            return WindowListState(m, self)
        if isinstance(d, MapStateDescriptor):
            return WindowMapState(m, self)
        if isinstance(d, ValueStateDescriptor) or type(d) is StateDescriptor:
            return WindowValueState(m, self)
        raise TypeError(f"unsupported state descriptor {type(d).__name__}")

    # PyFlink's KeyedStateStore names (ProcessWindowFunction's window_state())
    get_list_state = get_state
    get_map_state = get_state
    get_reducing_state = get_state
    get_aggregating_state = get_state

    def merge_into(self, descriptor: StateDescriptor, target: Any, sources: list[Any]) -> None:
        """Merge the state of the `sources` windows into `target`'s (OnMergeContext's
        `merge_partitioned_state`); the sources' entries are removed."""
        m = self._map(descriptor)
        parts = [v for v in (m.get(w) for w in [target, *sources]) if v is not None]
        for w in sources:
            m.remove(w)
        if not parts:
            return
        if isinstance(descriptor, ReducingStateDescriptor):
            reduce = _call(descriptor.reduce_function, "reduce")
            merged = parts[0]
            for p in parts[1:]:
                merged = reduce(private_copy(merged), p)
        elif isinstance(descriptor, AggregatingStateDescriptor):
            merged = parts[0]
            for p in parts[1:]:
                merged = descriptor.agg_function.merge(private_copy(merged), p)
        elif isinstance(descriptor, ListStateDescriptor):
            merged = tuple(v for p in parts for v in p)
        else:
            raise TypeError(
                f"state {descriptor.name!r}: only reducing, aggregating and list state can be "
                f"merged, not {type(descriptor).__name__}"
            )
        m.put(target, merged)
