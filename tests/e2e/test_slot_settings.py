"""The Python settings a slot applies while its subtasks run reach the user's functions on both
runners: the GIL switch interval (default 500 us, or as configured)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from tests.support.environments import job_environment

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("configured_us", [None, 2000])
def test_user_functions_run_with_the_slots_switch_interval(runner, capsys, configured_us):
    key = "tidegate.python.switch-interval-us"
    config = {} if configured_us is None else {key: str(configured_us)}
    env = job_environment(runner, None, interval_ms=None, restarts=None, config=config)
    env.from_collection(list(range(20))).map(lambda _: sys.getswitchinterval()).print()
    env.execute("switch interval")
    printed = {float(line.partition("> ")[2]) for line in capsys.readouterr().out.splitlines()}
    expected = (500 if configured_us is None else configured_us) / 1e6
    assert len(printed) == 1 and printed.pop() == pytest.approx(expected)
