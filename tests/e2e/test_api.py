"""The DataStream API end to end, on both runners: every source, transformation, partitioning
and state kind, compared exactly with a reference computed in plain Python; the job client;
and the errors a user meets first."""

from __future__ import annotations

import collections
import glob
import os
import re
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_files, committed_lines
from tests.support.references import same_records
from tests.support.waiting import resolved, wait_until
from tidegate.common import (
    JobStatus,
    RestartStrategies,
    Types,
    WatermarkStrategy,
)
from tidegate.common.job_client import JobClient, JobExecutionException, JobExecutionResult
from tidegate.datastream import (
    AggregateFunction,
    CheckpointedFunction,
    CheckpointListener,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import (
    FileSource,
    StreamFormat,
)
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

# Pytest imports this file as a top-level module the slot processes cannot import, so the
# functions and classes defined here travel to them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB_TIMEOUT_S = 180


# helpers ------------------------------------------------------------------------------------
def make_env(runner: str, tmp_path: Path, parallelism: int = 2) -> StreamExecutionEnvironment:
    """This file's environment: checkpoint storage under tmp_path, but no checkpoints and the
    default restart strategy unless a test asks for them."""
    return job_environment(
        runner, tmp_path / "chk", parallelism=parallelism, interval_ms=None, restarts=None
    )


def run_to_files(env: StreamExecutionEnvironment, ds, out: Path, name: str = "test") -> list[str]:
    ds.map(str).sink_to(file_sink(out))
    env.execute(name)
    return committed_lines(out)


# sources ------------------------------------------------------------------------------------
def test_from_collection_emits_every_element_once(runner, tmp_path):
    env = make_env(runner, tmp_path)
    data = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, "x", (1, "a")]
    got = run_to_files(env, env.from_collection(data), tmp_path / "out")
    same_records(got, data)


def test_number_sequence_source_emits_each_number_of_its_inclusive_range(runner, tmp_path):
    env = make_env(runner, tmp_path)
    ds = env.from_source(NumberSequenceSource(-50, 1_000), None, "numbers")
    got = run_to_files(env, ds.map(lambda v: v * v), tmp_path / "out")
    same_records(got, [v * v for v in range(-50, 1_001)])


def test_data_generator_source_emits_the_function_of_each_index(runner, tmp_path):
    env = make_env(runner, tmp_path)
    ds = env.from_source(DataGeneratorSource(lambda i: f"event-{i}", count=777), None, "gen")
    got = run_to_files(env, ds, tmp_path / "out")
    same_records(got, [f"event-{i}" for i in range(777)])


def test_file_source_reads_every_line_of_every_visible_file_of_a_directory(runner, tmp_path):
    data = tmp_path / "input"
    (data / "nested").mkdir(parents=True)
    expected = []
    for name, n in [("a.txt", 120), ("b.txt", 1), ("nested/c.txt", 300), ("empty.txt", 0)]:
        lines = [f"{name}:{i}:{'é' * (i % 3)}" for i in range(n)]
        (data / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        expected.extend(lines)
    (data / "no-newline.txt").write_text("first\r\nlast without newline", encoding="utf-8")
    expected += ["first", "last without newline"]
    (data / ".hidden").write_text("skipped\n")
    (data / "_temporary").write_text("skipped\n")
    env = make_env(runner, tmp_path)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(data)).build()
    got = run_to_files(env, env.from_source(source, None, "files"), tmp_path / "out")
    same_records(got, expected)


def test_empty_sources_finish_and_commit_nothing(runner, tmp_path):
    env = make_env(runner, tmp_path)
    a = env.from_collection([])
    b = env.from_source(DataGeneratorSource(lambda i: i, count=0), None, "nothing")
    a.union(b).map(str).sink_to(file_sink(tmp_path / "out"))
    client = env.execute_async("empty")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert committed_lines(tmp_path / "out") == []


def test_more_subtasks_than_source_splits(runner, tmp_path):
    # 2 numbers, 2 files and 3 subtasks: some source subtasks hold no split and finish at once
    data = tmp_path / "input"
    data.mkdir()
    (data / "one.txt").write_text("x\n")
    (data / "two.txt").write_text("y\nz\n")
    env = make_env(runner, tmp_path, parallelism=3)
    numbers = env.from_source(NumberSequenceSource(7, 8), None, "numbers")
    files = env.from_source(
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(data)).build(),
        None,
        "files",
    )
    got = run_to_files(env, numbers.union(files), tmp_path / "out")
    same_records(got, [7, 8, "x", "y", "z"])


def test_from_source_rejects_what_is_not_a_source(tmp_path):
    env = make_env("local", tmp_path)
    with pytest.raises(TypeError, match="from_source expects a Source"):
        env.from_source([1, 2, 3], None, "list")


# map / flat_map / filter --------------------------------------------------------------------
def test_map_flat_map_and_filter_accept_plain_callables(runner, tmp_path):
    env = make_env(runner, tmp_path)
    ds = (
        env.from_source(NumberSequenceSource(0, 499), None, "numbers")
        .map(lambda v: v + 1)
        .flat_map(lambda v: [v, -v] if v % 2 else [v])
        .filter(lambda v: v % 3 != 0)
    )
    expected = [
        x for v in range(500) for x in ([v + 1, -(v + 1)] if (v + 1) % 2 else [v + 1]) if x % 3 != 0
    ]
    same_records(run_to_files(env, ds, tmp_path / "out"), expected)


def test_a_pyflink_style_program_with_type_hints_and_a_watermark_strategy(runner, tmp_path):
    env = make_env(runner, tmp_path)
    words = env.from_collection(["to be", "or not", "to be"], type_info=Types.STRING()).flat_map(
        lambda line: line.split(), output_type=Types.STRING()
    )
    counts = (
        words.map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda wc: wc[0], key_type=Types.STRING())
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    numbers = env.from_source(
        NumberSequenceSource(1, 3),
        WatermarkStrategy.no_watermarks(),
        "numbers",
        type_info=Types.LONG(),
    ).map(lambda v: ("n", v), output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
    got = run_to_files(env, counts.union(numbers), tmp_path / "out")
    word_counts = [("to", 1), ("be", 1), ("or", 1), ("not", 1), ("to", 2), ("be", 2)]
    same_records(got, [*word_counts, ("n", 1), ("n", 2), ("n", 3)])


def test_flat_map_may_return_a_generator_or_none(runner, tmp_path):
    def explode(v):
        if v % 4 == 0:
            return None
        return (f"{v}.{i}" for i in range(v % 4))

    env = make_env(runner, tmp_path)
    ds = env.from_source(NumberSequenceSource(0, 99), None, "numbers").flat_map(explode)
    expected = [f"{v}.{i}" for v in range(100) if v % 4 for i in range(v % 4)]
    same_records(run_to_files(env, ds, tmp_path / "out"), expected)


class Lifecycle:
    """Records open/close per subtask in files under `marks`, and which subtask ran a record."""

    def __init__(self, marks: str, tag: str) -> None:
        self.marks = marks
        self.tag = tag

    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()
        self.opened = True
        with open(os.path.join(self.marks, f"open-{self.tag}-{self.index}"), "a") as f:
            f.write(f"{self.parallelism};")

    def close(self) -> None:
        with open(os.path.join(self.marks, f"close-{self.tag}-{self.index}"), "a") as f:
            f.write("closed;")


class TagMap(Lifecycle, MapFunction):
    def map(self, value):
        assert self.opened, "map() before open()"
        return (value, self.index, self.parallelism)


class SplitFlatMap(Lifecycle, FlatMapFunction):
    def flat_map(self, value):
        v, map_index, map_p = value
        yield f"{v}|{map_index}/{map_p}|{self.index}/{self.parallelism}"
        if v % 10 == 0:
            yield f"{v}|extra"


class KeepEven(Lifecycle, FilterFunction):
    def filter(self, value):
        return int(value.split("|")[0]) % 2 == 0


def test_function_classes_are_opened_and_closed_once_per_subtask(runner, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = make_env(runner, tmp_path, parallelism=2)
    ds = (
        env.from_source(NumberSequenceSource(0, 999), None, "numbers")
        .map(TagMap(str(marks), "map"))
        .set_parallelism(3)
        .flat_map(SplitFlatMap(str(marks), "flat_map"))
        .set_parallelism(3)
        .filter(KeepEven(str(marks), "filter"))
        .name("keep even")
    )
    got = run_to_files(env, ds, tmp_path / "out")
    main = [line for line in got if "extra" not in line]
    extra = [line for line in got if "extra" in line]
    same_records(extra, [f"{v}|extra" for v in range(0, 1000, 10)])
    values = sorted(int(line.split("|")[0]) for line in main)
    assert values == list(range(0, 1000, 2))
    for line in main:
        _, map_part, flat_part = line.split("|")
        map_index, map_p = map(int, map_part.split("/"))
        assert map_p == 3 and 0 <= map_index < 3
        assert flat_part == map_part, "flat_map is chained to map: the same subtask"
    assert {line.split("|")[1] for line in main} == {"0/3", "1/3", "2/3"}
    for tag, p in [("map", 3), ("flat_map", 3), ("filter", 2)]:
        for i in range(p):
            assert (marks / f"open-{tag}-{i}").read_text() == f"{p};", (tag, i)
            assert (marks / f"close-{tag}-{i}").read_text() == "closed;", (tag, i)
    assert len(os.listdir(marks)) == 2 * (3 + 3 + 2), sorted(os.listdir(marks))


class DescribeContext(MapFunction):
    def open(self, runtime_context) -> None:
        rc = runtime_context
        self.description = (
            f"{rc.get_task_name()}|{rc.get_task_name_with_subtasks()}|"
            f"{rc.get_index_of_this_subtask()}|{rc.get_number_of_parallel_subtasks()}|"
            f"{rc.get_max_number_of_parallel_subtasks()}|{rc.get_attempt_number()}"
        )

    def map(self, value):
        return self.description


def test_the_runtime_context_describes_the_subtask(runner, tmp_path):
    env = make_env(runner, tmp_path, parallelism=2)
    ds = env.from_source(NumberSequenceSource(0, 9), None, "numbers")
    ds = ds.map(DescribeContext()).name("describe")
    got = set(run_to_files(env, ds, tmp_path / "out"))
    assert len(got) == 2
    for line in got:
        task_name, with_subtasks, index, parallelism, max_parallelism, attempt = line.split("|")
        assert "describe" in task_name
        assert with_subtasks == f"{task_name} ({int(index) + 1}/2)"
        assert (parallelism, max_parallelism, attempt) == ("2", "128", "0")
    assert sorted(line.split("|")[2] for line in got) == ["0", "1"]


# keyed streams ------------------------------------------------------------------------------
def test_key_by_reduce_emits_the_rolling_aggregate_of_each_key(runner, tmp_path):
    env = make_env(runner, tmp_path)
    n, keys = 600, 7
    # a single source subtask: every key's records reach the reducer in source order
    ds = (
        env.from_source(NumberSequenceSource(0, n - 1), None, "numbers")
        .set_parallelism(1)
        .map(lambda v: (v % keys, v))
        .set_parallelism(1)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    expected, sums = [], collections.defaultdict(int)
    for v in range(n):
        sums[v % keys] += v
        expected.append((v % keys, sums[v % keys]))
    same_records(run_to_files(env, ds, tmp_path / "out"), expected)


def test_key_by_on_a_union_keeps_one_state_per_key_across_the_inputs(runner, tmp_path):
    env = make_env(runner, tmp_path, parallelism=3)
    env.set_max_parallelism(7)  # few key groups: several keys share one
    a = env.from_source(NumberSequenceSource(0, 299), None, "a").map(lambda v: (f"k{v % 10}", 1))
    b = env.from_collection([(f"k{i}", 1000) for i in range(10)])
    totals = a.union(b).key_by(lambda kv: kv[0]).reduce(lambda x, y: (x[0], x[1] + y[1]))
    got = run_to_files(env, totals, tmp_path / "out")
    assert len(got) == 310
    final = collections.defaultdict(int)
    for line in got:
        key, total = eval(line)
        final[key] = max(final[key], total)
    assert final == {f"k{i}": 1030 for i in range(10)}


class SumReduce(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


class ByLength(KeySelector):
    def get_key(self, value):
        return len(value)


def test_key_by_and_reduce_accept_function_classes(runner, tmp_path):
    env = make_env(runner, tmp_path)
    words = ["a", "bb", "cc", "d", "eee", "ff", "g"] * 5
    ds = env.from_collection(words).key_by(ByLength()).reduce(SumReduce())
    expected, acc = [], {}
    for w in words:
        acc[len(w)] = acc[len(w)] + w if len(w) in acc else w
        expected.append(acc[len(w)])
    same_records(run_to_files(env, ds, tmp_path / "out"), expected)


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, acc_a, acc_b):
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


class AllStates(KeyedProcessFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))
        self.parity = runtime_context.get_map_state(MapStateDescriptor("parity"))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", SumReduce())
        )
        self.mean = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("mean", Average())
        )

    def process_element(self, value, ctx):
        key = ctx.get_current_key()
        assert key == value % 5, (key, value)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.recent.add(value)
        recent = list(self.recent.get())
        if len(recent) > 3:
            recent = recent[-3:]
            self.recent.update(recent)
        parity = "even" if value % 2 == 0 else "odd"
        self.parity.put(parity, (self.parity.get(parity) or 0) + 1)
        self.total.add(value)
        self.mean.add(value)
        parities = sorted(self.parity.items())
        yield f"{key}|{count}|{recent}|{parities}|{self.total.get()}|{self.mean.get():.4f}"


def reference_all_states(values: list[int]) -> list[str]:
    out, per_key = [], collections.defaultdict(list)
    for v in values:
        seen = per_key[v % 5]
        seen.append(v)
        parities = collections.Counter("even" if x % 2 == 0 else "odd" for x in seen)
        out.append(
            f"{v % 5}|{len(seen)}|{seen[-3:]}|{sorted(parities.items())}|{sum(seen)}|"
            f"{sum(seen) / len(seen):.4f}"
        )
    return out


def test_a_keyed_process_function_keeps_every_keyed_state_kind_per_key(runner, tmp_path):
    env = make_env(runner, tmp_path)
    values = [(v * 37) % 401 for v in range(400)]
    ds = env.from_collection(values).key_by(lambda v: v % 5).process(AllStates())
    same_records(run_to_files(env, ds, tmp_path / "out"), reference_all_states(values))


class Evens(ProcessFunction):
    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        assert ctx.timestamp() is None
        if value % 2 == 0:
            yield (value, "even")
            yield (value * 10, "times ten")


def test_a_process_function_runs_on_a_non_keyed_stream(runner, tmp_path):
    env = make_env(runner, tmp_path)
    ds = env.from_source(NumberSequenceSource(0, 299), None, "numbers").process(Evens())
    expected = [r for v in range(0, 300, 2) for r in [(v, "even"), (v * 10, "times ten")]]
    same_records(run_to_files(env, ds, tmp_path / "out"), expected)


class CountPerKey(MapFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def map(self, value):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        return f"{value % 4},{value},{c}"


class FirstPerKey(FilterFunction):
    def open(self, runtime_context) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def filter(self, value):
        if self.seen.value():
            return False
        self.seen.update(True)
        return True


class HistoryPerKey(FlatMapFunction):
    def open(self, runtime_context) -> None:
        self.history = runtime_context.get_list_state(ListStateDescriptor("history"))

    def flat_map(self, value):
        self.history.add(value)
        if len(list(self.history.get())) == 3:
            yield f"{value % 4}:{sorted(self.history.get())}"


def test_keyed_map_filter_and_flat_map_use_keyed_state_through_the_runtime_context(
    runner, tmp_path
):
    n = 200
    env = make_env(runner, tmp_path)
    numbers = env.from_collection(list(range(n)))
    counted = numbers.key_by(lambda v: v % 4).map(CountPerKey())
    firsts = numbers.key_by(lambda v: v % 4).filter(FirstPerKey()).map(lambda v: f"first {v}")
    thirds = numbers.key_by(lambda v: v % 4).flat_map(HistoryPerKey())
    got = run_to_files(env, counted.union(firsts, thirds), tmp_path / "out")
    expected = [f"{v % 4},{v},{v // 4 + 1}" for v in range(n)]
    expected += [f"first {v}" for v in range(4)]
    expected += [f"{k}:{[k, k + 4, k + 8]}" for k in range(4)]
    same_records(got, expected)


# union and partitioning ---------------------------------------------------------------------
def test_union_merges_two_or_three_streams(runner, tmp_path):
    env = make_env(runner, tmp_path)
    a = env.from_source(NumberSequenceSource(0, 299), None, "a")
    b = env.from_source(DataGeneratorSource(lambda i: 1_000 + i, count=150), None, "b")
    c = env.from_collection([-1, -2, -3])
    two = a.union(b).map(lambda v: f"two {v}")
    three = a.union(b, c).map(lambda v: f"three {v}")
    got = run_to_files(env, two.union(three), tmp_path / "out")
    ab = list(range(300)) + [1_000 + i for i in range(150)]
    expected = [f"two {v}" for v in ab] + [f"three {v}" for v in [*ab, -1, -2, -3]]
    same_records(got, expected)


class WhoAmI(MapFunction):
    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (value, self.index)


def partitioned(runner, tmp_path, repartition: str, *, n: int, p: int, source_p: int = 1):
    env = make_env(runner, tmp_path, parallelism=p)
    ds = env.from_source(NumberSequenceSource(0, n - 1), None, "numbers").set_parallelism(source_p)
    ds = getattr(ds, repartition)().map(WhoAmI())
    ds.map(lambda t: f"{t[0]},{t[1]}").sink_to(file_sink(tmp_path / "out"))
    env.execute(repartition)
    return [tuple(map(int, line.split(","))) for line in committed_lines(tmp_path / "out")]


def test_one_stream_feeding_several_branches_and_sinks(runner, tmp_path):
    env = make_env(runner, tmp_path, parallelism=2)
    numbers = env.from_source(NumberSequenceSource(0, 299), None, "numbers")
    doubled = numbers.map(lambda v: v * 2)
    doubled.map(str).sink_to(file_sink(tmp_path / "chained"))  # same chain
    doubled.filter(lambda v: v % 3 == 0).map(str).set_parallelism(1).sink_to(
        file_sink(tmp_path / "remote")
    )  # over the network
    letters = env.from_collection(["a", "b", "c"])  # an independent pipeline in the same job
    letters.sink_to(file_sink(tmp_path / "letters")).set_parallelism(3)
    env.execute("fan-out")
    same_records(committed_lines(tmp_path / "chained"), [v * 2 for v in range(300)])
    same_records(
        committed_lines(tmp_path / "remote"), [v * 2 for v in range(300) if v * 2 % 3 == 0]
    )
    same_records(committed_lines(tmp_path / "letters"), ["a", "b", "c"])


def test_rebalance_sends_each_record_once_round_robin(runner, tmp_path):
    n, p = 1_000, 3
    got = partitioned(runner, tmp_path, "rebalance", n=n, p=p)
    assert sorted(v for v, _ in got) == list(range(n))
    per_subtask = collections.Counter(i for _, i in got)
    assert sorted(per_subtask) == list(range(p))
    assert max(per_subtask.values()) - min(per_subtask.values()) <= 1, per_subtask


def test_shuffle_sends_each_record_once_to_some_subtask(runner, tmp_path):
    n, p = 1_000, 3
    got = partitioned(runner, tmp_path, "shuffle", n=n, p=p)
    assert sorted(v for v, _ in got) == list(range(n))
    assert set(collections.Counter(i for _, i in got)) == set(range(p))


def test_broadcast_gives_every_downstream_subtask_every_record(runner, tmp_path):
    n, p = 300, 3
    got = partitioned(runner, tmp_path, "broadcast", n=n, p=p)
    assert len(got) == n * p
    assert collections.Counter(got) == collections.Counter(
        (v, i) for v in range(n) for i in range(p)
    )


def test_forward_keeps_each_record_on_its_source_subtask(runner, tmp_path):
    n, p = 400, 2
    got = partitioned(runner, tmp_path, "forward", n=n, p=p, source_p=p)
    # NumberSequenceSource gives subtask i the i-th contiguous range
    assert sorted(got) == [(v, v * p // n) for v in range(n)]


def test_forward_over_the_network_keeps_each_record_on_its_subtask(runner, tmp_path):
    n, p = 400, 2
    env = make_env(runner, tmp_path, parallelism=p)
    ds = env.from_source(NumberSequenceSource(0, n - 1), None, "numbers")
    ds = ds.forward().map(WhoAmI()).disable_chaining()
    ds.map(lambda t: f"{t[0]},{t[1]}").sink_to(file_sink(tmp_path / "out"))
    env.execute("forward, not chained")
    got = [tuple(map(int, line.split(","))) for line in committed_lines(tmp_path / "out")]
    assert sorted(got) == [(v, v * p // n) for v in range(n)]


def test_per_operator_parallelism_with_default_rebalance_between_them(runner, tmp_path):
    n = 900
    env = make_env(runner, tmp_path, parallelism=2)
    ds = env.from_source(NumberSequenceSource(0, n - 1), None, "numbers").set_parallelism(1)
    mapped = ds.map(WhoAmI()).set_parallelism(3)
    mapped.map(lambda t: f"{t[0]},{t[1]}").set_parallelism(3).sink_to(
        file_sink(tmp_path / "out")
    ).set_parallelism(2)
    env.execute("1 -> 3 -> 2")
    got = [tuple(map(int, line.split(","))) for line in committed_lines(tmp_path / "out")]
    assert sorted(v for v, _ in got) == list(range(n))
    per_map_subtask = collections.Counter(i for _, i in got)
    assert per_map_subtask == {0: n // 3, 1: n // 3, 2: n // 3}  # one upstream: exact round robin
    writers = {
        re.match(r"part-(\d+)-", os.path.basename(f)).group(1)
        for f in committed_files(tmp_path / "out")
    }
    assert writers == {"0", "1"}, "both sink subtasks received records"


def test_uid_and_name_reach_the_checkpoint_metadata(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.enable_checkpointing(100)
    ds = env.from_source(NumberSequenceSource(0, 99), None, "numbers").uid("my-source")
    ds = ds.name("My Numbers").set_parallelism(1)
    ds = ds.key_by(lambda v: v % 4).map(CountPerKey()).uid("my-counter").name("Counter")
    ds.sink_to(file_sink(tmp_path / "out")).uid("my-sink").name("My Sink")
    client = env.execute_async("named")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    operators = client.jobmaster.stats.last_checkpoint.metadata.operators
    assert {uid: op.name for uid, op in operators.items()} == {
        "my-source": "My Numbers",
        "my-counter": "Counter",
        "my-sink": "My Sink",
    }
    same_records(
        committed_lines(tmp_path / "out"), [f"{v % 4},{v},{v // 4 + 1}" for v in range(100)]
    )


# print --------------------------------------------------------------------------------------
def test_print_writes_each_record_with_flinks_subtask_prefix(runner, tmp_path, capfd):
    env = make_env(runner, tmp_path, parallelism=2)
    ds = env.from_source(NumberSequenceSource(0, 49), None, "numbers")
    ds.map(lambda v: f"value={v}").print()
    ds.map(lambda v: f"tagged={v}").print("tag").set_parallelism(1)
    ds.map(lambda v: f"bare={v}").print().set_parallelism(1)
    ds.map(lambda v: f"both={v}").print("id")
    env.execute("print")
    if runner != "local":
        return  # a Spark worker's stdout need not reach this process
    lines = capfd.readouterr().out.splitlines()
    plain = sorted(line for line in lines if "value=" in line)
    tagged = sorted(line for line in lines if "tagged=" in line)
    # parallel sink: "<subtask + 1>> record"; parallelism 1 with an identifier: "id> record"
    assert len(plain) == 50
    assert all(re.fullmatch(r"[12]> value=\d+", line) for line in plain), plain[:5]
    assert sorted(int(line.split("=")[1]) for line in plain) == list(range(50))
    assert sorted(tagged) == sorted(f"tag> tagged={v}" for v in range(50))
    # parallelism 1 without an identifier: no prefix at all
    assert sorted(line for line in lines if "bare=" in line) == sorted(
        f"bare={v}" for v in range(50)
    )
    both = [line for line in lines if "both=" in line]
    assert len(both) == 50
    assert all(re.fullmatch(r"id:[12]> both=\d+", line) for line in both), both[:5]


# checkpointed functions ----------------------------------------------------------------------
FAIL_AT = 600


class CountingWithOperatorState(MapFunction, CheckpointedFunction, CheckpointListener):
    """Counts the records of its subtask in operator list state; publishes (subtask, count) in
    union list state; subtask 0 fails once in attempt 0, at its first record from FAIL_AT on
    after a checkpoint completed."""

    def initialize_state(self, context) -> None:
        store = context.get_operator_state_store()
        self.counts = store.get_list_state(ListStateDescriptor("count"))
        self.everyone = store.get_union_list_state(ListStateDescriptor("everyone"))
        self.restored = context.is_restored()
        self.count = sum(self.counts.get())
        self.restored_union = sorted(self.everyone.get())

    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.attempt = runtime_context.get_attempt_number()
        self.completed_checkpoints = 0

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed_checkpoints += 1

    def map(self, value):
        failing = self.attempt == 0 and self.index == 0 and self.completed_checkpoints > 0
        if failing and value >= FAIL_AT:
            raise RuntimeError(f"injected failure at {value}")
        self.count += 1
        return (
            f"{self.index}|{self.attempt}|{value}|{self.count}|{self.restored}|"
            f"{self.restored_union}"
        )

    def snapshot_state(self, context) -> None:
        self.counts.update([self.count])
        self.everyone.update([(self.index, self.count)])


def test_operator_list_state_and_union_list_state_survive_a_restart(runner, tmp_path):
    n, p = 2_000, 2
    env = make_env(runner, tmp_path, parallelism=p)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    # 500 records/s per subtask: FAIL_AT (subtask 0's 600th record) comes after ~1.2 s, and the
    # failure waits for a completed checkpoint if there was none by then
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=1_000)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    ds = ds.map(CountingWithOperatorState()).uid("counting")
    ds.sink_to(file_sink(tmp_path / "out")).uid("sink")
    client = env.execute_async("operator state")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    assert client.jobmaster.stats.restarts == 1
    assert client.jobmaster.stats.restored_from is not None, "no checkpoint before the failure"

    rows = [line.split("|") for line in committed_lines(tmp_path / "out")]
    by_subtask = collections.defaultdict(list)
    for index, attempt, value, count, restored, union in rows:
        by_subtask[int(index)].append((int(count), int(value), int(attempt), restored, union))
    assert sorted(by_subtask) == [0, 1]
    for index, entries in by_subtask.items():
        entries.sort()
        # exactly once: the restored list state continues the count without gap or repeat
        assert [c for c, *_ in entries] == list(range(1, n // p + 1)), index
        assert [v for _, v, *_ in entries] == list(range(index * n // p, (index + 1) * n // p))
        second = [e for e in entries if e[2] == 1]
        assert second, f"subtask {index} emitted nothing after the restart"
        first_count_after = second[0][0]
        assert {e[3] for e in second} == {"True"}
        assert {e[3] for e in entries if e[2] == 0} == {"False"}
        restored_union = eval(second[0][4])
        # every subtask restored the union of all subtasks' entries
        assert [i for i, _ in restored_union] == [0, 1]
        assert dict(restored_union)[index] == first_count_after - 1
    unions = {e[4] for es in by_subtask.values() for e in es if e[2] == 1}
    assert len(unions) == 1, f"subtasks restored different union states: {unions}"


class RecordNotifications(MapFunction, CheckpointListener):
    def __init__(self, marks: str) -> None:
        self.marks = marks

    def open(self, runtime_context) -> None:
        index = runtime_context.get_index_of_this_subtask()
        self.path = os.path.join(self.marks, f"notified-{index}")

    def map(self, value):
        return value

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        with open(self.path, "a") as f:
            f.write(f"{checkpoint_id}\n")


def test_checkpoint_listener_is_notified_of_completed_checkpoints_in_order(runner, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = make_env(runner, tmp_path, parallelism=2)
    env.enable_checkpointing(100)
    source = DataGeneratorSource(lambda i: i, count=1_500, records_per_second=1_500)
    ds = env.from_source(source, None, "numbers").map(RecordNotifications(str(marks)))
    ds.map(str).sink_to(file_sink(tmp_path / "out"))
    client = env.execute_async("listener")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    same_records(committed_lines(tmp_path / "out"), range(1_500))
    stats = client.jobmaster.stats
    last = stats.last_checkpoint.checkpoint_id
    for index in range(2):
        ids = [int(x) for x in (marks / f"notified-{index}").read_text().split()]
        assert len(ids) >= 2, ids
        assert ids == sorted(set(ids)), f"not strictly increasing: {ids}"
        assert ids[-1] == last, "the final checkpoint is notified before the task ends"
        assert ids[0] >= 1


# job client ---------------------------------------------------------------------------------
def test_an_unbounded_job_runs_until_cancelled_through_its_job_client(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.enable_checkpointing(100)
    source = DataGeneratorSource(lambda i: i, count=None, records_per_second=2_000)
    env.from_source(source, None, "endless").map(str).sink_to(file_sink(tmp_path / "out"))
    client = env.execute_async("endless")
    assert isinstance(client, JobClient)
    assert re.fullmatch(r"[0-9a-f]{32}", client.get_job_id())
    wait_until(lambda: client.get_job_status().result() is JobStatus.RUNNING, "status RUNNING")
    wait_until(lambda: client.jobmaster.stats.completed_checkpoints >= 1, "a checkpoint")
    assert not client.get_job_execution_result().done()
    resolved(client.cancel(), "the job to be cancelled", timeout=JOB_TIMEOUT_S)
    assert client.get_job_status().result() is JobStatus.CANCELED
    assert client.get_job_status().result().is_globally_terminal_state()
    with pytest.raises(JobExecutionException, match="cancelled") as err:
        resolved(client.get_job_execution_result(), "the job to finish", timeout=10)
    assert err.value.job_id == client.get_job_id()
    # what was committed before the cancellation is a prefix of each generator split (an
    # unbounded split i of 2 generates i, i + 2, i + 4, ...), each value once
    values = [int(v) for v in committed_lines(tmp_path / "out")]
    for split in range(2):
        own = sorted(v for v in values if v % 2 == split)
        assert own == list(range(split, split + 2 * len(own), 2)), own[:20]


def test_execute_returns_a_result_describing_the_job(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.from_collection([1, 2, 3]).print()
    started = time.monotonic()
    result = env.execute("result fields")
    elapsed_ms = (time.monotonic() - started) * 1000
    assert isinstance(result, JobExecutionResult)
    assert result.is_job_execution_result()
    assert result.get_job_name() == "result fields"
    assert re.fullmatch(r"[0-9a-f]{32}", result.get_job_id())
    assert isinstance(result.get_net_runtime(), int)
    assert 0 < result.get_net_runtime() <= elapsed_ms + 1


def test_the_result_of_execute_async_matches_its_client(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.from_collection(["a"]).print()
    client = env.execute_async()
    result = resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    assert result.get_job_id() == client.get_job_id()
    assert result.get_job_name() == "tidegate job"
    assert client.get_job_status().result() is JobStatus.FINISHED


def test_a_bounded_job_without_checkpointing_commits_all_output_at_the_end(runner, tmp_path):
    env = make_env(runner, tmp_path)
    assert not env.get_checkpoint_config().is_checkpointing_enabled()
    ds = env.from_source(NumberSequenceSource(1, 5_000), None, "numbers")
    ds.map(str).sink_to(file_sink(tmp_path / "out"))
    job = env.execute_async("no checkpointing")
    resolved(job.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    same_records(committed_lines(tmp_path / "out"), range(1, 5_001))
    assert not glob.glob(f"{tmp_path / 'out'}/**/.*", recursive=True), "in-progress files left"
    assert job.jobmaster.stats.completed_checkpoints == 1, "only the final checkpoint"


def test_a_user_exception_fails_the_job_with_its_message_and_traceback(runner, tmp_path):
    def explode(v):
        if v == 42:
            raise ValueError(f"cannot handle {v}")
        return v

    env = make_env(runner, tmp_path)
    env.from_source(NumberSequenceSource(0, 99), None, "numbers").map(explode).print()
    client = env.execute_async("failing")
    with pytest.raises(JobExecutionException, match=r"ValueError: cannot handle 42") as err:
        resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    assert "Traceback" in err.value.detail
    assert "explode" in err.value.detail
    assert client.get_job_status().result() is JobStatus.FAILED


def test_cancelling_a_finished_job_changes_nothing(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.from_collection([1, 2, 3]).map(str).sink_to(file_sink(tmp_path / "out"))
    client = env.execute_async("done")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    resolved(client.cancel(), "the job to be cancelled", timeout=10)
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert resolved(client.get_job_execution_result(), "the job to finish").get_job_name() == "done"
    same_records(committed_lines(tmp_path / "out"), [1, 2, 3])


def test_cancel_right_after_submission_stops_the_job_and_its_slots(runner, tmp_path, request):
    env = make_env(runner, tmp_path)
    source = DataGeneratorSource(lambda i: i, count=None, records_per_second=100)
    env.from_source(source, None, "endless").print()
    client = env.execute_async("cancelled at once")
    spark = request.getfixturevalue("spark") if runner == "spark" else None
    try:
        # Cancelling is prompt even before the slots started (the job may not have reached
        # the runner yet); 30 s is far more than a cancellation needs.
        try:
            resolved(client.cancel(), "the job to be cancelled", timeout=30)
        except TimeoutError:
            pytest.fail(
                f"cancel() did not complete within 30 s (status {client.get_job_status().result()})"
            )
        assert client.get_job_status().result() is JobStatus.CANCELED
        with pytest.raises(JobExecutionException, match="cancelled"):
            resolved(client.get_job_execution_result(), "the job to finish", timeout=10)
        if spark is not None:
            tracker = spark.sparkContext.statusTracker()
            wait_until(
                lambda: not tracker.getActiveJobsIds(),
                "the cancelled job's Spark job ended (it holds the executors' cores)",
                timeout=10,
            )
    finally:
        if spark is not None:  # do not leave a stray Spark job to the tests that follow
            spark.sparkContext.cancelAllJobs()
            client.jobmaster.done.wait(120)


class FailsToOpen(MapFunction):
    def open(self, runtime_context) -> None:
        raise OSError("cannot reach the lookup service")

    def map(self, value):
        return value


def test_an_exception_in_open_fails_the_job_with_its_message(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.from_collection([1, 2, 3]).map(FailsToOpen()).print()
    with pytest.raises(JobExecutionException, match="cannot reach the lookup service"):
        env.execute("open fails")


def test_a_bounded_job_with_very_frequent_checkpoints_commits_exactly_its_output(runner, tmp_path):
    env = make_env(runner, tmp_path, parallelism=2)
    env.enable_checkpointing(10)
    source = DataGeneratorSource(lambda i: i, count=3_000, records_per_second=6_000)
    ds = env.from_source(source, None, "numbers").key_by(lambda v: v % 11).map(CountPerKey())
    ds.sink_to(file_sink(tmp_path / "out"))
    client = env.execute_async("frequent checkpoints")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=JOB_TIMEOUT_S)
    assert client.jobmaster.stats.completed_checkpoints > 3
    lines = committed_lines(tmp_path / "out")
    assert sorted(int(line.split(",")[1]) for line in lines) == list(range(3_000))
    counts = collections.defaultdict(list)
    for line in lines:
        _, value, count = line.split(",")
        counts[int(value) % 11].append(int(count))
    for key, cs in counts.items():
        assert sorted(cs) == list(range(1, len(cs) + 1)), key


# errors -------------------------------------------------------------------------------------
def test_keyed_process_function_on_a_non_keyed_stream_is_a_type_error_at_build(tmp_path):
    env = make_env("local", tmp_path)
    ds = env.from_collection([1, 2])
    with pytest.raises(TypeError, match=r"key_by"):
        ds.process(AllStates())


class KeyedStateWithoutKeyBy(MapFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def map(self, value):
        return value


def test_keyed_state_in_a_non_keyed_map_fails_the_job_mentioning_key_by(runner, tmp_path):
    env = make_env(runner, tmp_path)
    env.from_collection([1, 2, 3]).map(KeyedStateWithoutKeyBy()).print()
    with pytest.raises(JobExecutionException, match=r"key_by"):
        env.execute("keyed state without key_by")


def test_a_job_without_a_sink_is_a_clear_error(tmp_path):
    env = make_env("local", tmp_path)
    env.from_collection([1, 2]).map(lambda v: v)
    with pytest.raises(ValueError, match=r"no sink.*(print\(\)|sink_to)"):
        env.execute("no sink")


def test_forward_between_different_parallelisms_is_a_clear_error(tmp_path):
    env = make_env("local", tmp_path, parallelism=2)
    env.from_collection([1, 2]).forward().map(lambda v: v).print()
    with pytest.raises(ValueError, match=r"forward\(\).*parallelism"):
        env.execute("bad forward")


def test_a_duplicate_uid_is_a_clear_error(tmp_path):
    env = make_env("local", tmp_path)
    env.from_collection([1]).uid("twice").map(lambda v: v).uid("twice").print()
    with pytest.raises(ValueError, match=r"uid 'twice'.*unique"):
        env.execute("duplicate uid")


def test_set_parallelism_zero_is_a_value_error(tmp_path):
    env = make_env("local", tmp_path)
    with pytest.raises(ValueError):
        env.set_parallelism(0)
    ds = env.from_source(NumberSequenceSource(0, 1), None, "numbers")
    with pytest.raises(ValueError):
        ds.set_parallelism(0)
    with pytest.raises(ValueError):
        ds.map(lambda v: v).set_parallelism(0)
    with pytest.raises(ValueError):
        ds.print().set_parallelism(0)


def test_an_unknown_runner_is_a_clear_error(tmp_path):
    env = make_env("yarn-ish", tmp_path)
    env.from_collection([1]).print()
    with pytest.raises(ValueError, match="unknown runner"):
        env.execute("bad runner")
