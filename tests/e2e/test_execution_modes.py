"""RuntimeExecutionMode end to end, on both runners: BATCH emits only final results (rolling
reduce, timers, windows) that equal a STREAMING run's final results and a reference computed
here; BATCH refuses unbounded sources; AUTOMATIC picks BATCH for bounded jobs; a failure in
BATCH restarts from the start and still commits every result exactly once; a second
`execute()` runs only what was added after the first."""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tests.support.waiting import resolved
from tidegate.common import (
    Duration,
    RestartStrategies,
    TimestampAssigner,
    WatermarkStrategy,
)
from tidegate.datastream import (
    KeyedProcessFunction,
    MapFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.window import TumblingEventTimeWindows

cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB_TIMEOUT_S = 180
WORDS = (
    "to be or not to be that is the question whether tis nobler in the mind to suffer " * 5
).split()
COUNTS = collections.Counter(WORDS)


def _env(runner: str, tmp_path: Path, mode: str | None) -> StreamExecutionEnvironment:
    config = {} if mode is None else {"execution.runtime-mode": mode}
    return job_environment(runner, tmp_path / "chk", interval_ms=None, restarts=None, config=config)


def _word_count(env: StreamExecutionEnvironment):
    return (
        env.from_collection(WORDS)
        .map(lambda w: (w, 1))
        .key_by(lambda p: p[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )


def _printed(out: str) -> list[tuple[str, int]]:
    """The (word, count) records of print() lines `N> ('word', n)`."""
    records = []
    for line in out.splitlines():
        _prefix, _, text = line.partition("> ")
        records.append(eval(text))
    return records


@pytest.mark.parametrize("mode", ["BATCH", "batch", "AUTOMATIC"])
def test_a_batch_word_count_prints_only_each_words_final_count(runner, tmp_path, capsys, mode):
    env = _env(runner, tmp_path, mode)
    _word_count(env).print()
    env.execute("word count")
    assert sorted(_printed(capsys.readouterr().out)) == sorted(COUNTS.items())


def test_a_streaming_word_count_prints_every_rolling_count(runner, tmp_path, capsys):
    env = _env(runner, tmp_path, None)
    _word_count(env).print()
    env.execute("word count")
    rolling = [(w, n) for w, total in COUNTS.items() for n in range(1, total + 1)]
    assert sorted(_printed(capsys.readouterr().out)) == sorted(rolling)


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


class CountAtTheEnd(KeyedProcessFunction):
    """Counts per key; a processing-time timer an hour from now emits the count: in BATCH it
    fires at the end of the input."""

    def open(self, runtime_context) -> None:
        from tidegate.datastream.state import ValueStateDescriptor

        self.count = runtime_context.get_state(ValueStateDescriptor("count", None))

    def process_element(self, value, ctx):
        count = self.count.value()
        if count is None:  # the key's first element: one timer per key
            service = ctx.timer_service()
            service.register_processing_time_timer(service.current_processing_time() + 3_600_000)
        self.count.update((count or 0) + 1)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), self.count.value())


def test_batch_fires_processing_time_timers_at_the_end_of_the_input(runner, tmp_path, capsys):
    env = _env(runner, tmp_path, "BATCH")
    env.from_collection(WORDS).key_by(lambda w: w).process(CountAtTheEnd()).print()
    started = time.monotonic()
    env.execute("timers")
    assert time.monotonic() - started < 600  # not an hour: the timers fired at the end
    assert sorted(_printed(capsys.readouterr().out)) == sorted(COUNTS.items())


def _windowed_sums(env: StreamExecutionEnvironment) -> None:
    events = [(f"k{i % 3}", i * 100) for i in range(60)]  # event time 0 .. 5.9 s
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(50)
    ).with_timestamp_assigner(EventTime())
    (
        env.from_collection(events)
        .assign_timestamps_and_watermarks(strategy)
        .map(lambda e: (e[0], e[1] // 1000, 1))
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Duration.of_seconds(1)))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
        .print()
    )


def test_batch_windows_emit_the_same_final_results_as_streaming(runner, tmp_path, capsys):
    results = {}
    for mode in ("STREAMING", "BATCH"):
        env = _env(runner, tmp_path / mode, mode)
        _windowed_sums(env)
        env.execute(f"windows {mode}")
        results[mode] = sorted(_printed(capsys.readouterr().out))
    reference = collections.Counter((f"k{i % 3}", i * 100 // 1000) for i in range(60))
    assert results["BATCH"] == results["STREAMING"]
    assert results["BATCH"] == sorted((k, s, n) for (k, s), n in reference.items())


def test_batch_refuses_an_unbounded_source_and_says_what_to_do(tmp_path):
    env = _env("local", tmp_path, "BATCH")
    env.from_source(DataGeneratorSource(lambda i: i), None, "endless").print()
    with pytest.raises(ValueError) as e:
        env.execute("endless")
    assert "Source: endless" in str(e.value) and "unbounded" in str(e.value)
    assert "STREAMING" in str(e.value)


def test_automatic_mode_streams_a_job_with_an_unbounded_source(tmp_path):
    env = _env("local", tmp_path, "AUTOMATIC")
    env.from_source(DataGeneratorSource(lambda i: i), None, "endless").print()
    spec = env._job_spec("endless")
    assert not spec.graph.batch
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    with pytest.raises(ValueError, match="unbounded"):
        env._job_spec("endless")


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="use STREAMING, BATCH or AUTOMATIC"):
        RuntimeExecutionMode.parse("fast")


class FailOnce(MapFunction):
    """Raises at the 30th record of the first attempt (a marker file says it happened)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.seen == 30 and not os.path.exists(self.marker):
            Path(self.marker).touch()
            raise RuntimeError("injected failure")
        return value


def test_a_failure_in_batch_restarts_from_the_start_and_commits_each_count_once(runner, tmp_path):
    env = _env(runner, tmp_path, "BATCH")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    out = tmp_path / "out"
    sink = file_sink(out)
    (
        env.from_collection(WORDS)
        .map(FailOnce(str(tmp_path / "failed")))
        .map(lambda w: (w, 1))
        .key_by(lambda p: p[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda p: f"{p[0]},{p[1]}")
        .sink_to(sink)
    )
    resolved(
        env.execute_async("failing batch").get_job_execution_result(),
        "the job to finish",
        timeout=JOB_TIMEOUT_S,
    )
    assert (tmp_path / "failed").exists()
    assert sorted(committed_lines(out)) == sorted(f"{w},{n}" for w, n in COUNTS.items())


def test_a_second_execute_runs_only_the_sinks_added_after_the_first(tmp_path, capsys):
    env = _env("local", tmp_path, None)
    numbers = env.from_collection([1, 2, 3])
    numbers.print("first")
    env.execute("first")
    numbers.map(lambda x: x * 10).print("second")
    env.execute("second")
    lines = capsys.readouterr().out.splitlines()
    first = sorted(int(line.split("> ")[1]) for line in lines if line.startswith("first"))
    second = sorted(int(line.split("> ")[1]) for line in lines if line.startswith("second"))
    assert (first, second) == ([1, 2, 3], [10, 20, 30])
