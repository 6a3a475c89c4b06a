"""State handed to one operator subtask on restore (planned by the JobMaster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fsspec

from tidegate.state.channel_state import read_channel_state
from tidegate.state.snapshot_format import StateFileIndex, read_key_groups

#: key of a subtask's channel state (unaligned checkpoints) in its ack and its restore plan
CHANNEL_STATE_KEY = "__channel_state__"


@dataclass(frozen=True)
class KeyedStateHandle:
    path: str  # absolute path or URI of an old subtask's state file
    index: dict[str, Any]  # StateFileIndex.to_json()
    key_groups: range  # the key groups to read from it (its range ∩ the new subtask's)


@dataclass(frozen=True)
class RestoredOperatorState:
    keyed: tuple[KeyedStateHandle, ...] = ()
    #: operator state of this subtask, already redistributed: name -> (mode, entries)
    operator_state: dict[str, Any] = field(default_factory=dict)

    def restore_keyed(self, backend: Any) -> None:
        for handle in self.keyed:
            index = StateFileIndex.from_json(handle.index)
            with fsspec.open(handle.path, "rb") as f:
                backend.restore(read_key_groups(f, index, handle.key_groups))


@dataclass(frozen=True)
class RestoredChannelState:
    """The in-flight frames an unaligned checkpoint persisted for one subtask."""

    path: str  # absolute path or URI of the channel-state file

    def read(self) -> list[tuple[int, list[Any]]]:
        with fsspec.open(self.path, "rb") as f:
            return read_channel_state(f, self.path)
