"""The merging window set of one key (Flink's `MergingWindowSet`), for session windows.

It maps each in-flight window to its *state window*: the window whose name the merged contents
are stored under. When windows merge, the result keeps the state window of one of the merged
windows, so merging never moves the bulk of the contents; the state windows of the others are
merged into it. The mapping lives in the keyed map state `__merging_windows__` (window ->
state window) and is written through on every change, so a checkpoint taken between two merges
restores the exact mapping the contents were stored under.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.state.descriptors import MapStateDescriptor

MERGING_STATE = "__merging_windows__"

#: merge_function(merge_result, merged_windows, state_window_of_result, merged_state_windows)
MergeFunction = Callable[[Any, set[Any], Any, list[Any]], None]


class MergingWindowSet:
    """The windows of the backend's current key and their state windows."""

    def __init__(self, assigner: Any, backend: Any) -> None:
        self._assigner = assigner
        #: window -> state window, of the current key (the operator's inlined session path
        #: reads and writes it directly, with the same steps as `add_window`)
        self.mapping = backend.get_map_state(MapStateDescriptor(MERGING_STATE))

    def get_state_window(self, window: Any) -> Any:
        """The state window of `window`, None if the window is not in flight (retired)."""
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        """The window is done (purged for good): forget it."""
        if not self.mapping.contains(window):
            raise RuntimeError(f"window {window!r} is not in the merging window set")
        self.mapping.remove(window)

    def windows(self) -> list[Any]:
        return sorted(self.mapping.keys())

    def add_window(self, new_window: Any, merge_function: MergeFunction) -> Any:
        """Add `new_window`, merging it with the windows it overlaps; returns the window it
        ended up in. `merge_function` runs for each merge, before the mapping changes are
        visible to the caller, to merge trigger state and contents (Flink's steps)."""
        mapping = self.mapping
        # Step 1: which windows merge, with the new one among the candidates
        merges: list[tuple[Any, set[Any]]] = []
        self._assigner.merge_windows(
            [*mapping.keys(), new_window], lambda merged, result: merges.append((result, merged))
        )
        result_window, merged_new_window = new_window, False
        for merge_result, merged in merges:
            merged = set(merged)
            # Step 2: the new window is absorbed into a merge result
            if new_window in merged:
                merged_new_window = True
                merged.discard(new_window)
                result_window = merge_result
            # Step 3: the result keeps the state window of one merged window (the earliest)
            kept_state_window = mapping.get(min(merged))
            merged_state_windows = []
            for window in sorted(merged):
                state_window = mapping.get(window)
                if state_window is not None:
                    mapping.remove(window)
                    merged_state_windows.append(state_window)
            mapping.put(merge_result, kept_state_window)
            merged_state_windows.remove(kept_state_window)
            # Step 4: merge trigger state and contents, unless nothing really changed
            if not (len(merged) == 1 and merge_result in merged):
                merge_function(merge_result, merged, kept_state_window, merged_state_windows)
        # Step 5: a new window that merged with nothing is its own state window
        if not merges or (result_window == new_window and not merged_new_window):
            mapping.put(result_window, result_window)
        return result_window
