"""Consecutive-failure counting with Flink's semantics."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.failure_manager import CheckpointFailureManager


def manager(tolerable: int) -> tuple[CheckpointFailureManager, list[str]]:
    failures: list[str] = []
    return CheckpointFailureManager(tolerable, failures.append), failures


def test_with_zero_tolerable_failures_the_first_failure_fails_the_job():
    fm, failures = manager(0)
    fm.on_failure(1, "expired")
    assert len(failures) == 1
    assert "checkpoint 1" in failures[0] and "expired" in failures[0]


def test_with_two_tolerable_failures_the_third_in_a_row_fails_the_job():
    fm, failures = manager(2)
    fm.on_failure(1, "declined")
    fm.on_failure(2, "declined")
    assert failures == []
    fm.on_failure(3, "declined")
    assert len(failures) == 1


def test_a_success_resets_the_count():
    fm, failures = manager(2)
    fm.on_failure(1, "x")
    fm.on_failure(2, "x")
    fm.on_success(3)
    assert fm.consecutive_failures == 0
    fm.on_failure(4, "x")
    fm.on_failure(5, "x")
    assert failures == []


def test_a_failure_of_a_checkpoint_older_than_the_last_success_does_not_count():
    fm, failures = manager(0)
    fm.on_success(5)
    fm.on_failure(4, "expired late")
    fm.on_failure(5, "expired late")
    assert failures == []
    fm.on_failure(6, "expired")
    assert len(failures) == 1


def test_each_checkpoint_counts_once():
    fm, failures = manager(1)
    fm.on_failure(1, "declined by a")
    fm.on_failure(1, "declined by b")
    assert failures == []
    assert fm.consecutive_failures == 1


def test_failing_the_job_restarts_the_count():
    fm, failures = manager(1)
    for cid in range(1, 5):
        fm.on_failure(cid, "x")
    assert len(failures) == 2


def test_a_negative_tolerance_is_rejected():
    with pytest.raises(ValueError):
        manager(-1)
