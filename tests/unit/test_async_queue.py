"""Scripted tests of Async I/O's pure core (tidegate.runtime.async_queue): the ordered and
unordered result queues (order, watermarks, capacity, what a checkpoint stores) and the retry
decision, driven by scripted events: no threads, no event loop, no clock."""

from __future__ import annotations

import random

import pytest

from tidegate.datastream.async_retry_predicates import (
    AsyncRetryPredicates,
    empty_result_predicate,
    has_exception_predicate,
)
from tidegate.datastream.async_retry_strategies import (
    NO_RETRY_STRATEGY,
    AsyncRetryStrategies,
    AsyncRetryStrategy,
    ExponentialBackoffDelayRetryStrategy,
)
from tidegate.runtime.async_queue import (
    OrderedResultQueue,
    RequestEntry,
    UnorderedResultQueue,
    WatermarkEntry,
    retry_delay_ms,
)


def emitted(ready: list) -> list:
    """Emissions as plain values: a request's input value, a watermark as ("wm", w)."""
    return [("wm", e.watermark) if isinstance(e, WatermarkEntry) else e.value for e in ready]


# --------------------------------------------------------------------------- ordered


def test_ordered_queue_emits_in_input_order_whatever_the_completion_order() -> None:
    q = OrderedResultQueue(10)
    a, b, c = (q.add_record(v, None) for v in "abc")
    q.complete(c, ["C"])
    q.complete(b, ["B"])
    assert q.pop_ready() == []  # the head (a) is still running
    q.complete(a, ["A"])
    ready = q.pop_ready()
    assert emitted(ready) == ["a", "b", "c"]
    assert [e.results for e in ready] == [["A"], ["B"], ["C"]]
    assert q.is_empty and q.in_flight == 0


def test_ordered_queue_holds_a_watermark_until_the_records_before_it_are_emitted() -> None:
    q = OrderedResultQueue(10)
    a = q.add_record("a", 1)
    q.add_watermark(5)
    b = q.add_record("b", 7)
    q.complete(b, [])
    assert q.pop_ready() == []
    q.complete(a, [])
    assert emitted(q.pop_ready()) == ["a", ("wm", 5), "b"]


def test_a_watermark_into_an_empty_queue_is_ready_at_once_and_consecutive_ones_collapse() -> None:
    for q in (OrderedResultQueue(3), UnorderedResultQueue(3)):
        q.add_watermark(1)
        assert emitted(q.pop_ready()) == [("wm", 1)]
        a = q.add_record("a", 2)
        q.add_watermark(3)
        q.add_watermark(4)  # subsumes 3: only the newest is emitted
        q.complete(a, [])
        assert emitted(q.pop_ready()) == ["a", ("wm", 4)]


# --------------------------------------------------------------------------- unordered


def test_unordered_queue_emits_completed_requests_at_once() -> None:
    q = UnorderedResultQueue(10)
    a, b, c = (q.add_record(v, None) for v in "abc")
    q.complete(c, ["C"])
    assert emitted(q.pop_ready()) == ["c"]
    q.complete(a, ["A"])
    assert emitted(q.pop_ready()) == ["a"]
    assert q.in_flight == 1
    q.complete(b, ["B"])
    assert emitted(q.pop_ready()) == ["b"]
    assert q.is_empty


def test_unordered_queue_never_emits_across_a_watermark() -> None:
    q = UnorderedResultQueue(10)
    a, b = q.add_record("a", 1), q.add_record("b", 2)
    q.add_watermark(10)
    c, d = q.add_record("c", 11), q.add_record("d", 12)
    q.add_watermark(20)
    e = q.add_record("e", 21)
    q.complete(e, [])
    q.complete(d, [])
    q.complete(b, [])
    assert emitted(q.pop_ready()) == ["b"]  # d and e wait behind watermark 10 (and a)
    q.complete(a, [])
    assert emitted(q.pop_ready()) == ["a", ("wm", 10), "d"]
    q.complete(c, [])
    assert emitted(q.pop_ready()) == ["c", ("wm", 20), "e"]
    assert q.is_empty


def test_unordered_queue_against_a_reference_on_random_scripts() -> None:
    """Property: every record is emitted once; a watermark comes after every record before it
    and before every record after it; results before a watermark leave in completion order."""
    rng = random.Random(7)
    for _ in range(200):
        q = UnorderedResultQueue(1000)
        running: list[RequestEntry] = []
        script: list = []  # the input: values and ("wm", w)
        out: list = []
        completed_order: list = []
        for step in range(60):
            r = rng.random()
            if r < 0.45:
                running.append(q.add_record(step, step))
                script.append(step)
            elif r < 0.55:
                q.add_watermark(step)
                script.append(("wm", step))
            elif running:
                entry = running.pop(rng.randrange(len(running)))
                q.complete(entry, [entry.value])
                completed_order.append(entry.value)
            out.extend(emitted(q.pop_ready()))
        for entry in running:
            q.complete(entry, [entry.value])
            completed_order.append(entry.value)
        out.extend(emitted(q.pop_ready()))
        assert q.is_empty
        assert sorted(v for v in out if not isinstance(v, tuple)) == sorted(
            v for v in script if not isinstance(v, tuple)
        )

        # the segment of each record in the output equals its segment in the input
        def segments(seq: list) -> dict:
            seg, where = 0, {}
            for v in seq:
                if isinstance(v, tuple):
                    seg += 1
                else:
                    where[v] = seg
            return where

        def collapse(seq: list) -> list:  # consecutive watermarks collapse in the queue
            result: list = []
            for v in seq:
                if isinstance(v, tuple) and result and isinstance(result[-1], tuple):
                    result[-1] = v
                else:
                    result.append(v)
            return result

        assert segments(collapse(out)) == segments(collapse(script))
        for seg in set(segments(out).values()):
            records = [v for v, s in segments(out).items() if s == seg]
            in_completion = [v for v in completed_order if v in records]
            assert [v for v in out if v in records] == in_completion


# --------------------------------------------------------------------------- capacity, state


@pytest.mark.parametrize("queue_class", [OrderedResultQueue, UnorderedResultQueue])
def test_capacity_counts_requests_until_they_are_emitted(queue_class) -> None:
    q = queue_class(2)
    a = q.add_record("a", None)
    assert not q.is_full
    b = q.add_record("b", None)
    q.add_watermark(3)  # watermarks do not take capacity
    assert q.is_full and q.in_flight == 2
    q.complete(b, [])
    q.pop_ready()
    # ordered: b is done but waits behind a, so it still takes its place
    assert q.is_full == (queue_class is OrderedResultQueue)
    q.complete(a, [])
    q.pop_ready()
    assert q.in_flight == 0 and not q.is_full and q.is_empty
    with pytest.raises(ValueError, match="capacity"):
        queue_class(0)


@pytest.mark.parametrize("queue_class", [OrderedResultQueue, UnorderedResultQueue])
def test_a_checkpoint_stores_every_request_not_emitted_and_the_watermarks_between(
    queue_class,
) -> None:
    q = queue_class(10)
    a = q.add_record("a", 1)
    q.add_watermark(2)
    b = q.add_record("b", 3)
    c = q.add_record("c", 4)
    q.complete(c, ["done but not emitted"])
    elements = q.elements()
    assert elements[:2] == [("record", "a", 1), ("watermark", 2)]
    assert sorted(elements[2:]) == [("record", "b", 3), ("record", "c", 4)]
    q.complete(a, [])
    q.pop_ready()  # a and the watermark leave; so does c in unordered mode
    left = q.elements()
    expected = [("record", "b", 3)]
    if queue_class is OrderedResultQueue:
        expected.append(("record", "c", 4))
    assert left == expected
    q.complete(b, [])
    q.pop_ready()
    assert q.elements() == []


# --------------------------------------------------------------------------- retries


def test_no_strategy_never_retries() -> None:
    assert retry_delay_ms(None, 1, [], None) is None
    assert retry_delay_ms(NO_RETRY_STRATEGY, 1, None, ValueError("x")) is None


def test_fixed_delay_retries_matching_results_and_exceptions_up_to_max_attempts() -> None:
    strategy = AsyncRetryStrategy.fixed_delay(
        max_attempts=2,
        backoff_time_millis=50,
        result_predicate=empty_result_predicate,
        exception_predicate=has_exception_predicate,
    )
    assert retry_delay_ms(strategy, 1, [], None) == 50
    assert retry_delay_ms(strategy, 1, [1], None) is None  # a good result is final
    assert retry_delay_ms(strategy, 2, None, OSError("down")) == 50
    # as in Flink, can_retry(n) is n <= max_attempts: at most max_attempts + 1 invocations
    assert retry_delay_ms(strategy, 3, [], None) is None
    assert retry_delay_ms(strategy, 3, None, OSError("down")) is None


def test_predicates_decide_which_outcomes_are_retried() -> None:
    only_timeouts = (
        AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(5, 10)
        .if_exception(AsyncRetryPredicates.exception_type_predicate(TimeoutError))
        .build()
    )
    assert retry_delay_ms(only_timeouts, 1, None, TimeoutError()) == 10
    assert retry_delay_ms(only_timeouts, 1, None, ValueError()) is None
    assert retry_delay_ms(only_timeouts, 1, [], None) is None  # no result predicate


def test_exponential_backoff_grows_by_the_multiplier_up_to_the_maximum() -> None:
    strategy = ExponentialBackoffDelayRetryStrategy(
        10, 100, 1000, 2.0, result_predicate=AsyncRetryPredicates.EMPTY_RESULT_PREDICATE
    )
    delays = [retry_delay_ms(strategy, n, [], None) for n in range(1, 8)]
    assert delays == [100, 200, 400, 800, 1000, 1000, 1000]
    # a function of the attempt alone: the same for every request, in any interleaving
    assert retry_delay_ms(strategy, 2, [], None) == 200
    with pytest.raises(ValueError, match="multiplier"):
        ExponentialBackoffDelayRetryStrategy(3, 100, 1000, 0)
