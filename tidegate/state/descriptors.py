"""State descriptors and state interfaces with PyFlink's names (`pyflink.datastream.state`).

A descriptor names a state and says what kind it is; a function passes it to
`runtime_context.get_state(...)` (or `get_list_state`, ...) in `open()` and gets back a state
object scoped to the key of the record being processed. Type information is only a hint: any
object (a `Types.X()` value or None) is accepted and kept, and values are stored as Python
objects.

The state interfaces are Protocols because the state backends (`tidegate.state`) sit below this
package and implement them without importing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tidegate.state.ttl_config import StateTtlConfig

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "ValueState",
    "ValueStateDescriptor",
]

_AGGREGATE_METHODS = ("create_accumulator", "add", "get_result")


@dataclass(frozen=True, init=False)
class StateDescriptor:
    """Names a state; the name is unique per operator and is how state is found on restore."""

    name: str
    type_info: Any = None
    #: set by `enable_time_to_live` (a StateTtlConfig); None: the state never expires
    ttl_config: Any = field(default=None, compare=False)

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a state name must be a non-empty string, got {name!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "type_info", type_info)

    def get_name(self) -> str:
        """PyFlink's accessor for `name`."""
        return self.name

    def enable_time_to_live(self, ttl_config: Any) -> None:
        """Let the state's values expire as `ttl_config` (a `StateTtlConfig`) says.

        Call it before the descriptor is passed to `get_state(...)` (in `open()`). A state keeps
        its TTL-ness across checkpoints: enabling or disabling TTL on a restored state is refused.
        """
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(
                f"state {self.name!r}: enable_time_to_live expects a StateTtlConfig (from "
                f"StateTtlConfig.new_builder(Time.seconds(...)).build()), got {ttl_config!r}"
            )
        object.__setattr__(self, "ttl_config", ttl_config)


@dataclass(frozen=True, init=False)
class ValueStateDescriptor(StateDescriptor):
    """Describes a `ValueState`: one value per key."""

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)


@dataclass(frozen=True, init=False)
class ListStateDescriptor(StateDescriptor):
    """Describes a `ListState`: a list of elements per key."""

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


@dataclass(frozen=True, init=False)
class MapStateDescriptor(StateDescriptor):
    """Describes a `MapState`: a dict of user keys to user values per key."""

    key_type_info: Any = None
    value_type_info: Any = None

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, (key_type_info, value_type_info))
        object.__setattr__(self, "key_type_info", key_type_info)
        object.__setattr__(self, "value_type_info", value_type_info)


@dataclass(frozen=True, init=False)
class ReducingStateDescriptor(StateDescriptor):
    """Describes a `ReducingState`: one value per key, combined with each added value.

    `reduce_function` is a callable `(a, b) -> c` or an object with `.reduce(a, b)` (PyFlink's
    `ReduceFunction`). It may return a new value or its first argument changed in place.
    """

    reduce_function: Any = field(default=None, compare=False)

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        if not callable(getattr(reduce_function, "reduce", reduce_function)):
            raise TypeError(
                f"state {name!r}: reduce_function must be a callable (a, b) -> c or have a "
                f".reduce(a, b) method, got {reduce_function!r}"
            )
        super().__init__(name, type_info)
        object.__setattr__(self, "reduce_function", reduce_function)

    def get_reduce_function(self) -> Any:
        """PyFlink's accessor for `reduce_function`."""
        return self.reduce_function


@dataclass(frozen=True, init=False)
class AggregatingStateDescriptor(StateDescriptor):
    """Describes an `AggregatingState`: an accumulator per key, read through `get_result`.

    `agg_function` has PyFlink's `AggregateFunction` methods: `create_accumulator()`,
    `add(value, acc) -> acc` (may change `acc` in place), `get_result(acc)`, `merge(a, b)`.
    """

    agg_function: Any = field(default=None, compare=False)

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None) -> None:
        missing = [m for m in _AGGREGATE_METHODS if not callable(getattr(agg_function, m, None))]
        if missing:
            raise TypeError(
                f"state {name!r}: agg_function must be an AggregateFunction; "
                f"{agg_function!r} lacks {', '.join(missing)}"
            )
        super().__init__(name, state_type_info)
        object.__setattr__(self, "agg_function", agg_function)

    def get_agg_function(self) -> Any:
        """PyFlink's accessor for `agg_function`."""
        return self.agg_function


@runtime_checkable
class State(Protocol):
    """Keyed state (each method acts on the current key's entry) or operator state."""

    def clear(self) -> None:
        """Remove the current key's entry (for operator state: all of the subtask's entries)."""
        ...


@runtime_checkable
class ValueState(State, Protocol):
    def value(self) -> Any:
        """The current key's value, or None if it has none."""
        ...

    def update(self, value: Any) -> None:
        """Replace the current key's value (None clears it)."""
        ...


@runtime_checkable
class ListState(State, Protocol):
    def get(self) -> Iterable[Any]:
        """The current key's elements (an empty list if none); a copy, safe to iterate while
        adding."""
        ...

    def add(self, value: Any) -> None: ...

    def add_all(self, values: Iterable[Any]) -> None: ...

    def update(self, values: Iterable[Any]) -> None:
        """Replace the elements (an empty iterable clears the state)."""
        ...


@runtime_checkable
class MapState(State, Protocol):
    def get(self, key: Any) -> Any:
        """The value under user key `key`, or None."""
        ...

    def put(self, key: Any, value: Any) -> None: ...

    def put_all(self, dict_value: Mapping[Any, Any]) -> None: ...

    def remove(self, key: Any) -> None: ...

    def contains(self, key: Any) -> bool: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...

    def keys(self) -> Iterable[Any]: ...

    def values(self) -> Iterable[Any]: ...

    def is_empty(self) -> bool: ...

    def __iter__(self) -> Iterator[Any]:
        """Iterate the user keys."""
        ...


@runtime_checkable
class ReducingState(State, Protocol):
    def get(self) -> Any:
        """The reduced value, or None if nothing was added."""
        ...

    def add(self, value: Any) -> None: ...


@runtime_checkable
class AggregatingState(State, Protocol):
    def get(self) -> Any:
        """`get_result(accumulator)`, or None if nothing was added."""
        ...

    def add(self, value: Any) -> None: ...
