"""Windows end to end on Spark: keyed tumbling, sliding, session and count windows and
window_all in one exactly-once job, with an exception and two kill -9 injected while windows
fire; late data to a side output across a failure. Every window's result is compared with a
reference computation: each window exactly once, none lost, none extra."""

from __future__ import annotations

import collections

from tests.e2e.jobs import committed_lines
from tests.e2e.window_jobs import (
    FailurePlan,
    check_windows_exactly_once,
    expected_late_lines,
    late_data_job,
    window_job,
)


def test_keyed_and_all_windows_are_exactly_once_across_an_exception_and_two_kills(spark, tmp_path):
    n = 6_000
    plan = FailurePlan(
        {
            0: ("raise", "T", 6_000),  # tumbling window [6000, 6200) fires: an exception
            1: ("kill", "S", 9_000),  # sliding window [9000, 9300) fires: kill -9
            2: ("kill", "E", 12_000),  # key 0's session of block 8 fires: kill -9
        }
    )
    env = window_job(tmp_path / "out", tmp_path / "chk", n=n, rate=2_000, plan=plan)
    client = env.execute_async("windows")
    client.get_job_execution_result().result()
    assert client.jobmaster.stats.restarts == 3
    check_windows_exactly_once(committed_lines(tmp_path / "out"), n)


def test_late_elements_go_to_the_side_output_exactly_once_across_a_failure(spark, tmp_path):
    n = 5_000
    plan = FailurePlan({0: ("raise", "T", 3_000)})
    env = late_data_job(tmp_path / "out", tmp_path / "chk", n=n, rate=1_000, plan=plan)
    client = env.execute_async("late data")
    client.get_job_execution_result().result()
    assert client.jobmaster.stats.restarts == 1
    got = collections.Counter(committed_lines(tmp_path / "out"))
    expected = expected_late_lines(n)
    assert sum(1 for line in got if line.startswith("L,")) == (n - 3_000) // 50
    assert got == expected
