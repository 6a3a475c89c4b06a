"""Jobs with timers for the end-to-end tests, and the reference checks of their output.

A record is an int `v`. The source runs at a fixed rate with one subtask, so values arrive in
order: the first `real` values set timers, the `padding` values after them set none and only
keep the job running, so that every processing-time timer is due before the end of input
(pending processing-time timers do not fire at the end of input, as in Flink).

Each firing emits one line `domain,key,timestamp,count,ok,subtask,parallelism`: `count` is the
key's keyed state read inside on_timer, `ok` says the timer's clock had reached its timestamp.
Failures are planned per job attempt (`FailurePlan`): an exception or a `kill -9` of the worker
at a given record (after its timer was registered) or at a given firing (after its timer left
the state, before its output was committed).
"""

from __future__ import annotations

import collections
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.jobs import InjectedFailure
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tidegate.datastream import KeyedProcessFunction, StreamExecutionEnvironment, TimeDomain
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.state.keygroups import assign_to_key_group, subtask_for_key_group

MAX_WATERMARK = 2**63 - 1


@dataclass(frozen=True)
class FailurePlan:
    """What fails in each job attempt: `{attempt: (how, where, at)}` with how in ("raise",
    "kill"), where in ("record", "timer") and `at` a record value or a firing timer's key."""

    steps: dict[int, tuple[str, str, int]] = field(default_factory=dict)

    def fire(self, attempt: int, where: str, at: int) -> None:
        step = self.steps.get(attempt)
        if step is None or step[1:] != (where, at):
            return
        if step[0] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFailure(f"planned failure in attempt {attempt} at {where} {at}")


class TimerJob(KeyedProcessFunction):
    """Counts each key's records; for the first `real` values, sets the timers of `domains`:
    an event-time timer at the value, and/or a processing-time timer `delay_ms` ahead."""

    def __init__(self, real: int, domains: tuple[str, ...], delay_ms: int, plan: FailurePlan):
        self.real = real
        self.domains = domains
        self.delay_ms = delay_ms
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.attempt = runtime_context.get_attempt_number()
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        if value >= self.real:
            return
        timers = ctx.timer_service()
        if "event" in self.domains:
            timers.register_event_time_timer(value)
            timers.register_event_time_timer(value)  # the same timer: it fires once
        if "processing" in self.domains:
            timers.register_processing_time_timer(timers.current_processing_time() + self.delay_ms)
        self.plan.fire(self.attempt, "record", value)

    def on_timer(self, timestamp, ctx):
        key = ctx.get_current_key()
        self.plan.fire(self.attempt, "timer", key)
        timers = ctx.timer_service()
        if ctx.time_domain() is TimeDomain.EVENT_TIME:
            domain, ok = "E", timers.current_watermark() == MAX_WATERMARK
        else:
            domain, ok = "P", timers.current_processing_time() >= timestamp
        ts = timestamp if domain == "E" else 0  # processing-time stamps differ per attempt
        yield (
            f"{domain},{key},{ts},{self.count.value()},{int(ok)},{self.subtask},{self.parallelism}"
        )


def timer_job(
    out: Path,
    checkpoints: Path,
    *,
    real: int,
    padding: int,
    rate: float,
    domains: tuple[str, ...],
    delay_ms: int = 300,
    parallelism: int = 2,
    plan: FailurePlan | None = None,
    restore_path: str | None = None,
    interval_ms: int = 200,
    runner: str = "spark",
    state_backend: Any = None,
) -> StreamExecutionEnvironment:
    """numbers (1 subtask, `rate`/s) -> key_by(v) -> TimerJob (uid `timers`, `parallelism`)
    -> FileSink (2 subtasks), exactly-once checkpoints every `interval_ms`, on `state_backend`
    (None: the default, hashmap)."""
    env = job_environment(runner, checkpoints, interval_ms=interval_ms, restore_path=restore_path)
    if state_backend is not None:
        env.set_state_backend(state_backend)
    source = DataGeneratorSource(lambda i: i, count=real + padding, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(1)
    function = TimerJob(real, domains, delay_ms, plan or FailurePlan())
    ds = ds.key_by(lambda v: v).process(function).uid("timers").set_parallelism(parallelism)
    ds.sink_to(file_sink(out)).uid("sink").set_parallelism(2)
    return env


@dataclass(frozen=True)
class Firing:
    domain: str
    key: int
    timestamp: int
    count: int
    ok: bool
    subtask: int
    parallelism: int


def firings(out: Path) -> list[Firing]:
    result = []
    for line in committed_lines(out):
        d, key, ts, count, ok, subtask, p = line.split(",")
        result.append(Firing(d, int(key), int(ts), int(count), ok == "1", int(subtask), int(p)))
    return result


def check_fired_exactly_once(fired: list[Firing], real: int, domains: tuple[str, ...]) -> None:
    """Every timer of the reference set (one per real value and domain) fired exactly once,
    after its time, with its key's state (one record per key), on the subtask that owns its
    key's key group (max parallelism 128, the default for these parallelisms)."""
    expected = {(d[0].upper(), v) for d in domains for v in range(real)}
    seen = collections.Counter((f.domain, f.key) for f in fired)
    duplicated = sorted(t for t, n in seen.items() if n > 1)
    lost = sorted(expected - set(seen))
    extra = sorted(set(seen) - expected)
    assert (lost[:10], duplicated[:10], extra[:10]) == ([], [], []), (
        f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unexpected"
    )
    for f in fired:
        assert f.count == 1 and f.ok, f
        assert f.domain == "P" or f.timestamp == f.key, f
        kg = assign_to_key_group(f.key, 128)
        assert subtask_for_key_group(kg, f.parallelism, 128) == f.subtask, f
