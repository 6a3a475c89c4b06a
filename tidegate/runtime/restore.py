"""State handed to one operator subtask on restore (planned by the JobMaster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fsspec

from tidegate.state.snapshot_format import StateFileIndex, read_key_groups


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
