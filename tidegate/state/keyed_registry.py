"""What every keyed state backend (heap.py, rocksdb_backend.py) shares: the kinds of keyed
state, the `get_*_state` methods with one kind per state name, and the checks of a restore."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidegate.state.keygroups import stable_hash
from tidegate.state.snapshot_format import CorruptStateError, describe_key_groups
from tidegate.state.ttl.factory import ttl_aware

if TYPE_CHECKING:  # descriptors live in the user API, above this package
    from tidegate.state.descriptors import (
        AggregatingStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        ValueStateDescriptor,
    )


class StateKind(enum.StrEnum):
    """The kinds of keyed state; the values are what state files record."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class KeyedStateRegistry:
    """The `get_*_state` methods of a keyed state backend (PyFlink's names), shared by the
    backends: a state object per name, created on first use, one kind per name.

    A backend sets `STATE_CLASSES` (kind -> state class), the dicts `_kinds` (name -> kind,
    including restored names) and `_states` (name -> state object), and implements
    `_create_state(name, cls, *args)`. The `restore` of a backend checks what it loads with
    `_claim_restored_key_group` and `_check_restored_entries`.
    """

    STATE_CLASSES: dict[StateKind, type[Any]]
    max_parallelism: int
    key_group_range: range
    _kinds: dict[str, StateKind]
    _states: dict[str, Any]
    #: declared value types of value, reducing and aggregating states (state/typed_tables.py)
    _value_types: dict[str, Any]
    _restored_key_groups: set[int]

    @ttl_aware
    def get_state(self, state_descriptor: ValueStateDescriptor) -> Any:
        self._declare(state_descriptor)
        return self._register(state_descriptor.name, StateKind.VALUE)

    @ttl_aware
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> Any:
        return self._register(state_descriptor.name, StateKind.LIST)

    @ttl_aware
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> Any:
        return self._register(state_descriptor.name, StateKind.MAP)

    @ttl_aware
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> Any:
        function = state_descriptor.reduce_function
        reduce = getattr(function, "reduce", function)  # a ReduceFunction or a plain callable
        self._declare(state_descriptor)
        return self._register(state_descriptor.name, StateKind.REDUCING, reduce)

    @ttl_aware
    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> Any:
        self._declare(state_descriptor)
        return self._register(
            state_descriptor.name, StateKind.AGGREGATING, state_descriptor.agg_function
        )

    def _declare(self, descriptor: Any) -> None:
        """Remember the declared type of a value-like state (None: undeclared)."""
        if descriptor.type_info is not None:
            self._value_types.setdefault(descriptor.name, descriptor.type_info)

    def _register(self, name: str, kind: StateKind, *args: Any) -> Any:
        """The state object for `name`, created on first use; one kind per name."""
        known = self._kinds.get(name, kind)
        if known is not kind:
            how = "registered" if name in self._states else "restored"
            raise ValueError(
                f"state {name!r} is {how} as {known} state and cannot also be {kind} state; "
                "state names are unique per operator (use another name for the new state)"
            )
        state = self._states.get(name)
        if state is None:
            self._kinds[name] = kind
            state = self._states[name] = self._create_state(name, self.STATE_CLASSES[kind], *args)
        return state

    def _create_state(self, name: str, cls: type[Any], *args: Any) -> Any:
        raise NotImplementedError

    def _claim_restored_key_group(self, kg: int) -> None:
        """Restore, step 1: key group `kg` is this subtask's and was not restored before."""
        if kg not in self.key_group_range:
            raise ValueError(
                f"key group {kg} is outside this subtask's key groups "
                f"{describe_key_groups(self.key_group_range)}; pass only the key groups it owns"
            )
        if kg in self._restored_key_groups:
            raise ValueError(f"key group {kg} was restored twice (from two state files?)")
        self._restored_key_groups.add(kg)

    def _check_restored_entries(
        self, kg: int, name: str, kind: str, entries: Mapping[Any, Any]
    ) -> StateKind:
        """Restore, steps 2 and 3: each key of `entries` really is in key group `kg`, and
        state `name` has one kind; returns that kind."""
        max_parallelism = self.max_parallelism
        for key in entries:
            if stable_hash(key) % max_parallelism != kg:
                raise CorruptStateError(
                    f"key group {kg} of state {name!r}",
                    f"key {key!r} belongs to key group {stable_hash(key) % max_parallelism} "
                    f"at max parallelism {max_parallelism}",
                    "restore with the max parallelism the checkpoint was taken with",
                )
        known = self._kinds.setdefault(name, StateKind(kind))
        if known != kind:
            raise CorruptStateError(
                f"key group {kg} of state {name!r}",
                f"stored as {kind} state, but known here as {known} state",
            )
        return known


def check_key_group_range(max_parallelism: int, key_group_range: range) -> None:
    """A backend's key groups: a non-empty contiguous range within [0, max_parallelism)."""
    r = key_group_range
    if r.step != 1 or not 0 <= r.start < r.stop <= max_parallelism:
        raise ValueError(
            f"key_group_range must be a non-empty range within [0, {max_parallelism}), got {r!r}"
        )
