"""The real AsyncWaitOperator (tidegate.runtime.async_io) with its event loop thread, driven
like its task drives it: batches and watermarks on the test's thread (the task's thread),
completions woken by Mail items on a real InputGate (the task's mailbox), whose actions the
test runs as the task's loop would. The async function's requests wait on asyncio events the
test releases, so completion orders are scripted; no sockets, no processes.

Checked: input order (ordered) and completion order bounded by watermarks (unordered), the
inputs' timestamps on the results, capacity (the task's thread blocks until a request is
emitted), timeouts (the function's timeout() and the default that fails the job), exceptions
naming the operator, retries (within the timeout), what a checkpoint stores and its re-issue
on restore, and the end of input waiting for every request."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

import pytest

from tidegate.datastream.async_function import AsyncFunction
from tidegate.datastream.async_retry_predicates import has_exception_predicate
from tidegate.datastream.async_retry_strategies import AsyncRetryStrategy
from tidegate.runtime.async_io import STATE_NAME, AsyncFunctionError, AsyncWaitOperator
from tidegate.runtime.gate import InputGate
from tidegate.runtime.mailbox import Mail, TaskMailbox
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.restore import RestoredOperatorState

WAIT_S = 10


class Gated(AsyncFunction):
    """Each request waits until the test releases its value; counts invocations per value."""

    def open(self, runtime_context: Any) -> None:
        self.loop = asyncio.get_running_loop()  # open runs on the operator's event loop
        self.events: dict[Any, asyncio.Event] = {}
        self.calls: collections.Counter = collections.Counter()
        self.closed = False

    def _event(self, value: Any) -> asyncio.Event:
        return self.events.setdefault(value, asyncio.Event())

    async def async_invoke(self, value: Any) -> list:
        self.calls[value] += 1
        await self._event(value).wait()
        return [f"r{value}"]

    def release(self, *values: Any) -> None:
        for value in values:
            self.loop.call_soon_threadsafe(lambda v=value: self._event(v).set())

    def close(self) -> None:
        self.closed = True


class Collect:
    """Downstream of the operator: what reaches it, in order ((value, timestamp) or ("wm", w))."""

    def __init__(self) -> None:
        self.items: list = []

    def process_batch(self, records: list) -> None:
        stamps = timestamps_of(records) or [None] * len(records)
        self.items.extend(zip(records, stamps, strict=True))

    def process_watermark(self, watermark: int) -> None:
        self.items.append(("wm", watermark))

    def process_watermark_status(self, idle: bool) -> None:
        pass


class Harness:
    def __init__(self, function: AsyncFunction, *, restored: Any = None, **options: Any) -> None:
        options.setdefault("timeout_ms", 10_000)
        options.setdefault("capacity", 100)
        options.setdefault("ordered", True)
        self.function = function
        self.gate = InputGate(100)
        self.out = Collect()
        self.op = AsyncWaitOperator(function, **options)
        self.op.name = "lookup"
        self.op.outputs = [self.out]
        runtime = OperatorRuntime(0, 1, 128, 0, mailbox=TaskMailbox(self.gate))
        self.op.initialize_state(runtime, restored)
        self.op.open()

    def run_mail(self, timeout_s: float) -> bool:
        """Run one Mail from the gate, as the task's loop does; False if none came."""
        got = self.gate.get(timeout_s)
        if got is None:
            return False
        is_control, item = got
        assert is_control and isinstance(item, Mail), got
        item.action()
        return True

    def pump_until(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen within {WAIT_S}s: {self.out.items}")
            self.run_mail(0.05)

    def values(self) -> list:
        return [v for v, _ in self.out.items if v != "wm"]

    def close(self) -> None:
        self.op.close()


@pytest.fixture
def harnesses():
    made: list[Harness] = []

    def make(function: AsyncFunction, **options: Any) -> Harness:
        h = Harness(function, **options)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_ordered_mode_emits_in_input_order_with_each_inputs_timestamp(harnesses) -> None:
    h = harnesses(Gated(), ordered=True)
    h.op.process_batch(TimestampedBatch([1, 2, 3], [10, 20, 30]))
    h.function.release(3, 2)
    time.sleep(0.1)
    while h.run_mail(0.05):
        pass
    assert h.out.items == []  # 2 and 3 are done but wait for 1
    h.function.release(1)
    h.pump_until(lambda: len(h.out.items) == 3, "three results")
    assert h.out.items == [("r1", 10), ("r2", 20), ("r3", 30)]


def test_unordered_mode_emits_as_completed_but_never_across_a_watermark(harnesses) -> None:
    h = harnesses(Gated(), ordered=False)
    h.op.process_batch(TimestampedBatch([1, 2], [1, 2]))
    h.op.process_watermark(5)
    h.op.process_batch(TimestampedBatch([6, 7], [6, 7]))
    h.function.release(7, 2)
    h.pump_until(lambda: len(h.out.items) == 1, "the first result")
    assert h.out.items == [("r2", 2)]  # 7 is done too, but behind watermark 5 (and 1)
    h.function.release(1)
    h.pump_until(lambda: len(h.out.items) == 4, "1, the watermark, 7")
    assert h.out.items[1:] == [("r1", 1), ("wm", 5), ("r7", 7)]
    h.function.release(6)
    h.pump_until(lambda: len(h.out.items) == 5, "6")
    assert h.out.items[-1] == ("r6", 6)


def test_a_full_queue_blocks_the_tasks_thread_until_a_request_is_emitted(harnesses) -> None:
    h = harnesses(Gated(), ordered=False, capacity=2)
    task = threading.Thread(target=h.op.process_batch, args=([1, 2, 3, 4],), daemon=True)
    task.start()
    deadline = time.monotonic() + WAIT_S
    while sum(h.function.calls.values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert task.is_alive(), "process_batch must block while 2 requests are in flight"
    assert dict(h.function.calls) == {1: 1, 2: 1}  # never more than the capacity
    h.function.release(2)
    deadline = time.monotonic() + WAIT_S
    while h.function.calls[3] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.function.calls[3] == 1 and h.function.calls[4] == 0
    h.function.release(1, 3)
    task.join(WAIT_S)
    assert not task.is_alive()
    # the first of 1 and 3 to complete freed the slot for 4; the other may still be in the
    # mailbox when process_batch returns
    h.pump_until(lambda: len(h.values()) == 3, "r1 and r3")
    assert sorted(h.values()) == ["r1", "r2", "r3"]
    h.function.release(4)
    h.op.finish()  # the end of the input waits for the last one
    assert sorted(h.values()) == ["r1", "r2", "r3", "r4"]


class NeverAnswers(AsyncFunction):
    def __init__(self, on_timeout: Any = None) -> None:
        self.on_timeout = on_timeout

    async def async_invoke(self, value: Any) -> list:
        await asyncio.sleep(3600)
        return []

    def timeout(self, value: Any) -> list:
        if self.on_timeout is None:
            return super().timeout(value)
        return self.on_timeout(value)


def test_a_timed_out_request_emits_what_timeout_returns(harnesses) -> None:
    h = harnesses(NeverAnswers(lambda v: [f"fallback {v}"]), timeout_ms=100)
    started = time.monotonic()
    h.op.process_batch(TimestampedBatch(["a"], [42]))
    h.pump_until(lambda: h.out.items, "the timeout")
    assert h.out.items == [("fallback a", 42)]
    assert time.monotonic() - started >= 0.1


def test_the_default_timeout_fails_the_job_naming_the_operator(harnesses) -> None:
    h = harnesses(NeverAnswers(), timeout_ms=100)
    h.op.process_batch(["a"])
    with pytest.raises(AsyncFunctionError, match=r"'lookup' \(1/1\).*'a' timed out after 100 ms"):
        h.pump_until(lambda: False, "a failure")


class Failing(AsyncFunction):
    """Fails the first `failures` attempts of each value (with OSError), then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def open(self, runtime_context: Any) -> None:
        self.calls: collections.Counter = collections.Counter()

    async def async_invoke(self, value: Any) -> list:
        self.calls[value] += 1
        if self.calls[value] <= self.failures:
            raise OSError(f"service down (attempt {self.calls[value]})")
        return [value * 2]


def test_an_exception_fails_the_job_with_a_message_naming_the_operator(harnesses) -> None:
    h = harnesses(Failing(failures=1))
    h.op.process_batch([21])
    with pytest.raises(AsyncFunctionError, match=r"'lookup'.*async_invoke\(21\) raised OSError"):
        h.pump_until(lambda: False, "a failure")


def test_retries_until_success_within_the_strategy(harnesses) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(3, 10, exception_predicate=has_exception_predicate)
    h = harnesses(Failing(failures=2), retry_strategy=strategy)
    h.op.process_batch([1, 2])
    h.pump_until(lambda: len(h.out.items) == 2, "both results")
    assert h.values() == [2, 4]
    assert h.function.calls == {1: 3, 2: 3}


def test_retries_stop_at_the_timeout_counted_from_the_first_attempt(harnesses) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(1000, 50, exception_predicate=has_exception_predicate)
    function = Failing(failures=10**6)
    h = harnesses(function, retry_strategy=strategy, timeout_ms=300)
    function.timeout = lambda value: [f"gave up on {value}"]  # type: ignore[method-assign]
    h.op.process_batch([5])
    h.pump_until(lambda: h.out.items, "the timeout")
    assert h.values() == ["gave up on 5"]
    assert 2 <= function.calls[5] <= 8  # about 300 ms / 50 ms, not 1000


def test_a_result_that_is_not_a_list_fails_the_job(harnesses) -> None:
    class ReturnsInt(AsyncFunction):
        async def async_invoke(self, value: Any) -> Any:
            return value

    h = harnesses(ReturnsInt())
    h.op.process_batch([3])
    with pytest.raises(AsyncFunctionError, match=r"must return a list of results.*got a int"):
        h.pump_until(lambda: False, "a failure")


def test_a_checkpoint_stores_the_inputs_in_flight_and_a_restore_reissues_them(harnesses) -> None:
    h = harnesses(Gated(), ordered=True)
    h.op.process_batch(TimestampedBatch([1, 2, 3], [1, 2, 3]))
    h.op.process_watermark(3)
    h.function.release(1, 3)
    h.pump_until(lambda: len(h.out.items) == 1, "the first result")
    snapshot = h.op.snapshot_state(7, 0)
    assert snapshot is not None and snapshot.operator is not None
    mode, elements = snapshot.operator[STATE_NAME]
    assert mode == "split"
    # 3 is done but not emitted (it waits for 2): re-issued too, as Flink does
    assert elements == [("record", 2, 2), ("record", 3, 3), ("watermark", 3)]

    restored = RestoredOperatorState(operator_state=snapshot.operator)
    again = harnesses(Gated(), ordered=True, restored=restored)
    deadline = time.monotonic() + WAIT_S
    while len(again.function.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dict(again.function.calls) == {2: 1, 3: 1}  # re-issued when the operator opens
    assert again.out.items == []  # nothing is emitted while the chain is opening
    again.op.process_watermark(2)  # upstream's older watermark: behind the restored one
    again.function.release(2, 3)
    again.pump_until(lambda: len(again.out.items) == 3, "the re-issued results")
    assert again.out.items == [("r2", 2), ("r3", 3), ("wm", 3)]


def test_close_runs_the_functions_close_on_its_event_loop_and_stops_the_thread() -> None:
    function = Gated()
    h = Harness(function)
    loop_thread = [t for t in threading.enumerate() if t.name.startswith("Async I/O operator")]
    assert loop_thread
    h.op.process_batch([1])  # still running when closed: cancelled
    h.close()
    assert function.closed
    assert not any(t.is_alive() for t in loop_thread)


def test_a_failing_open_stops_the_event_loop_thread() -> None:
    class BrokenOpen(AsyncFunction):
        def open(self, runtime_context: Any) -> None:
            raise ConnectionRefusedError("no service")

        async def async_invoke(self, value: Any) -> list:
            return [value]

    before = {t for t in threading.enumerate() if t.name.startswith("Async I/O operator")}
    with pytest.raises(ConnectionRefusedError, match="no service"):
        Harness(BrokenOpen())
    after = {t for t in threading.enumerate() if t.name.startswith("Async I/O operator")}
    assert after <= before


def test_after_a_rescale_every_input_in_flight_is_reissued_once(harnesses) -> None:
    from tidegate.checkpoint.assignment import redistribute_operator_state

    old = [harnesses(Gated(), ordered=False) for _ in range(2)]
    old[0].op.process_batch([1, 2, 3])
    old[1].op.process_batch([4, 5])
    snapshots = [h.op.snapshot_state(1, 0).operator for h in old]
    for new_parallelism in (1, 3):
        shares = redistribute_operator_state(snapshots, new_parallelism)
        new = [
            harnesses(Gated(), ordered=False, restored=RestoredOperatorState(operator_state=s))
            for s in shares
        ]
        for h in new:
            h.function.release(1, 2, 3, 4, 5)
        for h in new:
            h.op.finish()
        assert sorted(v for h in new for v in h.values()) == ["r1", "r2", "r3", "r4", "r5"]


def test_the_functions_checkpoint_hooks_run_like_any_functions(harnesses) -> None:
    from tidegate.datastream.functions import CheckpointedFunction, CheckpointListener
    from tidegate.datastream.state import ListStateDescriptor

    class Counting(Gated, CheckpointedFunction, CheckpointListener):
        def initialize_state(self, context: Any) -> None:
            self.restored = context.is_restored()
            self.sent = context.get_operator_state_store().get_list_state(
                ListStateDescriptor("sent")
            )
            self.completed: list[int] = []

        def snapshot_state(self, context: Any) -> None:
            self.sent.update([sum(self.calls.values())])

        def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
            self.completed.append(checkpoint_id)

    h = harnesses(Counting())
    assert h.function.restored is False
    h.op.process_batch([1, 2])
    deadline = time.monotonic() + WAIT_S
    while sum(h.function.calls.values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    snapshot = h.op.snapshot_state(3, 0)
    h.op.notify_checkpoint_complete(3)
    assert h.function.completed == [3]
    assert snapshot.operator["sent"] == ("split", [2])
    assert snapshot.operator[STATE_NAME] == ("split", [("record", 1, None), ("record", 2, None)])
    again = harnesses(Counting(), restored=RestoredOperatorState(operator_state=snapshot.operator))
    assert again.function.restored is True
    assert again.function.sent.get() == [2]
