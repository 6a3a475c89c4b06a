"""Broadcast state: a map state per MapStateDescriptor, held by every subtask of a broadcast
operator (not keyed), with Flink's two views of it.

Every subtask receives every broadcast record, so every subtask's copy is the same as long as
`process_broadcast_element` updates it deterministically. It is operator state with the
`broadcast` redistribution mode: on restore at any parallelism each new subtask gets a full
copy (`checkpoint.assignment.redistribute_broadcast_state`).

* `BroadcastState` (read-write) is what `process_broadcast_element` sees;
* `ReadOnlyBroadcastState` is what `process_element` sees: writing there would let the
  subtasks' copies diverge (each sees other regular records), so it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["BroadcastState", "ReadOnlyBroadcastState", "ReadOnlyBroadcastStateError"]


class ReadOnlyBroadcastStateError(RuntimeError):
    """A write to broadcast state from the non-broadcast side (`process_element`)."""


class ReadOnlyBroadcastState:
    """Broadcast state as `process_element` sees it: PyFlink's `ReadOnlyBroadcastState`.

    Values are returned as stored: do not change them in place either (that is a write too).
    """

    __slots__ = ("_map", "name")

    def __init__(self, name: str, entries: dict[Any, Any]) -> None:
        self.name = name
        self._map = entries

    def get(self, key: Any) -> Any:
        """The value of `key`, or None."""
        return self._map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map.items())

    def keys(self) -> list[Any]:
        return list(self._map)

    def values(self) -> list[Any]:
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    def __getitem__(self, key: Any) -> Any:
        return self._map[key]

    def __contains__(self, key: Any) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._map))

    def __len__(self) -> int:
        return len(self._map)

    def _refuse(self, *_args: Any, **_kwargs: Any) -> None:
        raise ReadOnlyBroadcastStateError(
            f"broadcast state {self.name!r} is read-only in process_element: every subtask "
            "must hold the same copy, and only the broadcast side reaches all of them. Update "
            "it in process_broadcast_element (ctx.get_broadcast_state(...) is writable there)"
        )

    put = put_all = remove = clear = __setitem__ = __delitem__ = _refuse

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self._map)} entries)"


class BroadcastState(ReadOnlyBroadcastState):
    """Broadcast state as `process_broadcast_element` sees it: PyFlink's `BroadcastState`
    (a `MapState` not scoped to a key)."""

    __slots__ = ()

    def put(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        self._map.update(dict_value)

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map.clear()

    def __setitem__(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._map[key]

    def read_only(self) -> ReadOnlyBroadcastState:
        """A read-only view of the same entries."""
        return ReadOnlyBroadcastState(self.name, self._map)
