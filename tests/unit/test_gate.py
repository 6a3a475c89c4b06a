"""InputGate: a subtask's inbox. Control messages are served before data; data is bounded, so a
producer blocks while the gate is full; closing wakes every blocked thread."""

from __future__ import annotations

import threading
import time

import pytest

from tidegate.runtime.gate import InputGate, TaskCancelledError

WAIT_S = 5.0


def in_thread(fn, *args):
    """Run `fn(*args)` on a daemon thread; returns (thread, outcome dict)."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = fn(*args)
        except BaseException as e:
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


def still_blocked(thread: threading.Thread, for_s: float = 0.2) -> bool:
    thread.join(for_s)
    return thread.is_alive()


def test_data_comes_out_in_fifo_order():
    gate = InputGate(10)
    for i in range(5):
        gate.put_data((0, [i]))
    assert [gate.get(0) for _ in range(5)] == [(False, (0, [i])) for i in range(5)]
    assert gate.get(0) is None


def test_control_messages_are_served_before_data_already_queued():
    gate = InputGate(10)
    gate.put_data((0, ["a"]))
    gate.put_data((1, ["b"]))
    gate.put_control("trigger-1")
    gate.put_control("trigger-2")
    got = [gate.get(0) for _ in range(4)]
    assert got == [
        (True, "trigger-1"),
        (True, "trigger-2"),
        (False, (0, ["a"])),
        (False, (1, ["b"])),
    ]


def test_control_messages_never_block_even_when_data_is_full():
    gate = InputGate(1)
    gate.put_data("x")
    for i in range(100):
        gate.put_control(i)  # would hang if control counted against the capacity
    assert gate.get(0) == (True, 0)


def test_a_full_gate_blocks_the_producer_until_a_get_frees_a_place():
    gate = InputGate(2)
    gate.put_data("d1")
    gate.put_data("d2")
    producer, outcome = in_thread(gate.put_data, "d3")
    assert still_blocked(producer), "put_data must block while the gate holds `capacity` items"
    assert gate.get(0) == (False, "d1")
    producer.join(WAIT_S)
    assert not producer.is_alive(), "a get must wake the blocked producer"
    assert outcome == {"value": None}
    assert [gate.get(0), gate.get(0)] == [(False, "d2"), (False, "d3")]


def test_a_control_get_does_not_free_a_data_place():
    gate = InputGate(1)
    gate.put_data("d1")
    gate.put_control("c")
    producer, _ = in_thread(gate.put_data, "d2")
    assert gate.get(0) == (True, "c")
    assert still_blocked(producer)
    assert gate.get(0) == (False, "d1")
    producer.join(WAIT_S)
    assert not producer.is_alive()


def test_close_wakes_blocked_producers_with_task_cancelled():
    gate = InputGate(1)
    gate.put_data("d1")
    producers = [in_thread(gate.put_data, f"p{i}") for i in range(3)]
    for thread, _ in producers:
        assert still_blocked(thread, 0.05)
    started = time.monotonic()
    gate.close()
    for thread, outcome in producers:
        thread.join(WAIT_S)
        assert not thread.is_alive()
        assert isinstance(outcome.get("error"), TaskCancelledError)
    assert time.monotonic() - started < WAIT_S


def test_put_data_after_close_raises_task_cancelled():
    gate = InputGate(4)
    gate.close()
    with pytest.raises(TaskCancelledError):
        gate.put_data("late")


def test_close_wakes_a_consumer_blocked_in_get():
    gate = InputGate(4)
    consumer, outcome = in_thread(gate.get, 30.0)
    assert still_blocked(consumer, 0.1)
    gate.close()
    consumer.join(WAIT_S)
    assert not consumer.is_alive()
    assert outcome == {"value": None}


def test_get_on_a_closed_empty_gate_returns_none_at_once():
    gate = InputGate(4)
    gate.close()
    started = time.monotonic()
    assert gate.get(10.0) is None
    assert time.monotonic() - started < 1.0


def test_items_queued_before_close_can_still_be_taken():
    gate = InputGate(4)
    gate.put_control("cancel")
    gate.put_data("d")
    gate.close()
    assert gate.get(0) == (True, "cancel")
    assert gate.get(0) == (False, "d")


def test_get_times_out_with_none_when_nothing_arrives():
    gate = InputGate(4)
    started = time.monotonic()
    assert gate.get(0.1) is None
    elapsed = time.monotonic() - started
    assert 0.05 <= elapsed < WAIT_S


def test_get_with_zero_timeout_does_not_wait():
    gate = InputGate(4)
    waits: list[float | None] = []
    gate._not_empty.wait = waits.append  # counts the waits (none may happen)
    assert gate.get(0) is None
    assert waits == []


def test_a_waiting_get_returns_what_arrives_meanwhile():
    gate = InputGate(4)
    consumer, outcome = in_thread(gate.get, WAIT_S)
    time.sleep(0.05)
    gate.put_data((3, ["x"]))
    consumer.join(WAIT_S)
    assert outcome == {"value": (False, (3, ["x"]))}


def test_a_waiting_get_wakes_for_a_control_message():
    gate = InputGate(4)
    consumer, outcome = in_thread(gate.get, WAIT_S)
    time.sleep(0.05)
    gate.put_control("notify")
    consumer.join(WAIT_S)
    assert outcome == {"value": (True, "notify")}


def test_many_producers_and_one_consumer_lose_and_duplicate_nothing():
    gate = InputGate(3)
    n_producers, per_producer = 4, 500

    def produce(p):
        for i in range(per_producer):
            gate.put_data((p, i))

    threads = [in_thread(produce, p)[0] for p in range(n_producers)]
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n_producers * per_producer and time.monotonic() < deadline:
        item = gate.get(0.5)
        if item is not None:
            got.append(item[1])
    for t in threads:
        t.join(WAIT_S)
    assert sorted(got) == sorted((p, i) for p in range(n_producers) for i in range(per_producer))
    for p in range(n_producers):  # each producer's items stay in its order
        assert [i for q, i in got if q == p] == list(range(per_producer))
