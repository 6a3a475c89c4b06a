"""The internal timer service: processing-time and event-time timers of one keyed operator
subtask, stored in its keyed state so that they are checkpointed, restored and rescaled with
the keys they belong to (Flink's InternalTimerServiceImpl, with timers in keyed state).

Storage, the source of truth: the internal map state `__timers__` of the operator's keyed state
backend holds, under each key, `{(domain, timestamp): True}` (domain: TimeDomain's value, 0 for
event time, 1 for processing time). An entry is written when a timer is registered, removed
when it is deleted, and removed in the same step as its timer fires (before `on_timer` runs), so
a checkpoint taken after a firing never restores it: every timer fires exactly once.

In memory: per time domain a TimerQueue (runtime/timer_queue.py: timestamps ascending,
registration order within one; keys are never compared) gives the firing order, and a set of the
live `(domain, timestamp, key)` deduplicates registrations per key, timestamp and domain. A
deleted timer stays in its queue and is skipped when it surfaces; a queue that is mostly such
leftovers is rebuilt. Both are rebuilt from the state after a restore through
`backend.entries(name)` and the public state API only, so any keyed state backend (hashmap,
rocksdb) holds timers.
"""

from __future__ import annotations

import enum
import numbers
import time
from collections.abc import Callable
from typing import Any

from tidegate.runtime.timer_queue import TimerQueue
from tidegate.state.descriptors import MapStateDescriptor

#: the keyed state holding the timers (internal: user state names cannot clash with it)
TIMER_STATE = "__timers__"
#: Flink's Long.MIN_VALUE: the watermark before any watermark arrived
MIN_WATERMARK = -(2**63)
#: Flink's Long.MAX_VALUE: the watermark at the end of a bounded input; fires every timer
MAX_WATERMARK = 2**63 - 1


class TimeDomain(enum.Enum):
    """Which clock a timer follows (PyFlink's `pyflink.datastream.TimeDomain`)."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


def processing_time_ms() -> int:
    """The processing-time clock: wall-clock milliseconds since the epoch (as in Flink)."""
    return time.time_ns() // 1_000_000


#: hot paths compare domains by identity (an Enum's `.value` and hash are Python-level calls)
_EVENT = TimeDomain.EVENT_TIME

#: called for each firing timer, with the timer's key set as the backend's current key
Trigger = Callable[[int, TimeDomain], None]


class InternalTimerService:
    """The timers of one keyed operator subtask; its keyed state backend stores them."""

    def __init__(
        self, backend: Any, trigger: Trigger, clock: Callable[[], int] = processing_time_ms
    ) -> None:
        self._backend = backend
        self._trigger = trigger
        self.clock = clock
        self.current_watermark = MIN_WATERMARK
        #: end of input reached: processing-time timers no longer fire (Flink's quiesce)
        self.quiesced = False
        #: BATCH mode: processing-time timers fire only at the end of the input, with the
        #: event-time ones, when the watermark jumps to MAX_WATERMARK
        self.batch = False
        self._state: Any = None  # the `__timers__` map state, registered on first use
        self._queues: dict[TimeDomain, TimerQueue] = {d: TimerQueue() for d in TimeDomain}
        self._live: set[tuple[int, int, Any]] = set()

    def _timer_state(self) -> Any:
        if self._state is None:
            self._state = self._backend.get_map_state(MapStateDescriptor(TIMER_STATE))
        return self._state

    # Step 1: rebuild from the keyed state (after a restore) ------------------------------------
    def restore(self) -> int:
        """Rebuild the in-memory queues from the `__timers__` state; returns the timer count."""
        for key, timers in self._backend.entries(TIMER_STATE):
            for domain_value, timestamp in timers:
                domain = TimeDomain(domain_value)
                self._live.add((domain_value, timestamp, key))
                self._queues[domain].push(timestamp, key)
        return len(self._live)

    # Step 2: register and delete, for the backend's current key ---------------------------------
    def _current_key(self) -> Any:
        key = self._backend.current_key
        if key is None:
            raise RuntimeError(
                "timers can only be set or deleted while a key is current: inside "
                "process_element or on_timer of a keyed process function"
            )
        return key

    def register(self, domain: TimeDomain, timestamp: int) -> None:
        """A timer for the current key at `timestamp` (ms); a second one at the same time and
        domain is the same timer (timers are deduplicated per key, timestamp and domain)."""
        timestamp = _check_timestamp(timestamp)
        key = self._current_key()
        d = 0 if domain is _EVENT else 1
        timer = (d, timestamp, key)
        if timer in self._live:
            return
        self._live.add(timer)
        self._timer_state().put((d, timestamp), True)
        self._queues[domain].push(timestamp, key)

    def register_all(self, domain: TimeDomain, timers: list[tuple[int, Any]]) -> None:
        """`register` for each `(timestamp, key)` of `timers`, in order, in one call (the
        backend's current key is left at the last one)."""
        d, backend, live, put = (0 if domain is _EVENT else 1), self._backend, self._live, None
        push = self._queues[domain].push
        for timestamp, key in timers:
            if type(timestamp) is not int or not MIN_WATERMARK <= timestamp <= MAX_WATERMARK:
                timestamp = _check_timestamp(timestamp)
            timer = (d, timestamp, key)
            if timer in live:
                continue
            live.add(timer)
            backend.current_key = key
            if put is None:
                put = self._timer_state().put
            put((d, timestamp), True)
            push(timestamp, key)

    def delete(self, domain: TimeDomain, timestamp: int) -> None:
        """Delete the current key's timer at `timestamp` in `domain`; no timer: nothing to do."""
        timestamp = _check_timestamp(timestamp)
        d = 0 if domain is _EVENT else 1  # (an enum's .value is a property call)
        timer = (d, timestamp, self._current_key())
        if timer not in self._live:
            return
        self._live.discard(timer)
        self._timer_state().remove((d, timestamp))
        queue = self._queues[domain]
        if len(queue) > 64 and len(queue) > 2 * len(self._live):
            self._compact(domain)

    def _compact(self, domain: TimeDomain) -> None:
        """Drop the deleted timers left in `domain`'s queue."""
        live, d = self._live, domain.value
        self._queues[domain].retain(lambda timestamp, key: (d, timestamp, key) in live)

    # Step 3: fire --------------------------------------------------------------------------
    def _fire_until(self, domain: TimeDomain, time_ms: int) -> int:
        """Fire `domain`'s timers due at `time_ms`, in timestamp order, including those that
        firing timers register at or before it. Returns how many fired."""
        queue, live, backend, fired = self._queues[domain], self._live, self._backend, 0
        times = queue.times
        if not times or times[0] > time_ms:
            return 0  # (and no `__timers__` state registered by an operator without timers)
        d, pop, trigger = (0 if domain is _EVENT else 1), queue.pop, self._trigger
        remove = self._timer_state().remove
        # one at a time: a firing timer may register one that is due too (it fires in order)
        while times and times[0] <= time_ms:
            timestamp, key = pop()
            timer = (d, timestamp, key)
            if timer not in live:
                continue  # deleted
            live.discard(timer)
            backend.current_key = key
            remove((d, timestamp))  # same step: fires once
            trigger(timestamp, domain)
            fired += 1
        return fired

    def pop_event_timers(self, watermark: int) -> list[tuple[int, Any]]:
        """`advance_watermark` for a caller that fires the due timers itself, in one loop:
        the event-time clock moves to `watermark` and the event-time timers due are removed
        (from the state too) and returned as `(timestamp, key)` in firing order. Only for
        callers that register no timer at or before `watermark` while firing them (such a
        timer would fire at the next advance instead)."""
        if watermark <= self.current_watermark:
            return []
        self.current_watermark = watermark
        queue, live, backend, due = self._queues[_EVENT], self._live, self._backend, []
        if not queue.times or queue.times[0] > watermark:
            return due
        remove, append, discard = self._timer_state().remove, due.append, live.discard
        for timestamp, bucket in queue.pop_until(watermark):
            user_key = (0, timestamp)
            for key in bucket:
                timer = (0, timestamp, key)
                if timer not in live:
                    continue  # deleted (or a second entry of a timer registered again)
                discard(timer)
                backend.current_key = key
                remove(user_key)
                append((timestamp, key))
        return due

    def advance_watermark(self, watermark: int) -> int:
        """The event-time clock moves to `watermark`: fire every event-time timer <= it.
        Watermarks never go back (an older one is ignored). Returns how many timers fired."""
        if watermark <= self.current_watermark:
            return 0
        self.current_watermark = watermark
        fired = self._fire_until(TimeDomain.EVENT_TIME, watermark)
        if self.batch and watermark >= MAX_WATERMARK:
            fired += self._fire_until(TimeDomain.PROCESSING_TIME, MAX_WATERMARK)
        return fired

    def fire_processing_timers(self) -> int:
        """Fire the processing-time timers due now; returns how many fired."""
        if self.quiesced or self.batch:
            return 0
        return self._fire_until(TimeDomain.PROCESSING_TIME, self.clock())

    def next_processing_time(self) -> int | None:
        """When the next processing-time timer is due (ms), None if there is none to fire."""
        if self.quiesced or self.batch:
            return None
        queue, live = self._queues[TimeDomain.PROCESSING_TIME], self._live
        while (first := queue.first()) is not None:
            if (1, *first) in live:
                return first[0]
            queue.pop()  # a deleted timer at the head
        return None

    def end_of_input(self) -> int:
        """End of a bounded input (FLIP-147): pending processing-time timers will not fire
        (they stay in state), and the watermark jumps to MAX_WATERMARK, so every event-time
        timer fires before the final checkpoint. Returns how many fired."""
        self.quiesced = True
        return self.advance_watermark(MAX_WATERMARK)

    def pending(self, domain: TimeDomain) -> list[tuple[int, Any]]:
        """The live timers of `domain` as sorted `(timestamp, key)` (for tools and tests)."""
        return sorted(((ts, key) for d, ts, key in self._live if d == domain.value), key=_first)


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _check_timestamp(timestamp: Any) -> int:
    if type(timestamp) is int and MIN_WATERMARK <= timestamp <= MAX_WATERMARK:
        return timestamp  # the usual case, checked cheaply
    if isinstance(timestamp, bool) or not isinstance(timestamp, numbers.Integral):
        raise TypeError(
            f"a timer's timestamp is an int of milliseconds since the epoch, got "
            f"{type(timestamp).__name__} {timestamp!r}; convert it, e.g. int(seconds * 1000)"
        )
    timestamp = int(timestamp)
    if not MIN_WATERMARK <= timestamp <= MAX_WATERMARK:
        raise ValueError(f"a timer's timestamp must fit in a signed 64-bit long, got {timestamp}")
    return timestamp
