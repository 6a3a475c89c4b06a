"""Window contents in keyed state, and the user's window function as the operator calls it.

Contents (per key, namespaced by window):
* `AccumulatingContents` — reduce / aggregate without an evictor: one accumulator per window,
  the map state `__window_contents__` (window -> accumulator), updated incrementally.
* `ListContents` — process / apply without pre-aggregation, and every evicting window: the
  elements themselves, the list state `__window_elements__` of `(window, value, timestamp)`
  (appending is O(1) and a snapshot never sees a half-changed list).

`InternalWindowFunction` wraps the user's function (ProcessWindowFunction, WindowFunction and their
all-window forms, or none: then the pre-aggregated result itself is emitted).
"""

from __future__ import annotations

from typing import Any

from tidegate.runtime.windows.window_state import private_copy
from tidegate.runtime.windows.windows import TimestampedValue
from tidegate.state.descriptors import ListStateDescriptor, MapStateDescriptor

CONTENTS_STATE = "__window_contents__"
ELEMENTS_STATE = "__window_elements__"


class Aggregation:
    """Pre-aggregation of a window's values: a ReduceFunction or an AggregateFunction."""

    def __init__(
        self, reduce_function: Any = None, aggregate_function: Any = None, mergeable: bool = False
    ) -> None:
        self.reduce = getattr(reduce_function, "reduce", reduce_function)
        self.aggregate = aggregate_function
        #: partial results can be merged: a ReduceFunction (it is its own merge), or an
        #: AggregateFunction that implements `merge` (the caller knows: `mergeable`)
        self.mergeable = aggregate_function is None or mergeable
        #: the user's function object (its open/close run with the operator's)
        self.function = aggregate_function if aggregate_function is not None else reduce_function

    def add(self, acc: Any, value: Any, shared: bool = True) -> Any:
        """acc (None: none yet) with `value` added. A `shared` acc (one a snapshot may hold) is
        copied first, since reduce/add may change their first argument in place."""
        if self.aggregate is None:
            if acc is None:
                return value
            return self.reduce(private_copy(acc) if shared else acc, value)
        if acc is None:
            acc = self.aggregate.create_accumulator()
        elif shared:
            acc = private_copy(acc)
        return self.aggregate.add(value, acc)

    def merge(self, a: Any, b: Any) -> Any:
        if self.aggregate is None:
            return self.reduce(private_copy(a), b)
        return self.aggregate.merge(private_copy(a), b)

    def merge_into(self, parts: list[Any]) -> Any:
        """The accumulators `parts` (stored in state, in time order) merged into one; a single
        one is returned as it is."""
        acc = parts[0]
        if len(parts) > 1:
            merge = self.reduce if self.aggregate is None else self.aggregate.merge
            acc = private_copy(acc)
            for part in parts[1:]:
                acc = merge(acc, part)
        return acc

    def result(self, acc: Any) -> Any:
        return acc if self.aggregate is None else self.aggregate.get_result(acc)

    def over(self, values: list[Any]) -> list[Any]:
        """The aggregate of `values` as the one-element input of the window function."""
        acc, owned = None, False
        for v in values:  # values are stored in state: an acc that is one of them is copied
            new = self.add(acc, v, shared=not owned)
            owned = new is not v and (acc is not None or self.aggregate is not None)
            acc = new
        if acc is None:  # every element was evicted
            if self.aggregate is None:
                return []
            acc = self.aggregate.create_accumulator()
        return [self.result(acc)]


class AccumulatingContents:
    """One accumulator per window. An accumulator may be held by a checkpoint still being
    written, so it is copied before its first change after each snapshot (copy on write, as
    heap state does); `_private` holds the (key, window) accumulators made since the last one."""

    def __init__(self, backend: Any, aggregation: Aggregation) -> None:
        self._backend = backend
        self._state = backend.get_map_state(MapStateDescriptor(CONTENTS_STATE))
        self._agg = aggregation
        self._private: set[tuple[Any, Any]] = set()

    def on_snapshot(self) -> None:
        """A snapshot now holds every accumulator: the next change of each copies it."""
        self._private.clear()

    def add(self, window: Any, value: Any, timestamp: int | None) -> None:
        owner = (self._backend.current_key, window)
        acc = self._state.get(window)
        new = self._agg.add(acc, value, shared=owner not in self._private)
        self._state.put(window, new)
        # ours to change in place next time: a copy or a fresh accumulator, never the element
        # itself (one element object is added to every window it is in, e.g. sliding ones)
        if new is value:
            self._private.discard(owner)
        elif acc is not None or self._agg.aggregate is not None:
            self._private.add(owner)

    def contains(self, window: Any) -> bool:
        return self._state.contains(window)

    def inputs(self, window: Any, evictor: Any, ctx: Any) -> list[Any] | None:
        """The window function's input, None if the window holds nothing."""
        if not self._state.contains(window):
            return None
        return [self._agg.result(self._state.get(window))]

    def after_fire(self, window: Any, evictor: Any, ctx: Any) -> None:
        pass

    def clear(self, window: Any) -> None:
        self._state.remove(window)
        self._private.discard((self._backend.current_key, window))

    def merge(self, target: Any, sources: list[Any]) -> None:
        self._private.discard((self._backend.current_key, target))
        state, merged = self._state, self._state.get(target)
        for window in sources:
            acc = state.get(window)
            if acc is not None:
                merged = acc if merged is None else self._agg.merge(merged, acc)
                state.remove(window)
        if merged is not None:
            state.put(target, merged)


class ListContents:
    def on_snapshot(self) -> None:
        pass  # its elements are never changed in place

    def __init__(self, backend: Any, aggregation: Aggregation | None) -> None:
        self._state = backend.get_list_state(ListStateDescriptor(ELEMENTS_STATE))
        self._agg = aggregation
        self._evicted: dict[Any, list[TimestampedValue]] = {}

    def add(self, window: Any, value: Any, timestamp: int | None) -> None:
        self._state.add((window, value, timestamp))

    def _elements(self, window: Any) -> list[TimestampedValue]:
        return [TimestampedValue(v, t) for w, v, t in self._state.get() if w == window]

    def contains(self, window: Any) -> bool:
        return any(w == window for w, _, _ in self._state.get())

    def inputs(self, window: Any, evictor: Any, ctx: Any) -> list[Any] | None:
        """The window function's input after `evictor.evict_before` (Flink's
        EvictingWindowOperator), None if the window holds nothing."""
        elements = self._elements(window)
        if not elements:
            return None
        if evictor is not None:
            evictor.evict_before(elements, len(elements), window, ctx)
            self._evicted[window] = elements
        values = [e.value for e in elements]
        return values if self._agg is None else self._agg.over(values)

    def after_fire(self, window: Any, evictor: Any, ctx: Any) -> None:
        """`evictor.evict_after`, then the window keeps what the evictor left."""
        elements = self._evicted.pop(window, None)
        if evictor is None or elements is None:
            return
        evictor.evict_after(elements, len(elements), window, ctx)
        kept = [(w, v, t) for w, v, t in self._state.get() if w != window]
        kept.extend((window, e.value, e.timestamp) for e in elements)
        self._state.update(kept)

    def clear(self, window: Any) -> None:
        entries = self._state.get()
        kept = [e for e in entries if e[0] != window]
        if len(kept) != len(entries):
            self._state.update(kept)

    def merge(self, target: Any, sources: list[Any]) -> None:
        moved = set(sources)
        self._state.update([(target if w in moved else w, v, t) for w, v, t in self._state.get()])


def make_contents(backend: Any, aggregation: Aggregation | None, evicting: bool) -> Any:
    if aggregation is not None and not evicting:
        return AccumulatingContents(backend, aggregation)
    return ListContents(backend, aggregation)


class InternalWindowFunction:
    """The user's window function as the operator calls it: `(key, window, ctx, inputs) ->
    outputs`. `kind`: "pass" (emit the inputs: reduce/aggregate without a window function),
    "process" / "apply" (keyed), "all_process" / "all_apply" (window_all)."""

    def __init__(self, kind: str, function: Any = None) -> None:
        if kind not in ("pass", "process", "apply", "all_process", "all_apply"):
            raise ValueError(f"unknown window function kind {kind!r}")
        self.kind = kind
        self.function = function
        method = "apply" if kind.endswith("apply") else "process"
        self._call = getattr(function, method, function)

    def __call__(self, key: Any, window: Any, ctx: Any, inputs: list[Any]) -> Any:
        match self.kind:
            case "pass":
                return inputs
            case "process":
                return self._call(key, ctx, inputs)
            case "apply":
                return self._call(key, window, inputs)
            case "all_process":
                return self._call(ctx, inputs)
            case _:
                return self._call(window, inputs)

    def has_clear(self) -> bool:
        """A ProcessWindowFunction with `clear(context)` (called when a window is gone)."""
        return self.kind.endswith("process") and getattr(self.function, "clear", None) is not None

    def clear(self, ctx: Any) -> None:
        """The window is gone for good: ProcessWindowFunction.clear(context)."""
        if self.has_clear():
            self.function.clear(ctx)
