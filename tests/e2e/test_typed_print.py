"""PyFlink-example-style programs with declared types print what Flink prints for them, on both
runners at parallelism 1 and 2: a count window's `Types.TUPLE` results as `(hi,9)`, a tumbling
event-time window's as `(hi,0,5,4)`, a `Types.ROW_NAMED` map reading `row.name` and `row[1]`
as `+I[ALICE,12]`, Rows of other kinds and nested types. Parallel sinks prefix `N> ` (after the
sink identifier); lines of different subtasks may interleave, so they are compared as
multisets. A record that does not match its declared type fails the job with an error naming
the operator and the type."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import cloudpickle
import pytest

from tests.support.environments import job_environment
from tests.support.waiting import resolved
from tidegate.common import (
    JobExecutionException,
    Row,
    RowKind,
    Time,
    Types,
    WatermarkStrategy,
)
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.datastream import (
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    WindowFunction,
)
from tidegate.datastream.window import TumblingEventTimeWindows

cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB_TIMEOUT_S = 180


class SumWindowFunction(WindowFunction):
    """PyFlink's tumbling_count_window.py: the sum of the first fields of a window."""

    def apply(self, key, window, inputs):
        result = 0
        for i in inputs:
            result += i[0]
        return [(key, result)]


class CountWindowProcessFunction(ProcessWindowFunction):
    """PyFlink's tumbling_time_window.py: key, window start and end, number of elements."""

    def process(self, key, context, elements):
        return [(key, context.window().start, context.window().end, len([e for e in elements]))]


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(value[1])


def _older(row: Row) -> Row:
    return Row(name=row.name.upper(), next_age=row[1] + 1)


def _kinds(row: Row) -> Row:
    changed = Row(row.name, row[1] * 0.5)
    changed.set_row_kind(RowKind.UPDATE_AFTER if row[1] > 11 else RowKind.DELETE)
    return changed


def _env(runner: str, tmp_path: Path, parallelism: int) -> StreamExecutionEnvironment:
    return job_environment(
        runner, tmp_path / "chk", parallelism=parallelism, interval_ms=None, restarts=None
    )


def _build_examples(env: StreamExecutionEnvironment) -> None:
    counted = env.from_collection(
        [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")],
        type_info=Types.TUPLE([Types.INT(), Types.STRING()]),
    )
    counted.key_by(lambda x: x[1], key_type=Types.STRING()).count_window(3).apply(
        SumWindowFunction(), Types.TUPLE([Types.STRING(), Types.INT()])
    ).print("count")

    timed = env.from_collection(
        [("hi", t) for t in (1, 2, 3, 4, 5, 8, 9, 15)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT()]),
    ).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    )
    timed.key_by(lambda x: x[0], key_type=Types.STRING()).window(
        TumblingEventTimeWindows.of(Time.milliseconds(5))
    ).process(
        CountWindowProcessFunction(),
        Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()]),
    ).print("tumbling")

    people = env.from_collection(
        [("alice", 11), ("bob", 12)],
        type_info=Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]),
    )
    people.map(
        _older, output_type=Types.ROW_NAMED(["name", "next_age"], [Types.STRING(), Types.INT()])
    ).print("people")
    people.map(_kinds, output_type=Types.ROW([Types.STRING(), Types.DOUBLE()])).print("kinds")
    people.map(
        lambda row: (row.name, [row.age, None], Row(row.age > 11, {"k": row.age / 4})),
        output_type=Types.TUPLE(
            [
                Types.STRING(),
                Types.LIST(Types.LONG()),
                Types.ROW([Types.BOOLEAN(), Types.MAP(Types.STRING(), Types.DOUBLE())]),
            ]
        ),
    ).print("nested")
    people.map(lambda row: (row.name, row.age)).print("untyped")


# What Flink prints for each sink (payload after the prefix).
EXPECTED = {
    "count": ["(hi,9)", "(hello,12)"],
    "tumbling": ["(hi,0,5,4)", "(hi,5,10,3)", "(hi,15,20,1)"],
    "people": ["+I[ALICE,12]", "+I[BOB,13]"],
    "kinds": ["-D[alice,5.5]", "+U[bob,6.0]"],
    "nested": ["(alice,[11, null],+I[false, {k=2.75}])", "(bob,[12, null],+I[true, {k=3.0}])"],
    "untyped": ["('alice', 11)", "('bob', 12)"],
}


@pytest.mark.parametrize("parallelism", [1, 2])
def test_pyflink_style_typed_programs_print_what_flink_prints(
    runner, tmp_path, capsys, parallelism
):
    env = _env(runner, tmp_path, parallelism)
    _build_examples(env)
    resolved(
        env.execute_async("typed print").get_job_execution_result(),
        "the job to finish",
        timeout=JOB_TIMEOUT_S,
    )
    lines = capsys.readouterr().out.splitlines()

    pattern = r"(?P<id>\w+)> (?P<payload>.*)"
    if parallelism > 1:
        pattern = r"(?P<id>\w+):(?P<n>[12])> (?P<payload>.*)"
    printed: dict[str, list[str]] = {}
    subtasks: dict[str, set[str]] = {}
    for line in lines:
        m = re.fullmatch(pattern, line)
        assert m, f"an unexpected line {line!r} in\n" + "\n".join(lines)
        printed.setdefault(m["id"], []).append(m["payload"])
        if parallelism > 1:
            subtasks.setdefault(m["id"], set()).add(m["n"])
    assert {k: Counter(v) for k, v in printed.items()} == {
        k: Counter(v) for k, v in EXPECTED.items()
    }
    if parallelism > 1:
        # the maps after the one-subtask collection source are rebalanced over both subtasks
        assert subtasks["people"] == {"1", "2"}


def test_a_record_that_does_not_match_its_declared_type_fails_the_job_naming_the_operator(
    runner, tmp_path
):
    env = _env(runner, tmp_path, 1)
    env.from_collection(["a", "b"]).map(str.upper, output_type=Types.INT()).name("Upper").print()
    with pytest.raises(JobExecutionException) as failure:
        resolved(
            env.execute_async("mistyped").get_job_execution_result(),
            "the job to finish",
            timeout=JOB_TIMEOUT_S,
        )
    message = str(failure.value)
    assert "RecordTypeError" in message and "'Upper'" in message
    assert "'A' (str) does not match Integer: expected an int" in message
