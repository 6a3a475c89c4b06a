"""The decisions of Async I/O (runtime/async_io.py), kept pure: which results may be emitted
when, and whether a finished attempt is retried. No threads, no clocks, no event loop: the
operator feeds events in (a record, a watermark, a completion) and takes emissions out, so
the tests script them (tests/unit/test_async_queue.py).

Result queues (Flink's StreamElementQueue):

* `OrderedResultQueue`: emissions in input order. A completed request waits for every
  request before it; a watermark is emitted once every request before it was.
* `UnorderedResultQueue`: a completed request is emitted at once, but never across a
  watermark: the queue is a sequence of segments, record segments separated by watermarks;
  only the first segment emits, and a watermark leaves once the records before it have.

Both count the requests not yet emitted (completed or not) against `capacity`: the operator
blocks while `is_full` (backpressure). Consecutive watermarks collapse into the newest one (it
subsumes the older). `elements()` lists what a checkpoint stores: the inputs of every request
not yet emitted, and the watermarks between them, in input order (re-issued on restore).

`retry_delay_ms`: whether a finished attempt is retried, and after how long (Flink's
AsyncRetryStrategy: `can_retry(attempts)`, `get_backoff_time_millis(attempts)`, and the
result / exception predicates of `get_retry_predicate()`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OrderedResultQueue",
    "RequestEntry",
    "ResultQueue",
    "UnorderedResultQueue",
    "WatermarkEntry",
    "create_queue",
    "retry_delay_ms",
]


@dataclass(eq=False, slots=True)
class RequestEntry:
    """One input record's request: its value and timestamp (None without event time), and
    its results once completed."""

    value: Any
    timestamp: int | None
    results: list | None = None
    done: bool = False


@dataclass(frozen=True, slots=True)
class WatermarkEntry:
    watermark: int


#: what a queue emits, in order: completed requests and watermarks
Emission = RequestEntry | WatermarkEntry


class ResultQueue:
    """What both queues share: the capacity and the count of requests not yet emitted
    (completed or not), and the collapsing of consecutive watermarks."""

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 1:
            raise ValueError(f"the capacity of an async operator must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._requests = 0

    @property
    def in_flight(self) -> int:
        return self._requests

    @property
    def is_full(self) -> bool:
        return self._requests >= self.capacity

    @staticmethod
    def _append_watermark(entries: deque, watermark: int) -> None:
        """A watermark after a watermark replaces it (the newer subsumes the older)."""
        if entries and isinstance(entries[-1], WatermarkEntry):
            entries[-1] = WatermarkEntry(watermark)
        else:
            entries.append(WatermarkEntry(watermark))


def _as_element(entry: Emission) -> tuple:
    """A stored element: ("record", value, timestamp) or ("watermark", watermark)."""
    if isinstance(entry, WatermarkEntry):
        return ("watermark", entry.watermark)
    return ("record", entry.value, entry.timestamp)


class OrderedResultQueue(ResultQueue):
    """Results in input order (AsyncDataStream.ordered_wait)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._entries: deque[Emission] = deque()

    @property
    def is_empty(self) -> bool:
        return not self._entries

    def add_record(self, value: Any, timestamp: int | None) -> RequestEntry:
        entry = RequestEntry(value, timestamp)
        self._entries.append(entry)
        self._requests += 1
        return entry

    def add_watermark(self, watermark: int) -> None:
        self._append_watermark(self._entries, watermark)

    def complete(self, entry: RequestEntry, results: list) -> None:
        entry.results, entry.done = results, True

    def pop_ready(self) -> list[Emission]:
        ready: list[Emission] = []
        entries = self._entries
        while entries:
            head = entries[0]
            if isinstance(head, RequestEntry):
                if not head.done:
                    break
                self._requests -= 1
            ready.append(entries.popleft())
        return ready

    def elements(self) -> list[tuple]:
        return [_as_element(e) for e in self._entries]


@dataclass(eq=False)
class _Segment:
    """Requests between two watermarks: those still running and the completed ones (in
    completion order)."""

    #: id(entry) -> entry, in input order
    pending: dict = field(default_factory=dict)
    completed: list = field(default_factory=list)


class UnorderedResultQueue(ResultQueue):
    """Results as they complete, never across a watermark (AsyncDataStream.unordered_wait)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._segments: deque[_Segment | WatermarkEntry] = deque()
        self._segment_of: dict[int, _Segment] = {}  # id(entry) -> its segment

    @property
    def is_empty(self) -> bool:
        return not self._segments

    def add_record(self, value: Any, timestamp: int | None) -> RequestEntry:
        entry = RequestEntry(value, timestamp)
        segments = self._segments
        if not segments or isinstance(segments[-1], WatermarkEntry):
            segments.append(_Segment())
        segment = segments[-1]
        assert isinstance(segment, _Segment)
        segment.pending[id(entry)] = entry
        self._segment_of[id(entry)] = segment
        self._requests += 1
        return entry

    def add_watermark(self, watermark: int) -> None:
        self._append_watermark(self._segments, watermark)

    def complete(self, entry: RequestEntry, results: list) -> None:
        entry.results, entry.done = results, True
        segment = self._segment_of.pop(id(entry))
        del segment.pending[id(entry)]
        segment.completed.append(entry)

    def pop_ready(self) -> list[Emission]:
        ready: list[Emission] = []
        segments = self._segments
        while segments:
            head = segments[0]
            if isinstance(head, WatermarkEntry):
                ready.append(segments.popleft())
                continue
            if head.completed:
                ready.extend(head.completed)
                self._requests -= len(head.completed)
                head.completed = []
            if head.pending:
                break
            segments.popleft()
        return ready

    def elements(self) -> list[tuple]:
        out: list[tuple] = []
        for segment in self._segments:
            if isinstance(segment, WatermarkEntry):
                out.append(_as_element(segment))
                continue
            out.extend(_as_element(e) for e in segment.completed)
            out.extend(_as_element(e) for e in segment.pending.values())
        return out


def create_queue(ordered: bool, capacity: int) -> OrderedResultQueue | UnorderedResultQueue:
    return OrderedResultQueue(capacity) if ordered else UnorderedResultQueue(capacity)


def retry_delay_ms(strategy: Any, attempts: int, result: Any, error: BaseException | None) -> Any:
    """The backoff (ms) before the next attempt of a request whose `attempts`-th attempt just
    finished with `result` (or raised `error`), or None: no retry (emit the result, or fail
    with the error). Retries when the strategy still allows one and its result predicate
    (for a result) or exception predicate (for an error) says so."""
    if strategy is None or not strategy.can_retry(attempts):
        return None
    predicate = strategy.get_retry_predicate()
    if predicate is None:
        return None
    if error is not None:
        test = predicate.exception_predicate()
        matched = test is not None and bool(test(error))
    else:
        test = predicate.result_predicate()
        matched = test is not None and bool(test(result))
    return strategy.get_backoff_time_millis(attempts) if matched else None
