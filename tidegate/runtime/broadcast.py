"""The broadcast process operator: `DataStream.connect(broadcast_stream).process(function)`.

A two-input operator. Input 1 is the regular stream (forward, rebalanced, or hashed by key for
a KeyedStream); input 2 is the broadcast stream, whose every record reaches every subtask.

* `process_element(value, ctx)` runs per regular record; `ctx.get_broadcast_state(descriptor)`
  is read-only (ReadOnlyBroadcastState); on a keyed stream the record's key is current
  (`ctx.get_current_key()`, keyed state through the runtime context).
* `process_broadcast_element(value, ctx)` runs per broadcast record; the broadcast state is
  writable; on a keyed stream no key is current, and `ctx.apply_to_keyed_state(descriptor,
  function)` calls `function(key, state)` for every key of this subtask with that state.

Broadcast states are the map states of the MapStateDescriptors given to
`DataStream.broadcast(...)`, registered before `open` (restored ones keep their entries) and
snapshotted as operator state in the `broadcast` redistribution mode (state/operator_state.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from tidegate.runtime.operators import OperatorRuntime, process_each
from tidegate.runtime.timer_service import OnTimerContext, OperatorTimers
from tidegate.runtime.two_input import TwoInputStreamOperator
from tidegate.state.broadcast_state import BroadcastState, ReadOnlyBroadcastState
from tidegate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)

__all__ = ["BroadcastContext", "BroadcastProcessOperator", "ReadOnlyBroadcastContext"]

_KEYED_GETTERS: tuple[tuple[type, str], ...] = (
    (ValueStateDescriptor, "get_state"),
    (ListStateDescriptor, "get_list_state"),
    (MapStateDescriptor, "get_map_state"),
    (ReducingStateDescriptor, "get_reducing_state"),
    (AggregatingStateDescriptor, "get_aggregating_state"),
)


def _broadcast_state(operator: str, states: dict[str, Any], descriptor: Any) -> Any:
    """The broadcast state `descriptor` names, or an error saying which ones there are."""
    if not isinstance(descriptor, MapStateDescriptor):
        raise TypeError(
            "get_broadcast_state expects the MapStateDescriptor passed to "
            f"DataStream.broadcast(...), got {type(descriptor).__name__}"
        )
    state = states.get(descriptor.name)
    if state is None:
        known = ", ".join(repr(n) for n in states) or "none"
        raise ValueError(
            f"broadcast state {descriptor.name!r} is unknown to operator {operator!r}: only "
            "the MapStateDescriptors passed to DataStream.broadcast(...) are broadcast states "
            f"(here: {known}). Pass this descriptor to broadcast(...) too"
        )
    return state


class _BaseContext:
    def __init__(self, operator: BroadcastProcessOperator, states: dict[str, Any]) -> None:
        self._op = operator
        self._states = states
        self._timestamp: int | None = None

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> Any:
        return _broadcast_state(self._op.name, self._states, state_descriptor)

    def timestamp(self) -> int | None:
        """The current record's event-time timestamp, None if it has none."""
        return self._timestamp

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit `value` to the side output `output_tag`, with the record's timestamp."""
        self._op.side_outputs.collect(output_tag, value, self._timestamp)

    def current_watermark(self) -> int:
        return self._op.current_watermark


class ReadOnlyBroadcastContext(_BaseContext):
    """`ctx` of `process_element`: broadcast state is read-only here."""

    def get_current_key(self) -> Any:
        backend = self._op.keyed_backend
        if backend is None:
            raise RuntimeError(
                "get_current_key() is only available in a KeyedBroadcastProcessFunction "
                "(connect a KeyedStream to the broadcast stream)"
            )
        return backend.current_key

    def timer_service(self) -> Any:
        timers = self._op.timers
        if timers is None:
            raise RuntimeError(
                "timers need keyed state: use a KeyedBroadcastProcessFunction on a KeyedStream "
                "connected to the broadcast stream"
            )
        return timers.service


class BroadcastOnTimerContext(OnTimerContext):
    """The `ctx` of a KeyedBroadcastProcessFunction's `on_timer`: the timer's key, time
    domain and timer service, and the broadcast state, read-only."""

    __slots__ = ("_operator_name", "_states")

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> Any:
        return _broadcast_state(self._operator_name, self._states, state_descriptor)


class BroadcastContext(_BaseContext):
    """`ctx` of `process_broadcast_element`: broadcast state is writable here."""

    def apply_to_keyed_state(
        self, state_descriptor: StateDescriptor, function: Callable[[Any, Any], None]
    ) -> None:
        """Call `function(key, state)` for every key of this subtask that has state under
        `state_descriptor` (the state is scoped to `key` during the call)."""
        backend = self._op.keyed_backend
        if backend is None:
            raise RuntimeError(
                "apply_to_keyed_state() needs keyed state: use a KeyedBroadcastProcessFunction "
                "on a KeyedStream connected to the broadcast stream"
            )
        getter = next((g for cls, g in _KEYED_GETTERS if isinstance(state_descriptor, cls)), None)
        if getter is None:
            raise TypeError(
                "apply_to_keyed_state expects a keyed state descriptor (ValueStateDescriptor, "
                f"ListStateDescriptor, ...), got {type(state_descriptor).__name__}"
            )
        state = getattr(backend, getter)(state_descriptor)
        saved = backend.current_key
        try:
            for key in _keys_with_state(backend, state_descriptor.name):
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = saved


def _keys_with_state(backend: Any, name: str) -> list[Any]:
    """The keys of this subtask that have state `name` (a copy: the caller may clear some).

    `entries(name)` is the keyed backends' listing for internal services (the timer service
    uses it too); the heap backend's live `table(name)` serves where it is absent."""
    entries = getattr(backend, "entries", None)
    if entries is not None:
        return [key for key, _value in entries(name)]
    return list(backend.table(name))


class BroadcastProcessOperator(TwoInputStreamOperator):
    """Runs a (Keyed)BroadcastProcessFunction; see the module docstring."""

    tagged_outputs = True  # `yield tag, value` goes to a side output

    stores_watermark = True

    def __init__(
        self,
        function: Any,
        descriptors: Iterable[MapStateDescriptor],
        key_selector: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(function, **kw)
        self.descriptors = tuple(descriptors)
        self.key_selector = key_selector
        self.keyed = key_selector is not None
        self.broadcast_states: dict[str, BroadcastState] = {}

    def initialize_state(self, runtime: OperatorRuntime, restored: Any | None) -> None:
        super().initialize_state(runtime, restored)
        for descriptor in self.descriptors:
            state = self.operator_state.get_broadcast_state(descriptor)
            self.broadcast_states[descriptor.name] = state

    def open(self) -> None:
        read_only: dict[str, ReadOnlyBroadcastState] = {
            name: s.read_only() for name, s in self.broadcast_states.items()
        }
        self._element_ctx = ReadOnlyBroadcastContext(self, read_only)
        self._broadcast_ctx = BroadcastContext(self, dict(self.broadcast_states))
        #: the keyed side's timers (runtime/timer_service.py); none on a non-keyed stream
        self.timers = None
        if self.keyed_backend is not None:
            self.timers = OperatorTimers(self, BroadcastOnTimerContext)
            self.timers.context._operator_name, self.timers.context._states = self.name, read_only
        super().open()

    def on_watermark(self, watermark: int) -> None:
        if self.timers is not None:
            self.timers.advance_watermark(watermark)

    def finish(self) -> None:
        if self.timers is not None:  # event-time timers fire at the end of the input
            self.timers.end_of_input()
        super().finish()

    def process_batch1(self, records: list) -> None:
        self._run(self.function.process_element, self._element_ctx, records, keyed=True)

    def process_batch2(self, records: list) -> None:
        if self.keyed_backend is not None:
            self.keyed_backend.current_key = None  # no key is current on the broadcast side
        self._run(self.function.process_broadcast_element, self._broadcast_ctx, records)

    def _run(self, call: Callable, ctx: _BaseContext, records: list, keyed: bool = False) -> None:
        """Call `call(record, ctx)` per record; outputs inherit their record's timestamp."""
        backend = self.keyed_backend if keyed else None
        out = process_each(call, ctx, records, backend, self.key_selector)
        if out:
            self.emit(out)
        self.side_outputs.flush()
