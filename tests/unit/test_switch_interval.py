"""The slots' GIL switch interval (runtime/switch_interval.py): set while a slot's subtasks run,
restored after (a Spark worker may run other tasks), and a bad setting refused when the job is
submitted."""

from __future__ import annotations

import sys

import pytest

from tidegate.common import Configuration
from tidegate.common.configuration import SWITCH_INTERVAL_US
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.runtime.switch_interval import switch_interval


def test_within_the_interval_is_the_setting_and_restored_after():
    before = sys.getswitchinterval()
    with switch_interval(500):
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == before


def test_restored_after_a_failure_too():
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), switch_interval(250):
        raise RuntimeError("a subtask failed")
    assert sys.getswitchinterval() == before


def test_zero_keeps_pythons_setting():
    before = sys.getswitchinterval()
    with switch_interval(0):
        assert sys.getswitchinterval() == before


def test_the_setting_reaches_the_job_and_a_negative_one_is_refused():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).print()
    assert env._job_spec("job").switch_interval_us == 500
    env.configure(Configuration().set_integer(SWITCH_INTERVAL_US, 0))
    assert env._job_spec("job").switch_interval_us == 0
    env.configure(Configuration().set_integer(SWITCH_INTERVAL_US, -1))
    with pytest.raises(ValueError, match=r"tidegate\.python\.switch-interval-us must be 0"):
        env._job_spec("job")
