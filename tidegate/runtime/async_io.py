"""AsyncWaitOperator: Flink's Async I/O (AsyncDataStream.ordered_wait / unordered_wait).

Two threads per subtask:

* the task's thread runs the operator: `process_batch` puts each record's request in the
  result queue (runtime/async_queue.py, the pure ordering rules) and submits it to the event
  loop; while the queue holds `capacity` requests not yet emitted it blocks (backpressure)
  until one is, emitting what became ready meanwhile;
* the event loop's thread (runtime/async_runner.py) runs `async_invoke` with the timeout and
  the retries, and puts each outcome in a CompletionInbox. The first completion of a batch
  posts a Mail (runtime/mailbox.py) to the task's gate, which wakes the task's loop; the mail
  runs `_drain` on the task's thread: outcomes go into the queue and whatever the queue
  releases is emitted, keeping each input's timestamp. Operators and outputs are only ever
  touched by the task's thread.

A timed-out request calls the function's `timeout(value)` (its results are emitted instead;
the default raises and fails the job). The function's `open`/`close` run on the event loop's
thread; its CheckpointedFunction and CheckpointListener hooks on the task's, as for any
function. An exception from `async_invoke` (not retried), or a
result that is not a list, fails the job with an error naming the operator; the job restarts
by its restart strategy.

Checkpoints (exactly-once): the synchronous snapshot stores, in a split list state, the
inputs of every request not yet emitted and the watermarks between them, in input order; a
restore re-issues them when the operator opens (their results are emitted once every
operator of the chain is open, by mail). The end of the input waits for every request.
"""

from __future__ import annotations

import reprlib
from typing import Any, NoReturn

from tidegate.runtime.async_queue import RequestEntry, WatermarkEntry, create_queue
from tidegate.runtime.async_runner import AsyncRequestRunner, Completion, CompletionInbox
from tidegate.runtime.context import StreamingRuntimeContext
from tidegate.runtime.gate import TaskCancelledError
from tidegate.runtime.operators import OperatorRuntime, OperatorSnapshot, StreamOperator
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.state.descriptors import ListStateDescriptor

__all__ = ["AsyncFunctionError", "AsyncWaitOperator"]

#: the operator state holding the in-flight inputs (Flink's name)
STATE_NAME = "_async_wait_operator_state_"
#: how long one wait for a completion lasts before checking for cancellation
_WAIT_SLICE_S = 0.2


class AsyncFunctionError(RuntimeError):
    """An async function's request failed: fails the job."""


class AsyncWaitOperator(StreamOperator):
    def __init__(
        self,
        async_function: Any,
        *,
        timeout_ms: int,
        capacity: int,
        ordered: bool,
        retry_strategy: Any = None,
        uid: str = "",
        name: str = "",
    ) -> None:
        super().__init__(async_function, uid=uid, name=name)
        self.async_function = async_function
        self.timeout_ms = int(timeout_ms)
        self.ordered = ordered
        self.retry_strategy = retry_strategy
        self._queue = create_queue(ordered, capacity)
        self._restored: list[tuple] = []
        self._state: Any = None
        self._mailbox: Any = None
        self._inbox: CompletionInbox | None = None
        self._runner: AsyncRequestRunner | None = None
        self._failure: AsyncFunctionError | None = None

    # lifecycle -------------------------------------------------------------------------------
    def initialize_state(self, runtime: OperatorRuntime, restored: Any | None) -> None:
        super().initialize_state(runtime, restored)
        self._mailbox = runtime.mailbox
        self._state = self.operator_state.get_list_state(ListStateDescriptor(STATE_NAME))
        self._restored = self._state.get()
        self._state.clear()

    def open(self) -> None:
        # the base opens the user function on the task's thread: here it is the event loop's
        function, self.function = self.function, None
        try:
            super().open()
        finally:
            self.function = function
        self._inbox = CompletionInbox(self._post_drain)
        timeout_s = self.timeout_ms / 1000 if self.timeout_ms > 0 else None
        self._runner = AsyncRequestRunner(
            self.async_function,
            timeout_s=timeout_s,
            retry_strategy=self.retry_strategy,
            deliver=self._inbox.put,
            name=self._describe(),
        )
        self._runner.start()
        if hasattr(self.async_function, "open"):
            try:
                self._runner.call(self.async_function.open, StreamingRuntimeContext(self))
            except BaseException:  # close() is not called for an operator that did not open
                self._runner.stop()
                self._runner = None
                raise
        self._reissue(self._restored)
        self._restored = []

    def _reissue(self, elements: list[tuple]) -> None:
        """Requests of a restored checkpoint, in their order (beyond the capacity if a
        rescale gave this subtask more); their results are emitted by mail, once the whole
        chain is open."""
        if not elements:
            return
        queue, pending = self._queue, []
        for element in elements:
            if element[0] == "record":
                pending.append(queue.add_record(element[1], element[2]))
            else:
                queue.add_watermark(element[1])
                # an older watermark from upstream must not follow it
                self.current_watermark = max(self.current_watermark, element[1])
        assert self._runner is not None
        self._runner.submit(pending)
        self._post_drain()

    def finish(self) -> None:
        """End of input: every request completes (or times out) and is emitted."""
        self._wait_until(lambda: self._queue.is_empty)
        super().finish()

    def close(self) -> None:
        runner, self._runner = self._runner, None
        try:
            if runner is not None and hasattr(self.async_function, "close"):
                runner.call(self.async_function.close)
        finally:
            if runner is not None:
                runner.stop()
            function, self.function = self.function, None  # closed above, on the event loop
            try:
                super().close()
            finally:
                self.function = function

    # records and watermarks -------------------------------------------------------------------
    def process_batch(self, records: list) -> None:
        timestamps = timestamps_of(records) if type(records) is not list else None
        queue, runner = self._queue, self._runner
        assert runner is not None
        pending: list[RequestEntry] = []
        for i, value in enumerate(records):
            if queue.is_full:
                runner.submit(pending)
                pending = []
                self._wait_until(lambda: not queue.is_full)
            pending.append(queue.add_record(value, None if timestamps is None else timestamps[i]))
        runner.submit(pending)

    def process_watermark(self, watermark: int) -> None:
        """Queued behind the requests before it (emitted once they are)."""
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self._queue.add_watermark(watermark)
        self._emit_ready()

    # checkpoints -----------------------------------------------------------------------------
    def snapshot_state(
        self, checkpoint_id: int, timestamp_ms: int, savepoint: bool = False
    ) -> OperatorSnapshot | None:
        self._state.update(self._queue.elements())
        return super().snapshot_state(checkpoint_id, timestamp_ms, savepoint)

    # completions (on the task's thread) -------------------------------------------------------
    def _post_drain(self) -> None:
        if self._mailbox is not None:
            self._mailbox.post(self._drain)

    def _wait_until(self, condition: Any) -> None:
        """Drain completions until `condition()` holds, waiting for them without polling."""
        while True:
            self._drain()
            if condition():
                return
            assert self._inbox is not None
            self._inbox.wait(_WAIT_SLICE_S)
            if self._mailbox is not None and self._mailbox.closed:
                raise TaskCancelledError("cancelled while waiting for async I/O results")

    def _drain(self) -> None:
        if self._failure is not None:  # raised once already (the mail of a failing batch)
            raise self._failure
        inbox = self._inbox
        if inbox is None:
            return
        for completion in inbox.take_all():
            self._complete(completion)
        self._emit_ready()

    def _complete(self, c: Completion) -> None:
        entry = c.entry
        value = reprlib.repr(entry.value)
        if c.timed_out:
            try:
                results = self.async_function.timeout(entry.value)
            except Exception as e:
                self._fail(
                    f"the request for {value} timed out after {self.timeout_ms} ms "
                    f"({c.attempts} attempt(s)) and timeout() raised {type(e).__name__}: {e}",
                    e,
                )
            what = "timeout()"
        elif c.error is not None:
            self._fail(
                f"async_invoke({value}) raised {type(c.error).__name__}: {c.error}"
                + (f" (attempt {c.attempts})" if c.attempts > 1 else ""),
                c.error,
            )
        else:
            results, what = c.result, "async_invoke"
        if not isinstance(results, list):
            got = "None" if results is None else f"a {type(results).__name__}"
            self._fail(f"{what} for {value} must return a list of results ([] for none), got {got}")
        self._queue.complete(entry, results)

    def _fail(self, message: str, cause: BaseException | None = None) -> NoReturn:
        self._failure = AsyncFunctionError(f"{self._describe()}: {message}")
        raise self._failure from cause

    def _describe(self) -> str:
        ctx = getattr(self, "ctx", None)
        where = f" ({ctx.subtask_index + 1}/{ctx.parallelism})" if ctx is not None else ""
        return f"Async I/O operator '{self.name}'{where}"

    def _emit_ready(self) -> None:
        """Emit what the queue releases: results as batches (with their inputs' timestamps),
        watermarks in between."""
        ready = self._queue.pop_ready()
        values: list = []
        stamps: list[int] = []
        timed = False
        for item in ready:
            if isinstance(item, WatermarkEntry):
                self._flush(values, stamps, timed)
                values, stamps = [], []
                self.emit_watermark(item.watermark)
                continue
            results = item.results or []
            has_ts = item.timestamp is not None
            if values and has_ts != timed:  # a batch is either timestamped or not
                self._flush(values, stamps, timed)
                values, stamps = [], []
            timed = has_ts
            values.extend(results)
            if has_ts:
                stamps.extend([item.timestamp] * len(results))
        self._flush(values, stamps, timed)

    def _flush(self, values: list, stamps: list[int], timed: bool) -> None:
        if values:
            self.emit(TimestampedBatch(values, stamps) if timed else values)
