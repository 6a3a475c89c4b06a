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

* elements: the windows of an element are computed with a cache of windows and window sets,
  and the batch's elements are collected per key (sliding: in runs of elements with the same
  windows), added to the key's state at the end of the batch (or before a late element, which
  goes the per-element way); a key's timers are asked for only when its windows differ from
  its previous element's in the batch, and registered in one call, in the order the elements
  asked for them (no timer fires within a batch);
* timers: the keyed timer service's, one per key and window end (and cleanup time, with
  allowed lateness): the window of a firing timer follows from its timestamp (as in
  slicing.py), so the `__window_timers__` map is not written, and a watermark's due timers
  fire in one loop (entries of that map restored from a checkpoint of the per-window operator
  are removed as their timers fire: WindowTimers.pop_event_timers);
* sliding windows on the heap backend without an evictor: a key's elements live in a dict of
  lists, window start -> `(value, timestamp)` in arrival order (Flink's list state per key
  and window namespace): an element is one pair appended to each of its windows' lists and a
  firing window's list is taken whole. The key's list state is written from it when a
  snapshot is taken (`on_snapshot`, in the synchronous phase, for the keys changed since the
  last one: a `(window, value, timestamp)` tuple per element and window, which the lists do
  not hold because building them per element halves the throughput) and when its last window
  goes; a key whose list state holds elements (restored, or of the per-window operator) is
  moved into the dict when first touched. Elsewhere (tumbling windows: a key has one window
  in flight but for late data; rocksdb; evictors) elements are appended to the list state
  and a window's elements are picked out of it when it fires.

State: the list state `__window_elements__` of `(window, value, timestamp)` per key, each
window's elements in arrival order, the per-window operator's layout (ListContents):
checkpoints and savepoints of either path restore into the other's contents, and rescale with
their keys.
"""

from __future__ import annotations

from operator import countOf, itemgetter
from typing import Any

from tidegate.runtime.internal_timers import MAX_WATERMARK, TimeDomain
from tidegate.runtime.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from tidegate.runtime.windows.contents import ELEMENTS_STATE, ListContents
from tidegate.runtime.windows.triggers import EventTimeTrigger
from tidegate.runtime.windows.windows import TimeWindow
from tidegate.state.descriptors import ListStateDescriptor

EVENT = TimeDomain.EVENT_TIME
#: cached window objects and window sets (per window start) kept at most
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
        #: an element's window starts, newest first (the assigner's order), by the newest
        #: start, or (newest, count) where the count varies (size not a multiple of the slide)
        self._window_sets: dict[Any, tuple[int, ...]] = {}
        #: windows per element where the count does not vary
        self._full = self.size // self.slide if self.size % self.slide == 0 else 0
        #: key -> its elements of the batch not yet added: tumbling, its list-state entries
        #: `(window, value, timestamp)`; sliding, runs of [starts, [(value, timestamp)...]]
        self._pending: dict[Any, list[Any]] = {}
        #: (timestamp, key) of the event-time timers the batch's elements ask for, in order
        self._timers: list[tuple[int, Any]] = []
        #: heap backend, no evictor: key -> {window start: [(value, timestamp)]}, the truth
        #: for the keys it holds (their list state is written by on_snapshot); None: the
        #: list state is the truth
        self._live: dict[Any, dict[int, list[tuple[Any, int]]]] | None = None
        #: keys of `_live` changed since their list state was last written
        self._dirty: set[Any] = set()

    def open(self) -> None:
        self.backend = backend = self.op.keyed_backend
        self.state = backend.get_list_state(ListStateDescriptor(ELEMENTS_STATE))
        #: the heap backend's live {key: [(window, value, timestamp)]}, to read from without
        #: a copy (changes go through the state object); None on other backends
        self._table = backend.table(ELEMENTS_STATE) if hasattr(backend, "table") else None
        if self._evictor is not None:
            self.contents = ListContents(backend, self.op.spec.aggregation)
        elif self._table is not None and self.size != self.slide:
            # sliding windows: a list per window (an element is in several; tumbling windows
            # keep one window per key in order, where the list state itself is quicker; on
            # rocksdb a key's list would be rewritten on disk per snapshot)
            self._live = {}
        self._register = self.op.timers.internal.register
        self._register_all = self.op.timers.internal.register_all

    def on_snapshot(self) -> None:
        """Write the list state of the keys changed since the last snapshot (elements of the
        list state are never changed in place, and a batch is added before any snapshot)."""
        if self._live is None or not self._dirty:
            return
        backend, live, update, window_of = self.backend, self._live, self.state.update, self._window
        before = backend.current_key
        for key in self._dirty:
            backend.current_key = key
            update([(window_of(s), v, t) for s, pairs in live[key].items() for v, t in pairs])
        self._dirty.clear()
        backend.current_key = before

    # elements ----------------------------------------------------------------------------------
    def process(self, records: list, timestamps: list[int]) -> None:
        if len(self._windows) > _MAX_CACHED or len(self._window_sets) > _MAX_CACHED:
            self._windows.clear()
            self._window_sets.clear()
        try:
            if self.size == self.slide:
                self._collect_tumbling(records, timestamps)
            else:
                self._collect_sliding(records, timestamps)
        finally:
            self._add_pending()

    def _collect_tumbling(self, records: list, timestamps: list[int]) -> None:
        """Each element's window; the elements gathered per key as list-state entries, the
        timers asked for when a key's window changes."""
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
                pending[key] = [(w, r, t)]
            elif p[-1][0] is w:  # the key's previous element's window: its timers are set
                p.append((w, r, t))
                continue
            else:
                p.append((w, r, t))
            end = start + size - 1
            timers.append((end, key))
            if lateness:
                timers.append((min(end + lateness, MAX_WATERMARK), key))

    def _collect_sliding(self, records: list, timestamps: list[int]) -> None:
        """Each element's windows; the elements gathered per key in runs with the same windows,
        the timers of each run's windows asked for."""
        select, timers, full = self.op.key_selector, self._timers, self._full
        size, slide, offset, lateness = self.size, self.slide, self.offset, self.lateness
        sets, pending, watermark = self._window_sets, self._pending, self.op.current_watermark
        for r, t in zip(records, timestamps, strict=True):
            key = select(r)
            newest = t - (t - offset + slide) % slide
            count = (newest - t + size - 1) // slide + 1  # windows holding t: starts > t - size
            if count <= 0 or newest - (count - 1) * slide + size - 1 <= watermark:
                self._late_element(key, r, t)  # in no window, or in one the watermark passed
                continue
            at = newest if count == full else (newest, count)
            starts = sets.get(at)
            if starts is None:
                starts = sets[at] = tuple(range(newest, newest - count * slide, -slide))
            runs = pending.get(key)
            if runs is None:
                pending[key] = [starts, [(r, t)]]
            elif runs[-2] is starts:  # the key's previous element's windows: timers are set
                runs[-1].append((r, t))
                continue
            else:
                runs += (starts, [(r, t)])
            for s in starts:
                end = s + size - 1
                timers.append((end, key))
                if lateness:
                    timers.append((min(end + lateness, MAX_WATERMARK), key))

    def _window(self, start: int) -> TimeWindow:
        """The window starting at `start` (the cached object)."""
        window = self._windows.get(start)
        if window is None:
            window = self._windows[start] = TimeWindow(start, start + self.size)
        return window

    def _add_pending(self) -> None:
        """Register the batch's timers (in the order its elements asked for them) and add its
        elements to their keys' windows."""
        if self._timers:
            self._register_all(EVENT, self._timers)
            self._timers.clear()
        pending = self._pending
        if not pending:
            return
        live = self._live
        if live is not None:
            load, dirty = self._load, self._dirty
            for key, runs in pending.items():
                windows = live.get(key) or load(key)
                for i in range(0, len(runs), 2):
                    pairs = runs[i + 1]
                    for s in runs[i]:
                        current = windows.get(s)
                        if current is None:
                            windows[s] = pairs.copy()
                        else:
                            current += pairs
                live[key] = windows
                dirty.add(key)
        elif self.size == self.slide:  # entries of the list state
            backend, add_all = self.backend, self.state.add_all
            for key, elements in pending.items():
                backend.current_key = key
                add_all(elements)
        else:  # runs, as list-state entries
            backend, add_all, window_of = self.backend, self.state.add_all, self._window
            for key, runs in pending.items():
                backend.current_key = key
                elements: list[tuple[TimeWindow, Any, int]] = []
                for i in range(0, len(runs), 2):
                    ws = [window_of(s) for s in runs[i]]
                    elements += [(w, v, t) for v, t in runs[i + 1] for w in ws]
                add_all(elements)
        pending.clear()

    def _load(self, key: Any) -> dict[int, list[tuple[Any, int]]]:
        """`key`'s windows from its list state, which is emptied (`_live` holds them from now
        on); {} if it holds none."""
        elements = self._table.get(key)  # type: ignore[union-attr]
        windows: dict[int, list[tuple[Any, int]]] = {}
        if elements:
            for w, v, t in elements:
                pairs = windows.get(w.start)
                if pairs is None:
                    windows[w.start] = [(v, t)]
                else:
                    pairs.append((v, t))
            self.backend.current_key = key
            self.state.clear()
            self._live[key] = windows  # type: ignore[index]
            self._dirty.add(key)
        return windows

    def _add(self, key: Any, window: TimeWindow, value: Any, timestamp: int) -> None:
        """One element added to one of the current key's windows."""
        live = self._live
        if live is None:
            self.state.add((window, value, timestamp))
            return
        windows = live.get(key) or self._load(key)
        pairs = windows.get(window.start)
        if pairs is None:
            windows[window.start] = [(value, timestamp)]
        else:
            pairs.append((value, timestamp))
        live[key] = windows
        self._dirty.add(key)

    def _late_element(self, key: Any, value: Any, timestamp: int) -> None:
        """An element in a window the watermark has passed, or in no window: the per-window
        operator's steps (late firings within the allowed lateness, or the late-data output)."""
        self._add_pending()  # a late firing sees the earlier elements of the batch
        op, lateness, register = self.op, self.lateness, self._register
        watermark = op.current_watermark
        self.backend.current_key = key
        skipped = True
        for window in op.assigner.assign_windows(value, timestamp, op.clock_ctx):
            end = window.end - 1
            if end + lateness <= watermark:
                continue  # late for this window
            skipped = False
            self._add(key, window, value, timestamp)
            if end <= watermark:
                self.fire(window)  # a late firing within the allowed lateness
            else:
                register(EVENT, end)
            if lateness:
                register(EVENT, min(end + lateness, MAX_WATERMARK))
        if skipped and timestamp + lateness <= watermark:
            op.late_element(value, timestamp)

    # firing ------------------------------------------------------------------------------------
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
        clear_function, window_of, take = self._clear_function, self._window, self._take
        for timestamp, key in due:
            backend.current_key = key
            start = timestamp + 1 - size
            if (start - offset) % slide:
                continue  # not a window's end (cannot happen without lateness)
            values = take(key, start)
            if values is None:
                continue
            window = window_of(start)
            emit(window, values)
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
            for s in self._starts(self.backend.current_key):
                self.clear(self._window(s))
            return
        start -= self.lateness
        if (start - offset) % slide == 0:
            self.clear(TimeWindow(start, start + size))

    def _starts(self, key: Any) -> list[int]:
        """The starts of the current key's windows holding elements."""
        live = self._live
        if live is not None:
            return list(live.get(key) or self._load(key))
        return list(dict.fromkeys(w.start for w, _, _ in self._elements()))

    def _elements(self) -> list[tuple[TimeWindow, Any, int]]:
        """The current key's list state (not to be changed: the heap table's own list)."""
        if self._table is not None:
            return self._table.get(self.backend.current_key) or []
        return self.state.get()

    def _values(self, key: Any, start: int) -> list[Any] | None:
        """The current key's values in the window starting at `start`, in arrival order; None
        if it holds none."""
        live = self._live
        if live is not None:
            pairs = (live.get(key) or self._load(key)).get(start)
            return None if pairs is None else list(map(_first, pairs))
        window = self._window(start)
        values = [v for w, v, _ in self._elements() if w == window]
        return values or None

    def _take(self, key: Any, start: int) -> list[Any] | None:
        """`_values`, and the window's elements removed."""
        live = self._live
        if live is not None:
            windows = live.get(key) or self._load(key)
            pairs = windows.pop(start, None)
            if pairs is None:
                return None
            if not windows:  # its last window: the key goes (its list state with it)
                del live[key]
                self._dirty.discard(key)
                self.state.clear()
            else:
                self._dirty.add(key)
            return list(map(_first, pairs))
        elements = self._elements()
        # (in C: elements of the batched path hold the cached window object itself)
        window = self._window(start)
        n = countOf(map(_first, elements), window)
        if not n:
            return None
        if n == len(elements):  # the key's only window: all its elements, in order
            self.state.clear()
            return list(map(_second, elements))
        self.state.update([e for e in elements if e[0] != window])
        return [v for w, v, _ in elements if w == window]

    def fire(self, window: TimeWindow) -> None:
        """Emit `window`'s result for the current key (no elements: it does not fire)."""
        if self._evictor is not None:
            contents, evictor, ctx = self.contents, self._evictor, self.op.clock_ctx
            inputs = contents.inputs(window, evictor, ctx)
            if inputs is not None:
                self.op.emit_window(window, inputs)
                contents.after_fire(window, evictor, ctx)
            return
        values = self._values(self.backend.current_key, window.start)
        if values is not None:
            self.op.emit_window(window, values)

    def clear(self, window: TimeWindow) -> None:
        """`window` is past its cleanup time: its elements go, then its function's clear()."""
        if self._take(self.backend.current_key, window.start) is None:
            return  # the key has nothing in it: the per-window operator had no timer for it
        if self._clear_function:
            self.op.clear_window_function(window)
