"""The contexts the window operator hands to user code: triggers (`TriggerContext`, also the
OnMergeContext), process window functions (`WindowContext`), assigners and evictors.

Each is one object per operator, re-pointed at the current window before use (cheap)."""

from __future__ import annotations

from typing import Any

from tidegate.runtime.internal_timers import TimeDomain

#: module constants (an Enum member lookup costs an attribute descriptor call)
EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


class TriggerContext:
    """What a trigger sees (PyFlink's `Trigger.TriggerContext` / `OnMergeContext`): timers and
    state scoped to the current key and `window`."""

    def __init__(self, operator: Any) -> None:
        self._op = operator
        self._scope = operator.trigger_scope
        self._window: Any = None
        #: the windows being merged (during on_merge only)
        self.merged_windows: list[Any] = []

    @property
    def window(self) -> Any:
        return self._window

    @window.setter
    def window(self, window: Any) -> None:
        self._window = window
        self._scope.window = window

    def get_current_processing_time(self) -> int:
        return self._op.timers.internal.clock()

    def get_current_watermark(self) -> int:
        return self._op.timers.internal.current_watermark

    def get_metric_group(self) -> Any:
        return None

    def register_processing_time_timer(self, time: int) -> None:
        self._op.timers.register(PROCESSING, time, self._window)

    def register_event_time_timer(self, time: int) -> None:
        self._op.timers.register(EVENT, time, self._window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.delete(PROCESSING, time, self._window)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.delete(EVENT, time, self._window)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        """State scoped to the current key and window."""
        return self._scope.get_state(state_descriptor)

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        """(on_merge) Merge the merged windows' state into the merge result's."""
        sources = [w for w in self.merged_windows if w != self._window]
        self._scope.merge_into(state_descriptor, self._window, sources)


class WindowContext:
    """`context` of ProcessWindowFunction.process (PyFlink's names)."""

    def __init__(self, operator: Any) -> None:
        self._op = operator
        self._scope = operator.window_state_scope
        self._window: Any = None

    def _set_window(self, window: Any) -> None:
        self._window = window
        self._scope.window = window

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._op.timers.internal.clock()

    def current_watermark(self) -> int:
        return self._op.timers.internal.current_watermark

    def window_state(self) -> Any:
        """Keyed state scoped to this window (clear it in ProcessWindowFunction.clear)."""
        return self._scope

    def global_state(self) -> Any:
        """Keyed state of the current key, shared by all its windows."""
        return self._op.keyed_backend

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit to a side output, with the window's max timestamp as its timestamp."""
        self._op.side_outputs.collect(output_tag, value, self._window.max_timestamp())


class ClockContext:
    """Assigners' and evictors' context: the two clocks."""

    def __init__(self, operator: Any) -> None:
        self._op = operator

    def get_current_processing_time(self) -> int:
        return self._op.timers.internal.clock()

    def get_current_watermark(self) -> int:
        return self._op.timers.internal.current_watermark

    def get_runtime_context(self) -> Any:
        """The operator's keyed state, for the current key (count assigners keep counts)."""
        return self._op.keyed_backend
