"""The Nexmark end-to-end job: every query on the same bounded stream of events, each query's
result to its own exactly-once FileSink, with failures injected; and the checks of each
query's committed output against bench/nexmark/reference.py."""

from __future__ import annotations

import ast
import collections
import os
import signal
from pathlib import Path
from typing import Any

from bench.nexmark.generator import NexmarkConfig, NexmarkGenerator
from bench.nexmark.measure import ALL_QUERIES, reference_of
from bench.nexmark.queries import events_stream
from bench.nexmark.source import NexmarkSource
from tests.e2e.jobs import InjectedFailure
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tidegate.datastream import MapFunction, StreamExecutionEnvironment

#: 1 000 events per second of event time: 30 000 events span 30 s, several 10 s windows
CONFIG = NexmarkConfig(first_event_rate=1_000)


class FailAt(MapFunction):
    """Identity; in job attempt `a`, `plan[a] = (how, event number)` fails the first subtask
    that reaches that event: "raise" an exception or "kill" its worker with SIGKILL."""

    def __init__(self, plan: dict[int, tuple[str, int]]) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.step = self.plan.get(runtime_context.get_attempt_number())

    def map(self, value: Any) -> Any:
        if self.step is not None:
            number = (value.date_time - CONFIG.base_time) * CONFIG.first_event_rate // 1000
            if number >= self.step[1]:
                if self.step[0] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise InjectedFailure(f"planned failure at event {number}")
        return value


def as_line(row: Any) -> str:
    return repr(tuple(row))


def nexmark_job(
    out: Path, checkpoints: Path, *, events: int, rate: float, plan: dict[int, tuple[str, int]]
) -> StreamExecutionEnvironment:
    """NexmarkSource (2 subtasks, `rate` events/s) -> FailAt -> every query and variant -> one
    FileSink each; exactly-once checkpoints every 200 ms."""
    env = job_environment("spark", checkpoints, restarts=len(plan) + 1)
    source = NexmarkSource(count=events, records_per_second=rate, config=CONFIG)
    stream = events_stream(env, source).map(FailAt(plan)).uid("fail-at")
    for name, query in ALL_QUERIES.items():
        line = query(stream).map(as_line).uid(f"{name}-line")
        line.sink_to(file_sink(out / name)).uid(f"{name}-sink")
    return env


def committed_rows(out: Path) -> list[tuple]:
    return [ast.literal_eval(line) for line in committed_lines(out)]


def expected_rows(events: int) -> dict[str, list[tuple]]:
    """Per query (and variant, e.g. q5-timers), the reference's rows over the same events."""
    generated = NexmarkGenerator(CONFIG).events(0, events)
    return {name: [tuple(r) for r in reference_of(name)(generated)] for name in ALL_QUERIES}


def check_query(name: str, rows: list[tuple], expected: list[tuple]) -> None:
    """The committed rows are the reference's, as multisets. For q4 (running averages, whose
    intermediate values depend on the order auctions close in): each category's rows count
    1, 2, ..., n auctions exactly once, and the last one's average is the reference's."""
    assert expected, f"{name}: the reference is empty; the run is too small to check anything"
    if name.startswith("q4"):
        counts = collections.Counter((category, n) for category, _, n in rows)
        assert counts == collections.Counter((c, n) for c, _, n in expected), name
        final = {c: (avg, n) for c, avg, n in rows if n == counts_of(c, counts)}
        assert final == {c: (avg, n) for c, avg, n in expected if n == counts_of(c, counts)}
        return
    got, want = collections.Counter(rows), collections.Counter(expected)
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{name}: {sum(missing.values())} rows missing (e.g. {list(missing)[:3]}), "
        f"{sum(extra.values())} unexpected (e.g. {list(extra)[:3]})"
    )


def counts_of(category: int, counts: collections.Counter) -> int:
    return max(n for c, n in counts if c == category)
