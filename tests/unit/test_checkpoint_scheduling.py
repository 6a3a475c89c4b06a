"""The manual scheduler used by coordinator tests, and the thread scheduler used in production."""

from __future__ import annotations

import threading

from tidegate.checkpoint.scheduling import ManualClock, ManualScheduler, ThreadScheduler


def test_the_manual_scheduler_runs_due_tasks_in_due_order_at_their_due_time():
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[tuple[str, float]] = []
    scheduler.schedule(2.0, lambda: ran.append(("b", clock.now())))
    scheduler.schedule(1.0, lambda: ran.append(("a", clock.now())))
    scheduler.schedule(2.0, lambda: ran.append(("c", clock.now())))  # same time: FIFO
    scheduler.advance(1.5)
    assert ran == [("a", 1.0)]
    assert clock.now() == 1.5
    scheduler.advance(10)
    assert ran == [("a", 1.0), ("b", 2.0), ("c", 2.0)]
    assert clock.now() == 11.5


def test_tasks_scheduled_by_a_running_task_run_within_the_same_advance():
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[float] = []

    def tick() -> None:
        ran.append(clock.now())
        scheduler.schedule(1.0, tick)

    scheduler.schedule(1.0, tick)
    scheduler.advance(3.0)
    assert ran == [1.0, 2.0, 3.0]
    assert scheduler.scheduled_delays == [1.0]


def test_a_cancelled_task_never_runs():
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[str] = []
    handle = scheduler.schedule(1.0, lambda: ran.append("x"))
    handle.cancel()
    scheduler.advance(5)
    assert ran == []
    assert scheduler.scheduled_delays == []


def test_a_task_with_zero_delay_runs_when_due_tasks_are_run():
    clock = ManualClock(start_s=100.0)
    scheduler = ManualScheduler(clock)
    ran: list[float] = []
    scheduler.schedule(0, lambda: ran.append(clock.now()))
    scheduler.run_due()
    assert ran == [100.0]
    assert clock.now_ms() == 100_000


def test_the_thread_scheduler_runs_tasks_in_due_order_and_survives_a_failing_task():
    scheduler = ThreadScheduler()
    try:
        ran: list[str] = []
        done = threading.Event()
        scheduler.schedule(0.02, lambda: ran.append("second"))
        scheduler.schedule(0.0, lambda: ran.append("first"))
        scheduler.schedule(0.01, lambda: 1 / 0)
        cancelled = scheduler.schedule(0.01, lambda: ran.append("cancelled"))
        cancelled.cancel()
        scheduler.schedule(0.03, done.set)
        assert done.wait(timeout=10)
        assert ran == ["first", "second"]
    finally:
        scheduler.shutdown()


def test_the_thread_scheduler_runs_nothing_after_shutdown():
    scheduler = ThreadScheduler()
    ran: list[str] = []
    scheduler.schedule(3600, lambda: ran.append("dropped"))
    scheduler.shutdown()
    scheduler.schedule(0, lambda: ran.append("late"))
    assert ran == []
    assert not scheduler._thread.is_alive()
