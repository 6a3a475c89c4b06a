"""The job of tests/e2e/test_poison_records.py (its functions must be importable by workers)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.timer_jobs import FailurePlan
from tests.support.environments import file_sink, job_environment
from tidegate.datastream import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.dead_letters import DEAD_LETTERS
from tidegate.datastream.state import ValueStateDescriptor

N = 3_000


def message(i: int) -> str:
    """Every 37th message is malformed, every 101st empty."""
    if i % 101 == 0:
        return ""
    return f"#{i}" if i % 37 == 0 else str(i)


class Parse(MapFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value: str) -> int:
        parsed = int(value)
        self.plan.fire(self.attempt, "record", parsed)  # a kill: not a dead letter
        return parsed


class Count(KeyedProcessFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.attempt = runtime_context.get_attempt_number()

    def process_element(self, value, ctx):
        self.plan.fire(self.attempt, "record", value)  # an exception: fails the job
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value},{count}"


def dead_letter_job(
    tmp_path: Path, parse_plan: FailurePlan, count_plan: FailurePlan
) -> StreamExecutionEnvironment:
    """messages (datagen, N at 3,000/s) -> Parse (DEAD_LETTERS read) -> key_by -> Count ->
    FileSink `out` (the values); the dead letters -> FileSink `dead` (record|type|operator)."""
    env = job_environment("spark", tmp_path / "chk", interval_ms=200)
    source = DataGeneratorSource(message, count=N, records_per_second=3_000)
    raw = env.from_source(source, None, "messages").uid("messages")
    parsed = raw.map(Parse(parse_plan)).uid("parse").name("Parse")
    dead = parsed.get_side_output(DEAD_LETTERS)
    dead.map(describe).sink_to(file_sink(tmp_path / "dead")).uid("dead-sink")
    counted = parsed.key_by(seventh).process(Count(count_plan)).uid("count")
    counted.map(value_of).sink_to(file_sink(tmp_path / "out")).uid("sink")
    return env


def describe(letter) -> str:
    return f"{letter.record!r}|{letter.error_type}|{letter.operator}"


def seventh(value: int) -> int:
    return value % 7


def value_of(line: str) -> str:
    return line.split(",")[0]
