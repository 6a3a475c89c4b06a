"""Window slicing: event-time tumbling and sliding windows with pre-aggregation, each element
added to one slice (pane sharing, as Flink's window slicing in its table runtime).

A sliding window of `size` every `slide` is cut into slices of `gcd(size, slide)` ms; a
tumbling window is its own one slice. Each element is added to the accumulator of its key's
slice (one `add`/`reduce` per element instead of one per window it belongs to); when a window
fires, the accumulators of its slices are merged (`AggregateFunction.merge`, or the
ReduceFunction itself), in time order. Flink documents this for `WindowedStream.reduce`
("sliding time windows pre-aggregate on the granularity of the slide interval"): the
function must give the same result for any grouping of the window's elements (associative,
and commutative unless each key's elements arrive in timestamp order). Tumbling windows never
merge, so any function gives exactly the per-window result.

Used by WindowOperator only where the behaviour is the per-window operator's (`sliced_size`):
an event-time Tumbling/SlidingEventTimeWindows assigner, the default EventTimeTrigger, no
evictor, `reduce` or `aggregate` (for overlapping windows: a mergeable one), `size >= slide`.
Firing, late firings within the allowed lateness, late data, cleanup, timer order and the
window function's calls are those of the per-window operator.

State (keyed, so checkpoints, restores and rescaling work as before):
* `__window_contents__` (AccumulatingContents' map state) maps each slice, a TimeWindow
  `[start, start + gcd)`, to its accumulator. For tumbling windows a slice is the window, so
  the layout is the per-window operator's. Contents of whole sliding windows restored from a
  checkpoint of the per-window operator stay where they are and are merged into the window's
  result when it fires (`legacy`), so such checkpoints and savepoints restore.
* Timers are the keyed timer service's, one per key and window end (and cleanup time, with
  allowed lateness): the window(s) of a firing timer follow from its timestamp, so the
  `__window_timers__` map is not used (entries restored from the per-window operator are
  removed as their timers fire: WindowTimers).

Elements are handled batch by batch, in order, with a cache of the batch's accumulators per
(key, slice): state is read once per (key, slice) and batch and written back at the end of
the batch (before any watermark, checkpoint or timer), so the user functions see the same
calls in the same order as element by element.
"""

from __future__ import annotations

import math
from typing import Any

from tidegate.runtime.internal_timers import MAX_WATERMARK, TimeDomain
from tidegate.runtime.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from tidegate.runtime.windows.contents import CONTENTS_STATE, Aggregation
from tidegate.runtime.windows.mirror import KeyMirror
from tidegate.runtime.windows.triggers import EventTimeTrigger
from tidegate.runtime.windows.window_state import private_copy
from tidegate.runtime.windows.windows import TimeWindow
from tidegate.state.descriptors import MapStateDescriptor

EVENT = TimeDomain.EVENT_TIME
#: a slice with no accumulator yet (reduce: the first element becomes it)
_EMPTY: Any = object()
_NONE: dict = {}
#: slice only while a window has at most this many times as many slices as an element has
#: windows (merging more slices per firing would cost more than adding to fewer windows saves)
_MAX_SLICES_PER_WINDOW = 2


def sliced_size(spec: Any, trigger: Any) -> int | None:
    """The slice size (ms) if windows of `spec` can be sliced with the per-window operator's
    behaviour, else None (the operator keeps one accumulator per window)."""
    assigner = spec.assigner
    kind = type(assigner)
    if kind not in (TumblingEventTimeWindows, SlidingEventTimeWindows):
        return None  # other assigners (or subclasses) may assign other windows
    if type(trigger) is not EventTimeTrigger or spec.evictor is not None:
        return None
    if spec.aggregation is None:
        return None  # the elements themselves are kept
    size = assigner.size
    slide = assigner.slide if kind is SlidingEventTimeWindows else size
    if size < slide:
        return None  # gaps between the windows
    g = math.gcd(size, slide)
    if g == size:
        return g  # tumbling (or slide == size): a slice is a window, nothing merges
    if not spec.aggregation.mergeable:
        return None
    if size // g > _MAX_SLICES_PER_WINDOW * -(-size // slide):
        return None  # e.g. size 10007, slide 1000: 1 ms slices would cost more than they save
    return g


class SlicedWindows:
    """The slicing path of one WindowOperator subtask (see the module docstring)."""

    def __init__(self, operator: Any, slice_size: int) -> None:
        self.op = operator
        assigner = operator.assigner
        self.size = assigner.size
        self.slide = getattr(assigner, "slide", self.size)
        self.offset = assigner.offset
        self.g = slice_size
        self.lateness = operator.lateness
        agg: Aggregation = operator.spec.aggregation
        self.agg = agg
        self._result = agg.result
        self._merge = agg.merge_into
        self._clear_function = operator.spec.function.has_clear()
        #: (key, slice start) -> accumulator, for the batch being processed
        self._cache: dict[tuple[Any, int], Any] = {}
        #: cache entries holding an object that is not ours to change (an element)
        self._shared: set[tuple[Any, int]] = set()
        #: slice start -> its TimeWindow (the state's map key), shared by all keys
        self._slice_windows: dict[int, TimeWindow] = {}
        #: (key, slice start) whose stored accumulator was made since the last snapshot (copy
        #: on write: a snapshot may hold the others, and reduce/add may change them in place)
        self._owned: set[tuple[Any, int]] = set()

    def open(self) -> None:
        self.backend = backend = self.op.keyed_backend
        self.state = backend.get_map_state(MapStateDescriptor(CONTENTS_STATE))
        self._get = self.state.get
        #: {key: {slice: accumulator}} to read from: the heap backend's live table (changes go
        #: through the state object); on others a mirror, which changes go through (mirror.py)
        self._mirror = None if hasattr(backend, "table") else KeyMirror(backend, self.state)
        if self._mirror is None:
            self._table, contents = backend.table(CONTENTS_STATE), self.state
        else:
            self._table = contents = self._mirror
        self._put, self._remove = contents.put, contents.remove
        self._register = self.op.timers.internal.register
        #: contents of whole sliding windows restored from the per-window operator
        g = self.g
        self.legacy = self.size != g and any(
            w.end - w.start != g for _, windows in backend.entries(CONTENTS_STATE) for w in windows
        )

    def on_snapshot(self) -> None:
        """A snapshot now holds every accumulator: the next change of each copies it."""
        self._owned.clear()

    # elements ----------------------------------------------------------------------------------
    def process(self, records: list, timestamps: list[int]) -> None:
        select, cache, shared = self.op.key_selector, self._cache, self._shared
        g, offset = self.g, self.offset
        # a slice starting after `limit` is in no window the watermark has passed
        limit = self.op.current_watermark - g + 1
        load = self._load
        try:  # one loop per kind: the hottest loop of windows, specialised as the record paths
            if self.agg.aggregate is None:
                reduce = self.agg.reduce
                for r, t in zip(records, timestamps, strict=True):
                    start = t - (t - offset) % g
                    if start <= limit:
                        self._late_element(r, t, start)
                        continue
                    ck = (select(r), start)
                    acc = cache.get(ck, _EMPTY)
                    if acc is _EMPTY:
                        acc = load(ck)
                        if acc is _EMPTY:
                            cache[ck] = r
                            shared.add(ck)
                            continue
                    elif ck in shared:
                        acc = private_copy(acc)
                        shared.discard(ck)
                    new = cache[ck] = reduce(acc, r)
                    if new is r:
                        shared.add(ck)
            else:
                add = self.agg.aggregate.add
                for r, t in zip(records, timestamps, strict=True):
                    start = t - (t - offset) % g
                    if start <= limit:
                        self._late_element(r, t, start)
                        continue
                    ck = (select(r), start)
                    acc = cache.get(ck, _EMPTY)
                    if acc is _EMPTY:
                        acc = load(ck)
                    elif ck in shared:
                        acc = private_copy(acc)
                        shared.discard(ck)
                    new = cache[ck] = add(r, acc)
                    if new is r:
                        shared.add(ck)
        finally:
            self.write_back()

    def _load(self, ck: tuple[Any, int]) -> Any:
        """The accumulator of (key, slice start) to add to (ours to change): the stored one
        (copied unless ours), or for a new slice a fresh one (reduce: _EMPTY), after the
        timers of its windows are registered."""
        key, start = ck
        self.backend.current_key = key
        g = self.g
        slices = self._slices(key)
        acc = slices.get((start, start + g))
        if acc is None:
            if g == self.size:  # tumbling: the slice is the window
                self._register(EVENT, start + g - 1)
                if self.lateness:
                    self._register(EVENT, self._cleanup_time(start))
            else:  # the windows it shares with the key's previous slice have their timers
                previous = (key, start - g) in self._cache or slices.get((start - g, start))
                self._register_windows(start, start - g if previous is not None else None)
            return _EMPTY if self.agg.aggregate is None else self.agg.aggregate.create_accumulator()
        if ck in self._owned:
            return acc
        self._owned.add(ck)  # write_back stores the copy
        return private_copy(acc)

    def write_back(self) -> None:
        """Store the batch's accumulators (the end of a batch, or before a late element)."""
        cache = self._cache
        if not cache:
            return
        backend, put, owned, shared = self.backend, self._put, self._owned, self._shared
        windows, g = self._slice_windows, self.g
        if len(windows) > 4096:
            windows.clear()
        for ck, acc in cache.items():
            key, start = ck
            backend.current_key = key
            window = windows.get(start)
            if window is None:
                window = windows[start] = TimeWindow(start, start + g)
            put(window, acc)
            if ck in shared:
                owned.discard(ck)
            else:
                owned.add(ck)
        cache.clear()
        shared.clear()

    def _window_starts(self, start: int) -> range:
        """Starts of the windows holding the slice at `start`, newest first (the assigner's
        order)."""
        last = start - (start - self.offset) % self.slide
        return range(last, start + self.g - self.size - 1, -self.slide)

    def _cleanup_time(self, window_start: int) -> int:
        return min(window_start + self.size - 1 + self.lateness, MAX_WATERMARK)

    def _register_windows(self, start: int, after: int | None = None) -> None:
        """Timers of a new slice's windows (those starting after `after` only): each window's
        end, and its cleanup time with allowed lateness (windows the watermark passed have
        theirs or are gone)."""
        register, size, lateness = self._register, self.size, self.lateness
        watermark = self.op.current_watermark
        for s in self._window_starts(start):
            if after is not None and s <= after:
                break  # newest first: the rest are registered
            end = s + size - 1
            if end > watermark:
                register(EVENT, end)
            if lateness and self._cleanup_time(s) > watermark:
                register(EVENT, self._cleanup_time(s))

    def _late_element(self, value: Any, timestamp: int, start: int) -> None:
        """An element in a slice of a window the watermark has passed (the per-window
        operator's order: late firings, timers, or the late-data output)."""
        self.write_back()
        op = self.op
        watermark = op.current_watermark
        key = op.key_selector(value)
        starts = [s for s in self._window_starts(start) if self._cleanup_time(s) > watermark]
        if not starts:  # every window of the element is gone
            if timestamp + self.lateness <= watermark:
                op.late_element(value, timestamp)
            return
        self.backend.current_key = key
        slice_window = TimeWindow(start, start + self.g)
        acc = self._get(slice_window)
        ck = (key, start)
        if acc is None:
            self._register_windows(start)
        new = self.agg.add(acc, value, shared=ck not in self._owned)
        self._put(slice_window, new)
        if new is value:
            self._owned.discard(ck)
        else:
            self._owned.add(ck)
        for s in starts:
            if s + self.size - 1 <= watermark:
                self.fire(TimeWindow(s, s + self.size))  # a late firing

    # firing ------------------------------------------------------------------------------------
    def advance(self, watermark: int) -> None:
        """The watermark moved to `watermark`: the due timers fire in their order, in one loop
        (batched timer firing: firing registers no timers)."""
        due = self.op.timers.pop_event_timers(watermark)
        if not due:
            return
        backend, lateness = self.backend, self.lateness
        size, slide, offset, g = self.size, self.slide, self.offset, self.g
        if self.legacy or self._clear_function or lateness:
            for timestamp, key in due:
                backend.current_key = key
                self.on_timer(timestamp, EVENT)
            return
        # the common case inlined: no allowed lateness, nothing to call at cleanup (a plain
        # tuple finds a TimeWindow key)
        table, remove, owned, emit = self._table, self._remove, self._owned, self.op.emit_window
        result, merge, op = self._result, self._merge, self.op
        out, out_ts = op._out, op._out_ts
        pass_through = op.spec.function.kind == "pass"  # the result itself is the output
        # due timers come in timestamp order, most sharing one: what follows from a timestamp
        # alone (the window, its slices, the slices it is the last window of) is made once
        fired_at = None
        window: Any = None
        parts_of: list[tuple[int, int]] = []
        expiring: list[tuple[int, int]] = []
        for timestamp, key in due:
            backend.current_key = key
            start = timestamp + 1 - size
            if (start - offset) % slide:
                continue  # not a window's end (cannot happen without lateness)
            slices = table.get(key)
            if slices is None:
                continue
            if g != size:  # sliding: the window's slices merged
                if timestamp != fired_at:
                    fired_at, window = timestamp, TimeWindow(start, timestamp + 1)
                    parts_of = [(a, a + g) for a in range(start, timestamp + 1, g)]
                    expiring = parts_of[: slide // g]
                parts = [acc for acc in map(slices.get, parts_of) if acc is not None]
                if parts:
                    emit(window, [result(merge(parts))])
                for slice_window in expiring:
                    remove(slice_window)
                    owned.discard((key, slice_window[0]))
                continue
            window = (start, timestamp + 1)  # tumbling: the window is its one slice
            acc = slices.get(window)
            if acc is not None:
                if pass_through:
                    out.append(result(acc))
                    out_ts.append(timestamp)
                else:
                    emit(TimeWindow(start, timestamp + 1), [result(acc)])
            remove(window)
            owned.discard((key, start))

    def on_timer(self, timestamp: int, domain: TimeDomain) -> None:
        """A timer of the current key: the window ending at `timestamp` fires; the window
        whose cleanup time it is goes (with its slices no later window shares)."""
        size, slide, offset = self.size, self.slide, self.offset
        start = timestamp + 1 - size
        if (start - offset) % slide == 0:
            self.fire(TimeWindow(start, start + size))
        if timestamp == MAX_WATERMARK and self.lateness:
            self._clear_rest()
            return
        start -= self.lateness
        if (start - offset) % slide == 0:
            self.clear(start)

    def _slices(self, key: Any) -> Any:
        """The current key's {slice: accumulator} to read from (a TimeWindow is a tuple: plain
        `(start, end)` tuples find it)."""
        return self._table.get(key, _NONE)

    def _parts(self, window: TimeWindow) -> list[Any]:
        """The accumulators of `window`'s slices of the current key, in time order."""
        get, g = self._slices(self.backend.current_key).get, self.g
        parts = [acc for acc in (get((a, a + g)) for a in range(*window, g)) if acc is not None]
        if self.legacy:
            acc = get(window)
            if acc is not None:
                parts.insert(0, acc)
        return parts

    def fire(self, window: TimeWindow) -> None:
        """Emit `window`'s result: its slices merged (no slice: it does not fire)."""
        parts = self._parts(window)
        if parts:
            self.op.emit_window(window, [self._result(self._merge(parts))])

    def clear(self, window_start: int) -> None:
        """The window starting at `window_start` is past its cleanup time: its function's
        clear(), and its slices that no later window holds are dropped."""
        remove, g, owned = self._remove, self.g, self._owned
        window = TimeWindow(window_start, window_start + self.size)
        if self._clear_function and self._parts(window):
            self.op.clear_window_function(window)
        key = self.backend.current_key
        slices = self._slices(key)
        for a in range(window_start, window_start + self.slide, g):
            if (a, a + g) in slices:
                remove(TimeWindow(a, a + g))
            owned.discard((key, a))
        if self.legacy:
            remove(window)

    def _clear_rest(self) -> None:
        """End of input with allowed lateness: cleanup times past the largest timestamp all
        are MAX_WATERMARK: every window left of the current key goes."""
        size, starts, windows = self.size, set(), self.state.keys()
        for w in windows:
            if self.legacy and w.end - w.start == size:
                starts.add(w.start)
            else:
                starts.update(self._window_starts(w.start))
        for s in sorted(starts):
            self.clear(s)
