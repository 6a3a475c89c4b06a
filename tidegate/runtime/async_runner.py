"""The I/O side of Async I/O: an asyncio event loop on a thread of its own (one per operator
subtask) that runs the user's `async_invoke` coroutines, with the request's timeout and its
retries, and hands each outcome to the task's side through a `CompletionInbox`.

Nothing here touches the operator's queue or its outputs: the task's thread takes the
completions from the inbox (runtime/async_io.py). The inbox calls `notify` (which posts a Mail
to the task, runtime/mailbox.py) when it goes from empty to non-empty, so the task's loop
wakes once per batch of completions, without polling.

Timeout (Flink's semantics): counted from the start of the first attempt and covering every
retry and backoff; when it expires the running attempt (or backoff) is cancelled and the
completion says `timed_out` (the operator then calls the function's `timeout(value)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.runtime.async_queue import RequestEntry, retry_delay_ms

__all__ = ["AsyncRequestRunner", "Completion", "CompletionInbox"]


@dataclass(frozen=True, slots=True)
class Completion:
    """How a request ended: with `result` (what async_invoke returned), with `error` (it raised,
    not retried), or `timed_out`; after `attempts` attempts."""

    entry: RequestEntry
    result: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    attempts: int = 1


class CompletionInbox:
    """Completions from the event loop's thread to the task's thread."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._items: list[Completion] = []
        self._changed = threading.Condition()
        self._notified = False

    def put(self, completion: Completion) -> None:
        with self._changed:
            self._items.append(completion)
            self._changed.notify()
            if self._notified:
                return
            self._notified = True
        self._notify()

    def take_all(self) -> list[Completion]:
        with self._changed:
            items, self._items = self._items, []
            self._notified = False
            return items

    def wait(self, timeout_s: float) -> None:
        """Until a completion is waiting, at most `timeout_s` seconds."""
        with self._changed:
            if not self._items:
                self._changed.wait(timeout_s)


class AsyncRequestRunner:
    """Runs requests on an event loop thread: `submit` entries, outcomes go to `deliver`."""

    def __init__(
        self,
        function: Any,
        *,
        timeout_s: float | None,
        retry_strategy: Any,
        deliver: Callable[[Completion], None],
        name: str,
    ) -> None:
        self._function = function
        self._timeout_s = timeout_s
        self._retry = retry_strategy
        self._deliver = deliver
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, args=(loop,), name=f"{self._name} (async I/O)", daemon=True
        )
        self._thread.start()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
        finally:
            loop.close()

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 60.0) -> Any:
        """`fn(*args)` on the loop's thread (the function's open/close: clients they create
        belong to this loop); returns its result or raises its exception."""

        async def run() -> Any:
            return fn(*args)

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout_s)

    def submit(self, entries: list[RequestEntry]) -> None:
        if entries:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._start, entries)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel what still runs, stop the loop and wait for its thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

    # on the loop's thread ------------------------------------------------------------------------
    def _start(self, entries: list[RequestEntry]) -> None:
        loop = self._loop
        assert loop is not None
        for entry in entries:
            task = loop.create_task(self._request(entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _request(self, entry: RequestEntry) -> None:
        attempts = [0]
        try:
            if self._timeout_s is None:
                completion = await self._attempts(entry, attempts)
            else:
                async with asyncio.timeout(self._timeout_s):
                    completion = await self._attempts(entry, attempts)
        except TimeoutError:
            completion = Completion(entry, timed_out=True, attempts=attempts[0])
        self._deliver(completion)

    async def _attempts(self, entry: RequestEntry, attempts: list[int]) -> Completion:
        invoke = self._function.async_invoke
        while True:
            attempts[0] += 1
            result: Any = None
            error: BaseException | None = None
            try:
                result = await invoke(entry.value)
            except Exception as e:
                error = e
            try:
                delay_ms = retry_delay_ms(self._retry, attempts[0], result, error)
            except Exception as e:  # a failing predicate fails the request
                return Completion(entry, error=e, attempts=attempts[0])
            if delay_ms is None:
                return Completion(entry, result, error, attempts=attempts[0])
            await asyncio.sleep(max(delay_ms, 0) / 1000)
