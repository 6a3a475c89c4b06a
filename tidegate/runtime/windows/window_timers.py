"""The window operator's timers: the keyed InternalTimerService (runtime/internal_timers.py)
plus which windows each timer belongs to.

The timer service deduplicates timers per (key, domain, timestamp) and has no namespace, so the
keyed map state `__window_timers__` maps `(domain, timestamp)` to the tuple of the key's windows
that registered it (several windows can end at the same time, e.g. a trigger timer and a
cleanup timer, or the windows of different sizes of a custom assigner). A firing timer is
looked up there and `on_timer(window, timestamp, domain)` runs for each of its windows.
An in-memory set of the registered `(domain, timestamp, key, window)` (rebuilt from the state
after a restore) answers "already registered?" without reading the state: most elements
register the timers their window already has.

A timer without an entry in the map was registered by a batched path (slicing.py, kept.py,
sessions.py) of a checkpoint restored into this one (e.g. after the job's trigger changed):
`unmapped(timestamp, domain)` gives its windows. Such a timer stays a timer of those windows
when the per-window operator later registers a window of its own at the same key and
timestamp (an entry appears): it then fires both, and deleting the entry's windows does not
delete it.

Sliced, kept and session windows (slicing.py, kept.py, sessions.py) know their window from a
timer's timestamp: with `derived`, the timer service calls `derived(timestamp, domain)`
instead, the map is not written, and `pop_event_timers` hands a watermark's due timers to the
caller in one list (entries of the map restored from a checkpoint of the per-window operator
are removed as their timers fire, or as a session path deletes them: `delete_derived`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.runtime.internal_timers import InternalTimerService, TimeDomain, processing_time_ms
from tidegate.state.descriptors import MapStateDescriptor

WINDOW_TIMERS_STATE = "__window_timers__"

OnTimer = Callable[[Any, int, TimeDomain], None]
#: compared by identity (an Enum's `.value` and hash are Python-level calls)
_EVENT = TimeDomain.EVENT_TIME


class WindowTimers:
    """Timers of one window operator subtask; `flush` sends a firing round's output."""

    def __init__(
        self,
        backend: Any,
        on_timer: OnTimer | None,
        flush: Callable[[], None],
        clock: Callable[[], int] = processing_time_ms,
        *,
        derived: Callable[[int, TimeDomain], None] | None = None,
        unmapped: Callable[[int, TimeDomain], tuple[Any, ...]] | None = None,
    ) -> None:
        self._on_timer = on_timer
        self._unmapped = unmapped
        self._flush = flush
        self._backend = backend
        self._windows = backend.get_map_state(MapStateDescriptor(WINDOW_TIMERS_STATE))
        self._registered: set[tuple[int, int, Any, Any]] = set()
        for key, timers in backend.entries(WINDOW_TIMERS_STATE):
            for (domain, timestamp), windows in timers.items():
                self._registered.update((domain, timestamp, key, w) for w in windows)
        self.internal = InternalTimerService(backend, derived or self._fire, clock)
        restored = self.internal.restore()
        #: restored timers without an entry (a batched path's: `unmapped` gives their
        #: windows), here where the entries are the truth: they fire their unmapped windows
        #: also when an entry was added to their timestamp since, and deleting that entry's
        #: windows does not delete them
        self._bare: set[tuple[int, int, Any]] = set()
        if derived is None and unmapped is not None and restored:
            mapped = {timer[:3] for timer in self._registered}
            if restored != len(mapped):
                for domain in (_EVENT, TimeDomain.PROCESSING_TIME):
                    d = 0 if domain is _EVENT else 1
                    self._bare.update(
                        (d, ts, key)
                        for ts, key in self.internal.pending(domain)
                        if (d, ts, key) not in mapped
                    )

    def register(self, domain: TimeDomain, timestamp: int, window: Any) -> None:
        d = 0 if domain is _EVENT else 1
        timer = (d, timestamp, self._backend.current_key, window)
        if timer in self._registered:
            return
        self._registered.add(timer)
        key = (d, timestamp)
        self._windows.put(key, (*(self._windows.get(key) or ()), window))
        self.internal.register(domain, timestamp)

    def delete(self, domain: TimeDomain, timestamp: int, window: Any) -> None:
        d = 0 if domain is _EVENT else 1
        timer = (d, timestamp, self._backend.current_key, window)
        if timer not in self._registered:
            return
        self._registered.discard(timer)
        key = (d, timestamp)
        windows = self._windows.get(key) or ()
        rest = tuple(w for w in windows if w != window)
        if rest:
            self._windows.put(key, rest)
        else:
            self._windows.remove(key)
            if (d, timestamp, self._backend.current_key) not in self._bare:
                self.internal.delete(domain, timestamp)

    def delete_derived(self, timestamp: int, window: Any) -> None:
        """Delete the current key's event-time timer at `timestamp` of a derived path's
        `window` (and the window's entry in the map, if one was restored there)."""
        if (0, timestamp, self._backend.current_key, window) in self._registered:
            self.delete(_EVENT, timestamp, window)
        else:
            self.internal.delete(_EVENT, timestamp)

    def _fire(self, timestamp: int, domain: TimeDomain) -> None:
        key = (0 if domain is _EVENT else 1, timestamp)
        windows = self._windows.get(key)
        current = self._backend.current_key
        bare = (*key, current)
        if windows is None:
            windows = self._unmapped(timestamp, domain) if self._unmapped else ()
        elif bare in self._bare and self._unmapped is not None:
            # the entry's windows and the restored timer's
            windows = tuple(dict.fromkeys((*windows, *self._unmapped(timestamp, domain))))
        self._bare.discard(bare)
        self._windows.remove(key)  # same step as the timer service's removal: fires once
        self._registered.difference_update((*key, current, w) for w in windows)
        for window in windows:
            self._on_timer(window, timestamp, domain)

    def pop_event_timers(self, watermark: int) -> list[tuple[int, Any]]:
        """The derived timers due at `watermark`, `(timestamp, key)` in firing order, for the
        caller to fire (InternalTimerService.pop_event_timers)."""
        due = self.internal.pop_event_timers(watermark)
        if self._registered and due:  # restored entries of the window map
            backend, windows, registered = self._backend, self._windows, self._registered
            for timestamp, key in due:
                backend.current_key = key
                entry = windows.get((0, timestamp))
                if entry is not None:
                    windows.remove((0, timestamp))
                    registered.difference_update((0, timestamp, key, w) for w in entry)
        return due

    # the task's hooks (ChainTimers) and the operator's -----------------------------------------
    def fire_processing_timers(self) -> None:
        if self.internal.fire_processing_timers():
            self._flush()

    def next_processing_time(self) -> int | None:
        return self.internal.next_processing_time()

    def advance_watermark(self, watermark: int) -> None:
        if self.internal.advance_watermark(watermark):
            self._flush()

    def end_of_input(self) -> None:
        if self.internal.end_of_input():
            self._flush()
