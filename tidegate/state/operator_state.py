"""Operator state: per-subtask list states and broadcast states, redistributed when the
parallelism changes.

Three modes (Flink's names; DESIGN §6):

* split (`get_list_state`): on rescale, the entries of all old subtasks are concatenated in
  subtask order and cut into contiguous, near-equal parts, one per new subtask;
* union (`get_union_list_state`): on restore, every subtask gets the entries of all old subtasks;
* broadcast (`get_broadcast_state`, a map state of a broadcast operator): every new subtask gets
  a full copy (new subtask i old subtask i's, beyond the old parallelism old subtask 0's; all
  copies are equal). Snapshotted as a list of (key, value) entries.

A `CheckpointedFunction` registers its states in `initialize_state` (after `restore`) and fills
them in `snapshot_state`; `snapshot` then copies them in the synchronous phase.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tidegate.state.broadcast_state import BroadcastState
from tidegate.state.snapshot_format import OperatorStateData

if TYPE_CHECKING:  # descriptors live in the user API, above this package
    from tidegate.state.descriptors import ListStateDescriptor, MapStateDescriptor

__all__ = [
    "OperatorListState",
    "OperatorStateBackend",
    "RedistributionMode",
]


class RedistributionMode(enum.StrEnum):
    SPLIT = "split"
    UNION = "union"
    BROADCAST = "broadcast"


class OperatorListState:
    """`ListState` of one operator subtask (not scoped to a key)."""

    __slots__ = ("_elements", "mode", "name")

    def __init__(self, name: str, mode: RedistributionMode, elements: list[Any]) -> None:
        self.name = name
        self.mode = mode
        self._elements = elements

    def get(self) -> list[Any]:
        """A copy of the elements (so adding while iterating is safe)."""
        return list(self._elements)

    def add(self, value: Any) -> None:
        self._elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self._elements[:] = values

    def clear(self) -> None:
        self._elements.clear()

    def __repr__(self) -> str:
        return f"OperatorListState({self.name!r}, {self.mode.value})"


class OperatorStateBackend:
    """The operator (non-keyed) list and broadcast states of one operator subtask."""

    def __init__(self) -> None:
        self._states: dict[str, OperatorListState] = {}
        self._broadcast: dict[str, BroadcastState] = {}

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> OperatorListState:
        """A list state split among the subtasks on rescale (PyFlink's `get_list_state`)."""
        return self._register(state_descriptor.name, RedistributionMode.SPLIT)

    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> OperatorListState:
        """A list state every subtask restores in full (PyFlink's `get_union_list_state`)."""
        return self._register(state_descriptor.name, RedistributionMode.UNION)

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast (map) state named by the descriptor, created empty on first use."""
        name = state_descriptor.name
        if name in self._states:
            self._register(name, RedistributionMode.BROADCAST)  # raises: a list state's name
        state = self._broadcast.get(name)
        if state is None:
            state = self._broadcast[name] = BroadcastState(name, {})
        return state

    def _register(self, name: str, mode: RedistributionMode) -> OperatorListState:
        if name in self._broadcast:
            raise ValueError(
                f"operator state {name!r} is a broadcast state (registered or restored) and "
                f"cannot also be a {mode.value} list state; use another name"
            )
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = OperatorListState(name, mode, [])
        elif state.mode is not mode:
            raise ValueError(
                f"operator state {name!r} is a {state.mode.value} list state (registered or "
                f"restored) and cannot also be a {mode.value} list state; use another name"
            )
        return state

    def snapshot(self) -> OperatorStateData:
        """The synchronous phase: name -> (mode, a copy of the entries)."""
        data = {name: (s.mode.value, list(s._elements)) for name, s in self._states.items()}
        for name, b in self._broadcast.items():
            data[name] = (RedistributionMode.BROADCAST.value, list(b._map.items()))
        return data

    def restore(self, states: OperatorStateData) -> None:
        """Load this subtask's share (`checkpoint.assignment.redistribute_operator_state`),
        before registration."""
        if self._states or self._broadcast:
            raise RuntimeError(
                "restore operator state before any state is registered (and only once)"
            )
        for name, (mode, entries) in states.items():
            if mode == RedistributionMode.BROADCAST:
                self._broadcast[name] = BroadcastState(name, dict(entries))
            else:
                self._states[name] = OperatorListState(
                    name, RedistributionMode(mode), list(entries)
                )
