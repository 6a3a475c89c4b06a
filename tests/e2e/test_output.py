"""Output where the user looks: `print()` in user functions and `DataStream.print()` reach the
driver's stdout (not the worker's, which Spark sends to the executor log), whole lines, in order
per subtask, with Flink's `N> ` prefixes; worker `logging` records reach the driver's logging
naming the subtask; text a worker wrote before it was killed is not lost. On both runners."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from pathlib import Path

import cloudpickle

from tests.support.environments import job_environment
from tests.support.waiting import resolved
from tidegate.common import RestartStrategies
from tidegate.datastream import MapFunction, StreamExecutionEnvironment

cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB_TIMEOUT_S = 180
VALUES = list(range(1, 41))


def _env(runner: str, tmp_path: Path) -> StreamExecutionEnvironment:
    return job_environment(runner, tmp_path / "chk", parallelism=2, interval_ms=None, restarts=None)


class Announce(MapFunction):
    """Prints every value it sees with its subtask; logs a warning at 7."""

    def open(self, runtime_context) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        print(f"saw {value} in {self.subtask}")
        if value == 7:
            logging.getLogger("tidegate.test.user").warning("seven is here")
        return value * 10


def _per_prefix(lines: list[str], pattern: str) -> dict[str, list[int]]:
    """The numbers of the lines matching `pattern` (named groups `key` and `n`) by key."""
    found: dict[str, list[int]] = {}
    for line in lines:
        m = re.fullmatch(pattern, line)
        if m:
            found.setdefault(m["key"], []).append(int(m["n"]))
    return found


def test_print_and_the_print_sink_reach_the_drivers_stdout_in_order_per_subtask(
    runner, tmp_path, capsys, caplog
):
    env = _env(runner, tmp_path)
    mapped = env.from_collection(VALUES).map(Announce())
    mapped.print()
    mapped.map(lambda v: v + 1).print("plus")
    with caplog.at_level(logging.WARNING, logger="tidegate.test.user"):
        resolved(
            env.execute_async("printing").get_job_execution_result(),
            "the job to finish",
            timeout=JOB_TIMEOUT_S,
        )
    out, err = capsys.readouterr()
    lines = out.splitlines()

    saw = _per_prefix(lines, r"saw (?P<n>\d+) in (?P<key>\d)")
    printed = _per_prefix(lines, r"(?P<key>[12])> (?P<n>\d+)")
    plus = _per_prefix(lines, r"plus:(?P<key>[12])> (?P<n>\d+)")
    # every line is one of them: nothing mixed, nothing else
    assert len(lines) == 3 * len(VALUES), out
    assert sorted(v for vs in saw.values() for v in vs) == VALUES
    assert sorted(v for vs in printed.values() for v in vs) == [v * 10 for v in VALUES]
    assert sorted(v for vs in plus.values() for v in vs) == [v * 10 + 1 for v in VALUES]
    # each subtask's lines keep the order it wrote them in (its part of the collection)
    for numbers in (*saw.values(), *printed.values(), *plus.values()):
        assert numbers == sorted(numbers)
    # the N> prefix names the subtask that printed (subtask index + 1)
    for subtask, numbers in saw.items():
        assert printed[str(int(subtask) + 1)] == [v * 10 for v in numbers]
    assert "saw " not in err and "> " not in err

    [record] = [r for r in caplog.records if r.name == "tidegate.test.user"]
    assert record.levelno == logging.WARNING
    assert re.fullmatch(r"\[Map -> .* \([12]/2\)\] seven is here", record.getMessage())
    assert record.subtask in record.getMessage()


class DieMidLine(MapFunction):
    """Writes half a line, then kills its own worker with SIGKILL, once (a marker file says
    whether it happened)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def open(self, runtime_context) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        if value == 5 and not os.path.exists(self.marker):
            sys.stdout.write(f"half a line from {self.subtask}")
            sys.stdout.flush()
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        print(f"saw {value}")
        return value


def test_text_a_worker_wrote_before_it_was_killed_reaches_the_driver(runner, tmp_path, capsys):
    env = _env(runner, tmp_path)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    env.from_collection(VALUES).map(DieMidLine(str(tmp_path / "killed"))).print()
    resolved(
        env.execute_async("dying").get_job_execution_result(),
        "the job to finish",
        timeout=JOB_TIMEOUT_S,
    )
    lines = capsys.readouterr().out.splitlines()
    half = [line for line in lines if line.startswith("half a line")]
    assert len(half) == 1 and re.fullmatch(r"half a line from [01]", half[0]), lines
    # the restarted attempt printed every value (print is not transactional: the first
    # attempt's lines before the kill may repeat)
    assert {int(line[4:]) for line in lines if line.startswith("saw ")} == set(VALUES)
