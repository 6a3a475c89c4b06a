"""Event-time session windows, batch by batch.

Used by WindowOperator where `sessions_fit`: an event-time merging assigner with the standard
merge rule (EventTimeSessionWindows, static or dynamic gap), the default EventTimeTrigger, no
evictor and no allowed lateness; pre-aggregated (reduce / aggregate, with or without a window
function) or keeping the elements (process / apply). Without allowed lateness no element fires
a window as it arrives (a window in flight ends after the watermark, and a merge only grows
it), so a batch's elements can be merged key by key. Other sessions take the per-element path
(`_process_plain_session`).

Outputs and their order, late data, the window function's calls and the keyed state after each
batch are the per-element path's: the merging set `__merging_windows__` (window -> state
window), the contents (`__window_contents__`, state window -> accumulator, or the list
`__window_elements__` of `(state window, value, timestamp)` in arrival order) and one
event-time timer per window at its max timestamp (its trigger and cleanup timer). What changes
is the number of calls:

* elements: the batch's elements are gathered per key; each key's merging set is read once,
  its elements merged into it in plain Python with the per-element steps (a new window merges
  with the in-flight windows it touches into their cover, whose state window is the earliest
  merged window's; the contents merge into it), and the changes are written back once per key:
  windows made and merged within one batch never reach the state or the timer service. Late
  elements (their window is past the watermark and touches none in flight) go to the late-data
  output after the batch, in the batch's order;
* timers: a key's windows in flight never overlap, so the window of a firing timer is the one
  ending there and the `__window_timers__` map is not written. New windows' timers are
  registered in the order of the elements that made them, as the per-element path registers
  them; a merged window's timer is deleted. A watermark's due timers fire in one loop.

Checkpoints of either path restore into the other: a timer the per-element path restores
without a `__window_timers__` entry finds its windows in the merging set (the operator's
`_unmapped`), and entries restored into this path go as their timers fire or are deleted.
Windows restored from a job with allowed lateness that had ended go when their cleanup timers
fire (`_clear_stale`), where the per-element path (as Flink's) would keep them for good.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from tidegate.runtime.internal_timers import TimeDomain
from tidegate.runtime.windows.assigners import EventTimeSessionWindows, MergingWindowAssigner
from tidegate.runtime.windows.contents import ELEMENTS_STATE, make_contents
from tidegate.runtime.windows.merging import MERGING_STATE
from tidegate.runtime.windows.mirror import KeyMirror
from tidegate.runtime.windows.triggers import EventTimeTrigger
from tidegate.runtime.windows.window_state import private_copy
from tidegate.runtime.windows.windows import TimeWindow

EVENT = TimeDomain.EVENT_TIME
#: an accumulator not read from the state yet
_UNREAD: Any = object()
_first, _second = itemgetter(0), itemgetter(1)
_NONE: dict[Any, Any] = {}


def plain_sessions(spec: Any, trigger: Any) -> bool:
    """True for event-time sessions with the standard merge rule (TimeWindow.merge_windows),
    the default trigger and no evictor: the operator inlines their merging and trigger
    (`WindowOperator._process_plain_session`), or batches them (`sessions_fit`)."""
    assigner = spec.assigner
    return (
        isinstance(assigner, MergingWindowAssigner)
        and type(assigner).merge_windows is MergingWindowAssigner.merge_windows
        and bool(assigner.is_event_time())
        and type(trigger) is EventTimeTrigger
        and spec.evictor is None
    )


def sessions_fit(spec: Any, trigger: Any) -> bool:
    """True if `spec`'s sessions can take the batched path with the per-element behaviour."""
    return plain_sessions(spec, trigger) and spec.allowed_lateness == 0


class SessionWindows:
    """The batched session path of one WindowOperator subtask (module docstring)."""

    def __init__(self, operator: Any) -> None:
        self.op = operator
        assigner = operator.assigner
        self._agg = operator.spec.aggregation
        #: the elements are kept (process / apply without pre-aggregation): ListContents
        self._keep = self._agg is None
        self._clear_function = operator.spec.function.has_clear()
        #: a static gap computed inline; None: the assigner's windows (dynamic gaps, subclasses)
        self._gap = (
            assigner.gap
            if type(assigner) is EventTimeSessionWindows and assigner.extractor is None
            else None
        )

    def open(self) -> None:
        op = self.op
        self.backend = backend = op.keyed_backend
        self.contents = op.contents = make_contents(backend, self._agg, False)
        #: (key, state window) of the accumulators ours to change in place (AccumulatingContents)
        self._private: set[Any] = set() if self._keep else self.contents._private
        #: the heap backend's live {key: [(state window, value, timestamp)]} (kept elements)
        self._elements = (
            backend.table(ELEMENTS_STATE) if self._keep and hasattr(backend, "table") else None
        )
        self.mapping = op.merging.mapping
        #: {key: {window: state window}}: the heap backend's live table, read without a copy;
        #: on others a mirror, which the merging set's changes go through (mirror.py)
        self._mirror = None if hasattr(backend, "table") else KeyMirror(backend, self.mapping)
        if self._mirror is None:
            self._table, merging = backend.table(MERGING_STATE), self.mapping
        else:
            self._table = merging = self._mirror
        #: the current key's merging set changes: (window -> state window) added, one removed
        self._put_all, self._remove = merging.put_all, merging.remove

    def on_snapshot(self) -> None:
        self.contents.on_snapshot()

    # the merging sets ------------------------------------------------------------------------
    def _windows(self, key: Any) -> dict[Any, Any]:
        """The current key's windows in flight -> their state windows (not to be changed)."""
        return self._table.get(key) or _NONE

    # elements ----------------------------------------------------------------------------------
    def process(self, records: list, timestamps: list[int]) -> None:
        select, by_key = self.op.key_selector, {}
        for i, r in enumerate(records):
            key = select(r)
            indices = by_key.get(key)
            if indices is None:
                by_key[key] = [i]
            else:
                indices.append(i)
        late: list[int] = []
        timers: list[tuple[int, int, Any]] = []  # (element index, timestamp, key)
        backend, merge = self.backend, self._merge_key
        for key, indices in by_key.items():
            backend.current_key = key
            merge(key, indices, records, timestamps, late, timers)
        if timers:
            timers.sort(key=_first)
            self.op.timers.internal.register_all(EVENT, [(t, k) for _, t, k in timers])
        if late:
            op, watermark = self.op, self.op.current_watermark
            for i in sorted(late):
                if timestamps[i] <= watermark:
                    op.late_element(records[i], timestamps[i])

    def _merge_key(
        self,
        key: Any,
        indices: list[int],
        records: list,
        timestamps: list[int],
        late: list[int],
        timers: list[tuple[int, int, Any]],
    ) -> None:
        """The current key's elements `indices` merged into its windows, the changes written.

        A window in flight is a record `[start, end, state window, changed in this batch, its
        window in the state (None: new), accumulator (_UNREAD: not read), accumulator ours to
        change in place, index of the element whose window first ended at `end` (-1: a window
        in the state did), the record it merged into (None: in flight)]`. The timer's place:
        the per-element path registers a window's timer when its end moves, and a merge result
        ending where a merged window ended keeps that window's timer. The window and the state
        window of a new one are plain `(start, end)` tuples until written (equal to, and
        hashing as, the TimeWindow). Kept elements are appended to the key's list at the end,
        each with its record's final state window; a merge renames the merged state windows'
        elements in place, as ListContents.merge does."""
        op, agg, gap, private = self.op, self._agg, self._gap, self._private
        watermark, state = op.current_watermark, self.contents._state
        recs = [
            [w[0], w[1], sw, False, w, _UNREAD, False, -1, None]
            for w, sw in self._windows(key).items()
        ]
        gone: list[list[Any]] = []  # records of windows in the state merged into others
        keep, appended = self._keep, []  # kept elements: (record, value, timestamp)
        if not keep:
            add, merge, fresh = agg.add, agg.merge, agg.aggregate is not None
            reduce = None if fresh else agg.reduce  # (Aggregation.add of a reduce, inlined)
        for i in indices:
            value, t = records[i], timestamps[i]
            news = (
                ((t, t + gap),)
                if gap is not None
                else op.assigner.assign_windows(value, t, op.clock_ctx)
            )
            skipped = True
            for start, end in news:
                if len(recs) == 1:  # (most keys have one window in flight)
                    r = recs[0]
                    touched = recs if r[0] <= end and r[1] >= start else ()
                else:
                    touched = [r for r in recs if r[0] <= end and r[1] >= start]
                if not touched:
                    if end - 1 <= watermark:
                        continue  # late for its only window
                    rec = [start, end, (start, end), True, None, None, True, i, None]
                    recs.append(rec)
                elif len(touched) == 1:
                    rec = touched[0]
                    if start < rec[0]:
                        rec[0], rec[3] = start, True
                    if end > rec[1]:
                        rec[1], rec[3], rec[7] = end, True, i
                else:
                    # the merged contents stay under the earliest merged window's state window
                    touched.sort(key=_first)
                    rec, last = touched[0], max(touched, key=_second)
                    rec[0], rec[3] = min(start, rec[0]), True
                    rec[1], rec[7] = (end, i) if end > last[1] else (last[1], last[7])
                    for other in touched[1:]:
                        recs.remove(other)
                        other[8] = rec
                        if other[4] is not None:
                            gone.append(other)
                    if not keep:
                        merged = rec[5]
                        if merged is _UNREAD:
                            merged = state.get(rec[2])
                        for other in touched[1:]:
                            acc = other[5]
                            if acc is _UNREAD:
                                acc = state.get(other[2])
                            if acc is not None:
                                merged = acc if merged is None else merge(merged, acc)
                        rec[5], rec[6] = merged, False
                skipped = False
                if keep:
                    appended.append((rec, value, t))
                    continue
                acc = rec[5]
                if acc is _UNREAD:
                    acc, mine = state.get(rec[2]), (key, rec[2]) in private
                else:
                    mine = rec[6]
                if reduce is None:
                    new = rec[5] = add(acc, value, shared=not mine)
                elif acc is None:
                    new = rec[5] = value
                else:
                    new = rec[5] = reduce(acc if mine else private_copy(acc), value)
                # (AccumulatingContents.add's rule: never the element itself)
                rec[6] = new is not value and (acc is not None or fresh)
            if skipped:
                late.append(i)
        # write back: the merging set, the contents, the timers
        remove, delete_timer, due = self._remove, op.timers.delete_derived, []
        in_place = {rec[1] for rec in recs if rec[7] < 0}  # ends of timers kept in place
        for rec in gone:
            window, sw = rec[4], rec[2]
            remove(window)
            if window[1] not in in_place:
                delete_timer(window[1] - 1, window)
            if not keep:
                state.remove(sw)
                private.discard((key, sw))
        for rec in recs:
            if type(rec[2]) is tuple:
                rec[2] = TimeWindow(*rec[2])
        if keep:
            self._write_elements(gone, appended)
        made: dict[Any, Any] = {}  # window -> state window, written in one call
        accs: dict[Any, Any] = {}  # state window -> accumulator, likewise
        for start, end, sw, changed, window, acc, mine, timer, _ in recs:
            if changed:
                if window is not None:
                    remove(window)
                    if window[1] not in in_place:
                        delete_timer(window[1] - 1, window)
                window = TimeWindow(start, end)
                made[window] = sw
                if end - 1 <= watermark:
                    due.append((window, sw))
                elif timer >= 0:
                    timers.append((timer, end - 1, key))
            if acc is not _UNREAD and not keep:
                accs[sw] = acc
                if mine:
                    private.add((key, sw))
                else:
                    private.discard((key, sw))
        if made:
            self._put_all(made)
        if accs:
            state.put_all(accs)
        for window, sw in due:
            # only after a restore of windows kept for an allowed lateness this job has not:
            # the window is past its cleanup time, it fires and goes at once
            self._fire(key, window, sw)

    def _write_elements(self, gone: list[list[Any]], appended: list[tuple[Any, Any, int]]) -> None:
        """The current key's kept elements: the elements of merged state windows (`gone`'s)
        renamed in place, then the batch's `appended`, each under its record's final state
        window."""

        def final(rec: list[Any]) -> Any:
            while rec[8] is not None:
                rec = rec[8]
            return rec[2]

        added = [(final(rec), v, t) for rec, v, t in appended]
        state = self.contents._state
        if gone:
            renamed = {rec[2]: final(rec) for rec in gone}
            get = renamed.get
            state.update([(get(w, w), v, t) for w, v, t in state.get()] + added)
        elif added:
            state.add_all(added)

    # firing ------------------------------------------------------------------------------------
    def advance(self, watermark: int) -> None:
        """The watermark moved to `watermark`: the due windows fire and go, in timer order."""
        due = self.op.timers.pop_event_timers(watermark)
        if not due:
            return
        op, backend, ending, remove = self.op, self.backend, self._ending, self._remove
        keep, state, private = self._keep, self.contents._state, self._private
        result = None if keep else self._agg.result
        # without a window function the result itself is emitted (InternalWindowFunction "pass")
        plain = op.spec.function.kind == "pass"
        out, out_ts, emit, clear = op._out, op._out_ts, op.emit_window, self._clear_function
        for timestamp, key in due:
            backend.current_key = key
            found = ending(key, timestamp)
            if found is None:
                self._clear_stale(key, timestamp)
                continue
            window, sw = found
            if keep:
                self._fire(key, window, sw)
                continue
            acc = state.get(sw)
            if acc is not None:
                if plain:
                    out.append(result(acc))
                    out_ts.append(timestamp)
                else:
                    emit(window, [result(acc)])
                state.remove(sw)
                private.discard((key, sw))
            remove(window)
            if clear:
                op.clear_window_function(window)

    def _clear_stale(self, key: Any, timestamp: int) -> None:
        """A timer of the current key with no window ending there: one restored from a job
        with allowed lateness (a window's cleanup timer) or another trigger. Windows of the key
        that ended before it are past their cleanup time here and fired when they ended (the
        watermark passed their end in the job that kept them): they go without firing."""
        stale = [(w, sw) for w, sw in self._windows(key).items() if w[1] - 1 < timestamp]
        if not stale:
            return
        contents, state = self.contents, self.contents._state
        for window, sw in stale:
            if self._keep:
                contents.clear(sw)
            else:
                state.remove(sw)
                self._private.discard((key, sw))
            self._remove(window)
            if self._clear_function:
                self.op.clear_window_function(window)

    def on_timer(self, timestamp: int, domain: TimeDomain) -> None:
        """A timer of the current key fired outside `advance` (restored processing-time timers
        of another trigger do nothing)."""
        if domain is not EVENT:
            return
        key = self.backend.current_key
        found = self._ending(key, timestamp)
        if found is None:
            self._clear_stale(key, timestamp)
        else:
            self._fire(key, *found)

    def _ending(self, key: Any, timestamp: int) -> tuple[Any, Any] | None:
        """(window, state window) of the current key's window whose timer is at `timestamp`
        (its max timestamp; windows in flight never overlap), None if none ends there."""
        end = timestamp + 1
        return next((entry for entry in self._windows(key).items() if entry[0][1] == end), None)

    def _fire(self, key: Any, window: Any, sw: Any) -> None:
        """The current key's `window` (its state window `sw`) fires if it holds anything, and
        goes: its contents, its merging-set entry, then the window function's clear()
        (`advance` inlines this for accumulators)."""
        state, op = self.contents._state, self.op
        if self._keep:
            table = self._elements
            elements = state.get() if table is None else table.get(key) or ()
            values = [v for w, v, _ in elements if w == sw]
            if values:
                op.emit_window(window, values)
                state.update([e for e in elements if e[0] != sw])
        else:
            acc = state.get(sw)
            if acc is not None:
                op.emit_window(window, [self._agg.result(acc)])
                state.remove(sw)
                self._private.discard((key, sw))
        self._remove(window)
        if self._clear_function:
            op.clear_window_function(window)
