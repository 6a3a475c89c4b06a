"""Waiting for something to happen, never for ever: every wait has a timeout, and a wait that
fails says what did not happen (and, when it watches a job, whether the job ended first)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

T = TypeVar("T")

#: how long a test waits for an event of a running job before it gives up (seconds)
DEFAULT_TIMEOUT_S = 120.0


def wait_until(
    predicate: Callable[[], T],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    job=None,
    interval: float = 0.02,
) -> T:
    """Poll `predicate()` until it returns something true, and return that.

    Raises an AssertionError naming `what` (the event waited for, e.g. "two checkpoints
    completed") when `timeout` seconds passed, or, if `job` (a JobClient) is given, as soon as
    that job ended without `predicate()` holding."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if job is not None and job.jobmaster.done.is_set():
            jm = job.jobmaster
            raise AssertionError(f"the job ended ({jm.status.name}: {jm.error}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(interval)


def wait_for_checkpoints(job, count: int = 1, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Until `job` (a JobClient) is RUNNING and completed `count` more checkpoints than when
    called: the event a test waits for before it injects a fault, stops or cancels the job."""
    jm = job.jobmaster
    target = jm.stats.completed_checkpoints + count
    wait_until(
        lambda: jm.status.name == "RUNNING" and jm.stats.completed_checkpoints >= target,
        f"{count} more checkpoint(s) completed",
        timeout=timeout,
        job=job,
    )


def resolved(future: Future[T], what: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> T:
    """`future.result()` (its value, or its exception raised), but an AssertionError naming
    `what` (e.g. "the job to finish") when the future is still pending after `timeout` s."""
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None


def wait_for_end(job, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Until `job` (a JobClient) has ended, whatever its final status; an AssertionError naming
    the status it is still in after `timeout` s."""
    jm = job.jobmaster
    if not jm.done.wait(timeout):
        raise AssertionError(f"the job did not end within {timeout:g} s (still {jm.status.name})")
