"""The buffer timeout's decisions (runtime/buffer_timeout.py) on a scripted clock: when a
subtask sends partly filled output buffers, and how long it may wait idle."""

from __future__ import annotations

import pytest

from tidegate.datastream import StreamExecutionEnvironment
from tidegate.runtime.buffer_timeout import IDLE_POLL_S, BufferTimeout, check_millis


def test_a_positive_timeout_flushes_once_it_passed_since_the_last_flush():
    timeout = BufferTimeout.of_millis(10)
    assert timeout.timeout_s == 0.010
    assert not timeout.flush_due(now=100.009, last_flush=100.0)
    assert timeout.flush_due(now=100.010, last_flush=100.0)
    assert timeout.flush_due(now=105.0, last_flush=100.0)
    assert timeout.flush_when_idle
    assert timeout.idle_wait_s == 0.010


def test_zero_flushes_after_every_batch_and_does_not_spin_when_idle():
    timeout = BufferTimeout.of_millis(0)
    assert timeout.flush_due(now=100.0, last_flush=100.0)
    assert timeout.flush_when_idle
    assert timeout.idle_wait_s == IDLE_POLL_S > 0


def test_minus_one_flushes_only_full_buffers():
    timeout = BufferTimeout.of_millis(-1)
    assert timeout.timeout_s is None
    assert not timeout.flush_due(now=1e9, last_flush=0.0)
    assert not timeout.flush_when_idle
    assert timeout.idle_wait_s == IDLE_POLL_S


@pytest.mark.parametrize("bad", [-2, -100, 1.5, "10", True, None])
def test_a_bad_timeout_is_refused_with_what_is_allowed(bad):
    with pytest.raises(ValueError, match=r"milliseconds >= 0, or -1 to send buffers only when"):
        check_millis(bad)


def test_valid_timeouts_pass_unchanged():
    assert [check_millis(ms) for ms in (-1, 0, 1, 100)] == [-1, 0, 1, 100]


def test_the_environment_takes_flinks_values_and_refuses_others():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_buffer_timeout() == 10
    assert env.set_buffer_timeout(-1).get_buffer_timeout() == -1
    assert env.set_buffer_timeout(0).get_buffer_timeout() == 0
    with pytest.raises(ValueError, match=r"execution\.buffer-timeout"):
        env.set_buffer_timeout(-5)
