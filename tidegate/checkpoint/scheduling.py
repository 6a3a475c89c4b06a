"""Timers for the checkpoint coordinator: a real thread scheduler and a manual one for tests.

Time is passed in as a `Clock` (seconds, monotonic in production) so that coordinator tests can
script time exactly, as Flink's tests do with `ManuallyTriggeredScheduledExecutor`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

#: returns seconds; `time.monotonic` in production, `ManualClock.now` in tests
Clock = Callable[[], float]


class Cancellable(Protocol):
    def cancel(self) -> None:
        """Prevent the task from running if it has not started yet (idempotent)."""
        ...


class Scheduler(Protocol):
    def schedule(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        """Run `fn` once, `delay_s` seconds from now, on the scheduler's thread."""
        ...


@dataclass(order=True)
class _Task:
    due: float
    seq: int  # breaks ties: tasks due at the same time run in scheduling order
    fn: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ThreadScheduler:
    """Runs scheduled tasks one at a time on a single daemon thread.

    A task that raises is logged and does not stop the thread. Tasks scheduled after `shutdown`
    never run (their handle is returned already cancelled), so shutdown races are harmless.
    """

    def __init__(self, clock: Clock = time.monotonic, name: str = "tidegate-scheduler") -> None:
        self._clock = clock
        self._queue: list[_Task] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._shutdown = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        with self._cond:
            task = _Task(self._clock() + max(delay_s, 0.0), next(self._seq), fn)
            if self._shutdown:
                task.cancel()
                return task
            heapq.heappush(self._queue, task)
            self._cond.notify()
            return task

    def shutdown(self, timeout_s: float | None = 5.0) -> None:
        """Stop the thread; pending tasks are dropped, a running task is allowed to finish."""
        with self._cond:
            self._shutdown = True
            self._queue.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                task = self._next_due_task()
                if task is None:
                    return
            try:
                task.fn()
            except Exception:
                log.exception("scheduled task %r failed", task.fn)

    def _next_due_task(self) -> _Task | None:
        """Wait (holding the condition) until a task is due; None once shut down."""
        while not self._shutdown:
            if not self._queue:
                self._cond.wait()
                continue
            head = self._queue[0]
            if head.cancelled:
                heapq.heappop(self._queue)
                continue
            wait_s = head.due - self._clock()
            if wait_s > 0:
                self._cond.wait(wait_s)
                continue
            return heapq.heappop(self._queue)
        return None


class ManualClock:
    """A clock that only moves when told to (seconds)."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def now_ms(self) -> int:
        """The same time in integer milliseconds, usable as a `wall_clock_ms` in tests."""
        return round(self._now * 1000)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds


class ManualScheduler:
    """Runs scheduled tasks only when the test advances time, on the test's thread."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._queue: list[_Task] = []
        self._seq = itertools.count()

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        task = _Task(self.clock.now() + max(delay_s, 0.0), next(self._seq), fn)
        heapq.heappush(self._queue, task)
        return task

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, running every task that falls due, in due order.

        The clock reads each task's due time while it runs, and tasks scheduled by a running
        task run too if they fall due before the end of the step.
        """
        target = self.clock.now() + seconds
        while (task := self._pop_due(target)) is not None:
            self.clock.advance(max(task.due - self.clock.now(), 0.0))
            task.fn()
        self.clock.advance(max(target - self.clock.now(), 0.0))

    def run_due(self) -> None:
        """Run the tasks due now (e.g. ones scheduled with delay 0) without moving time."""
        self.advance(0.0)

    @property
    def scheduled_delays(self) -> list[float]:
        """Seconds from now until each live task is due, soonest first."""
        now = self.clock.now()
        return sorted(t.due - now for t in self._queue if not t.cancelled)

    def _pop_due(self, target: float) -> _Task | None:
        while self._queue and self._queue[0].cancelled:
            heapq.heappop(self._queue)
        if self._queue and self._queue[0].due <= target:
            return heapq.heappop(self._queue)
        return None
