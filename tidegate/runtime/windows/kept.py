"""Windows that keep their elements, batch by batch: event-time tumbling and sliding windows
whose function sees all the window's elements (`process`/`apply` without pre-aggregation), or
with an evictor (Flink's EvictingWindowOperator: its pre-aggregation runs when the window
fires, over what the evictor left).

Used by WindowOperator only where the behaviour is the per-window operator's (`kept_fits`):
an event-time Tumbling/SlidingEventTimeWindows assigner, the default EventTimeTrigger, and no
pre-aggregation unless there is an evictor. Outputs, their order within a key, late data,
late firings within the allowed lateness, evictions, cleanup and the window function's
`process`/`apply`/`clear` calls are the per-window operator's; what changes is the number of
calls it takes:

* elements: the windows of an element are computed with a cache of window objects, the batch's
  elements are collected per key and appended to the key's list in one `add_all` (the end of
  the batch, or before a late element, which goes the per-element way); a key's timers are
  asked for only when its window (set) differs from its previous element's in the batch, and
  registered in one call, in the order the elements asked for them (no timer fires within a
  batch);
* timers: the keyed timer service's, one per key and window end (and cleanup time, with
  allowed lateness): the window of a firing timer follows from its timestamp (as in
  slicing.py), so the `__window_timers__` map is not written, and a watermark's due timers
  fire in one loop (entries of that map restored from a checkpoint of the per-window operator
  are removed as their timers fire: WindowTimers.pop_event_timers);
* sliding windows on the heap backend: this path keeps each key's list sorted by window
  (stably: each window's elements stay in arrival order; the order across windows carries no
  meaning), merging a batch in by bisection, so a firing finds its window's elements by
  bisection instead of scanning the list (a list restored, or appended to by a late element
  or left by an evictor, is sorted when next merged into).

State: the list state `__window_elements__` of `(window, value, timestamp)` per key, each
window's elements in arrival order, the per-window operator's layout (ListContents):
checkpoints and savepoints of either path restore into the other's contents, and rescale with
their keys.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import groupby
from operator import countOf, itemgetter
from typing import Any

from tidegate.runtime.internal_timers import MAX_WATERMARK, TimeDomain
from tidegate.runtime.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from tidegate.runtime.windows.contents import ELEMENTS_STATE, ListContents
from tidegate.runtime.windows.triggers import EventTimeTrigger
from tidegate.runtime.windows.windows import TimeWindow
from tidegate.state.descriptors import ListStateDescriptor

EVENT = TimeDomain.EVENT_TIME
#: cached window objects (per window start) kept at most
_MAX_CACHED = 4096
_first, _second = itemgetter(0), itemgetter(1)


def kept_fits(spec: Any, trigger: Any) -> bool:
    """True if the windows of `spec` keep their elements and can take the batched path with
    the per-window operator's behaviour."""
    return (
        type(spec.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
        and type(trigger) is EventTimeTrigger
        and (spec.aggregation is None or spec.evictor is not None)
    )


class KeptWindows:
    """The batched element-keeping path of one WindowOperator subtask (module docstring)."""

    def __init__(self, operator: Any) -> None:
        self.op = operator
        assigner = operator.assigner
        self.size = assigner.size
        self.slide = getattr(assigner, "slide", self.size)
        self.offset = assigner.offset
        self.lateness = operator.lateness
        self._clear_function = operator.spec.function.has_clear()
        #: evictor (and its pre-aggregation): a window fires through ListContents
        self._evictor = operator.spec.evictor
        #: window start -> its TimeWindow (one object: comparing it with itself is quick)
        self._windows: dict[int, TimeWindow] = {}
        #: (newest window start, count) -> an element's sliding windows, newest first
        self._window_sets: dict[tuple[int, int], tuple[TimeWindow, ...]] = {}
        #: key -> its elements of the batch not yet appended to its list state
        self._pending: dict[Any, list[tuple[TimeWindow, Any, int]]] = {}
        #: (timestamp, key) of the event-time timers the batch's elements ask for, in order
        self._timers: list[tuple[int, Any]] = []
        #: sliding windows on the heap backend: keys whose list this path keeps sorted by
        #: window (stable: each window's elements stay in arrival order), so a window's
        #: elements are found by bisection; others (restored, or after a late element or an
        #: eviction) are sorted when next appended to
        self._sorted: set[Any] = set()

    def open(self) -> None:
        self.backend = backend = self.op.keyed_backend
        self.state = backend.get_list_state(ListStateDescriptor(ELEMENTS_STATE))
        if self._evictor is not None:
            self.contents = ListContents(backend, self.op.spec.aggregation)
        #: the heap backend's live {key: [(window, value, timestamp)]} dict, to read from
        #: (changes go through the state object); None on other backends
        self._table = backend.table(ELEMENTS_STATE) if hasattr(backend, "table") else None
        #: keep lists sorted by window: sliding windows (a list holds several windows, each
        #: element in each of them) on the heap (a list is rewritten per batch: on rocksdb
        #: that would rewrite it on disk; there, elements are appended)
        self._sorting = self._table is not None and self.size != self.slide
        self._register = self.op.timers.internal.register
        self._register_all = self.op.timers.internal.register_all

    def on_snapshot(self) -> None:
        pass  # elements are never changed in place, and a batch is appended before any snapshot

    # elements ----------------------------------------------------------------------------------
    def process(self, records: list, timestamps: list[int]) -> None:
        if len(self._windows) > _MAX_CACHED:
            self._windows.clear()
            self._window_sets.clear()
        try:
            if self.size == self.slide:
                self._process_tumbling(records, timestamps)
            else:
                self._process_sliding(records, timestamps)
        finally:
            self._append_pending()

    def _process_tumbling(self, records: list, timestamps: list[int]) -> None:
        select, timers, window_of = self.op.key_selector, self._timers, self._window
        size, offset, lateness, pending = self.size, self.offset, self.lateness, self._pending
        limit = self.op.current_watermark - size + 1  # a window starting at or before it ended
        previous, w = None, None  # the previous element's window start, and its window
        for r, t in zip(records, timestamps, strict=True):
            key = select(r)
            start = t - (t - offset + size) % size
            if start != previous:
                if start <= limit:
                    self._late_element(key, r, t)
                    continue
                previous, w = start, window_of(start)
            p = pending.get(key)
            if p is None:
                p = pending[key] = [(w, r, t)]
            elif p[-1][0] is w:  # the key's previous element's window: its timers are set
                p.append((w, r, t))
                continue
            else:
                p.append((w, r, t))
            end = start + size - 1
            timers.append((end, key))
            if lateness:
                timers.append((min(end + lateness, MAX_WATERMARK), key))

    def _process_sliding(self, records: list, timestamps: list[int]) -> None:
        select, timers = self.op.key_selector, self._timers
        size, slide, offset, lateness = self.size, self.slide, self.offset, self.lateness
        sets, pending, watermark = self._window_sets, self._pending, self.op.current_watermark
        last: dict[Any, Any] = {}  # key -> its previous element's windows in this batch
        for r, t in zip(records, timestamps, strict=True):
            key = select(r)
            newest = t - (t - offset + slide) % slide
            count = (newest - t + size - 1) // slide + 1  # windows holding t: starts > t - size
            if count <= 0 or newest - (count - 1) * slide + size - 1 <= watermark:
                self._late_element(key, r, t)  # in no window, or in one the watermark passed
                continue
            ws = sets.get((newest, count))
            if ws is None:  # the assigner's order: newest first
                ws = sets[(newest, count)] = tuple(
                    map(self._window, range(newest, newest - count * slide, -slide))
                )
            p = pending.get(key)
            if p is None:
                p = pending[key] = []
            p.extend([(w, r, t) for w in ws])
            if last.get(key) is not ws:  # else its timers are set
                last[key] = ws
                for w in ws:
                    end = w.end - 1
                    timers.append((end, key))
                    if lateness:
                        timers.append((min(end + lateness, MAX_WATERMARK), key))

    def _window(self, start: int) -> TimeWindow:
        """The window starting at `start` (the cached object)."""
        window = self._windows.get(start)
        if window is None:
            window = self._windows[start] = TimeWindow(start, start + self.size)
        return window

    def _append_pending(self) -> None:
        """Register the batch's timers (in the order its elements asked for them) and append
        its elements to their keys' lists (one call per key)."""
        if self._timers:
            self._register_all(EVENT, self._timers)
            self._timers.clear()
        pending = self._pending
        if not pending:
            return
        backend = self.backend
        if self._sorting:
            table, update, ordered = self._table, self.state.update, self._sorted
            for key, elements in pending.items():
                backend.current_key = key
                elements.sort(key=_first)  # stable: arrival order within each window
                current = table.get(key)
                if current is not None:
                    if key not in ordered:
                        current = sorted(current, key=_first)
                    elements = merge_by_window(current, elements)
                update(elements)
                ordered.add(key)
        else:
            add_all = self.state.add_all
            for key, elements in pending.items():
                backend.current_key = key
                add_all(elements)
        pending.clear()

    def _late_element(self, key: Any, value: Any, timestamp: int) -> None:
        """An element in a window the watermark has passed, or in no window: the per-window
        operator's steps (late firings within the allowed lateness, or the late-data output)."""
        self._append_pending()  # a late firing sees the earlier elements of the batch
        op, lateness, register = self.op, self.lateness, self._register
        watermark = op.current_watermark
        self.backend.current_key = key
        skipped = True
        for window in op.assigner.assign_windows(value, timestamp, op.clock_ctx):
            end = window.end - 1
            if end + lateness <= watermark:
                continue  # late for this window
            skipped = False
            self.state.add((window, value, timestamp))
            self._sorted.discard(key)
            if end <= watermark:
                self.fire(window)  # a late firing within the allowed lateness
            else:
                register(EVENT, end)
            if lateness:
                register(EVENT, min(end + lateness, MAX_WATERMARK))
        if skipped and timestamp + lateness <= watermark:
            op.late_element(value, timestamp)

    # firing ------------------------------------------------------------------------------------
    def _elements(self) -> list[tuple[TimeWindow, Any, int]]:
        """The current key's elements (not to be changed: the heap table's own list)."""
        if self._table is not None:
            return self._table.get(self.backend.current_key) or []
        return self.state.get()

    def advance(self, watermark: int) -> None:
        """The watermark moved to `watermark`: the due timers fire in their order, in one loop
        (firing registers no timers)."""
        due = self.op.timers.pop_event_timers(watermark)
        if not due:
            return
        backend = self.backend
        if self.lateness or self._evictor is not None:
            for timestamp, key in due:
                backend.current_key = key
                self.on_timer(timestamp, EVENT)
            return
        # the common case inlined: a window's end is its cleanup time; each fires and goes
        size, slide, offset, emit = self.size, self.slide, self.offset, self.op.emit_window
        state, clear_function, window_of = self.state, self._clear_function, self._window
        take, ordered = self._take, self._sorted
        for timestamp, key in due:
            backend.current_key = key
            start = timestamp + 1 - size
            if (start - offset) % slide:
                continue  # not a window's end (cannot happen without lateness)
            window = window_of(start)
            taken = take(key, window)
            if taken is None:
                continue
            values, rest = taken
            emit(window, values)
            if rest:
                state.update(rest)
            else:
                state.clear()
                ordered.discard(key)
            if clear_function:
                self.op.clear_window_function(window)

    def on_timer(self, timestamp: int, domain: TimeDomain) -> None:
        """A timer of the current key: the window ending at `timestamp` fires; the window
        whose cleanup time it is goes."""
        size, slide, offset = self.size, self.slide, self.offset
        start = timestamp + 1 - size
        if (start - offset) % slide == 0:
            self.fire(TimeWindow(start, start + size))
        if timestamp == MAX_WATERMARK and self.lateness:
            # end of input: every cleanup time past the largest timestamp is MAX_WATERMARK
            for window in dict.fromkeys(w for w, _, _ in self._elements()):
                self.clear(window)
            return
        start -= self.lateness
        if (start - offset) % slide == 0:
            self.clear(TimeWindow(start, start + size))

    def _take(self, key: Any, window: TimeWindow) -> tuple[list[Any], list[Any]] | None:
        """The current key's values in `window` (in arrival order) and its other elements
        (in list order); None if the window holds none of them."""
        elements = self._elements()
        if key in self._sorted:  # the window's elements are one run: found by bisection
            j = bisect_left(elements, window, key=_first)
            i = bisect_right(elements, window, j, key=_first)
            if i == j:
                return None
            return list(map(_second, elements[j:i])), elements[:j] + elements[i:]
        # (in C: elements of the batched path hold the cached window object itself)
        n = countOf(map(_first, elements), window)
        if not n:
            return None
        if n == len(elements):  # the key's only window: all its elements, in order
            return list(map(_second, elements)), []
        return [v for w, v, _ in elements if w == window], [e for e in elements if e[0] != window]

    def fire(self, window: TimeWindow) -> None:
        """Emit `window`'s result for the current key (no elements: it does not fire)."""
        if self._evictor is not None:
            contents, evictor, ctx = self.contents, self._evictor, self.op.clock_ctx
            inputs = contents.inputs(window, evictor, ctx)
            if inputs is not None:
                self.op.emit_window(window, inputs)
                contents.after_fire(window, evictor, ctx)
                self._sorted.discard(self.backend.current_key)  # it kept what was left last
            return
        taken = self._take(self.backend.current_key, self._window(window.start))
        if taken is not None:
            self.op.emit_window(window, taken[0])

    def clear(self, window: TimeWindow) -> None:
        """`window` is past its cleanup time: its elements go, then its function's clear()."""
        key = self.backend.current_key
        taken = self._take(key, self._window(window.start))
        if taken is None:
            return  # the key has nothing in it: the per-window operator had no timer for it
        self.state.update(taken[1])
        if not taken[1]:
            self._sorted.discard(key)
        if self._clear_function:
            self.op.clear_window_function(window)


def merge_by_window(current: list[Any], new: list[Any]) -> list[Any]:
    """Two lists of `(window, value, timestamp)` sorted by window merged into one: each
    window's elements of `current` first, then its `new` ones (arrival order per window)."""
    merged: list[Any] = []
    position = 0
    for window, run in groupby(new, _first):
        end = bisect_right(current, window, position, key=_first)
        merged += current[position:end]
        merged += run
        position = end
    merged += current[position:]
    return merged
