"""PyFlink DataStream calls beyond the basics, on both runners, against references computed
here: KeyedStream.sum/min/max/min_by/max_by, partition_custom, rescale, set_buffer_timeout,
execute_and_collect."""

from __future__ import annotations

import collections
import sys

import cloudpickle
import pytest

from tests.support.environments import job_environment
from tidegate.common import TimestampAssigner, Types, WatermarkStrategy
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import (
    KeyedBroadcastProcessFunction,
    MapFunction,
    OutputTag,
    Partitioner,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import MapStateDescriptor, ValueStateDescriptor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RECORDS = [(f"k{i % 3}", (i * 7) % 11, i) for i in range(30)]


def _env(runner: str, tmp_path) -> StreamExecutionEnvironment:
    return job_environment(runner, tmp_path / "chk", parallelism=2, interval_ms=None, restarts=None)


def _final_per_key(lines: list[str]) -> dict[str, tuple]:
    """The last printed record per key; a key's records come from one subtask, in order."""
    last = {}
    for line in lines:
        record = eval(line.split("> ", 1)[1])
        last[record[0]] = record
    return last


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("sum", lambda rs: (rs[0][0], sum(r[1] for r in rs), rs[0][2])),
        ("min", lambda rs: (rs[0][0], min(r[1] for r in rs), rs[0][2])),
        ("max", lambda rs: (rs[0][0], max(r[1] for r in rs), rs[0][2])),
        ("min_by", lambda rs: min(rs, key=lambda r: r[1])),  # min() keeps the first on ties
        ("max_by", lambda rs: max(rs, key=lambda r: r[1])),
    ],
)
def test_keyed_field_aggregations_end_with_flinks_result_per_key(
    runner, tmp_path, capsys, aggregation, expected
):
    env = _env(runner, tmp_path)
    keyed = env.from_collection(RECORDS).key_by(lambda r: r[0])
    getattr(keyed, aggregation)(1).print()
    env.execute(aggregation)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(RECORDS)  # rolling: one result per record
    by_key = collections.defaultdict(list)
    for r in RECORDS:
        by_key[r[0]].append(r)
    assert _final_per_key(lines) == {k: expected(rs) for k, rs in by_key.items()}


class ByNumber(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


class Where(MapFunction):
    def open(self, runtime_context) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (value, self.subtask)


def test_partition_custom_sends_each_record_to_the_subtask_its_partitioner_picks(
    runner, tmp_path, capsys
):
    env = _env(runner, tmp_path)
    env.set_buffer_timeout(0)
    (
        env.from_collection(list(range(20)))
        .partition_custom(ByNumber(), lambda x: x)
        .map(Where())
        .print()
    )
    env.execute("custom partitioning")
    placed = [eval(line.split("> ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(placed) == [(x, x % 2) for x in range(20)]


def test_rescale_spreads_records_over_every_downstream_subtask(runner, tmp_path, capsys):
    env = _env(runner, tmp_path)
    env.set_buffer_timeout(-1)  # only full frames go early: the end of input sends the rest
    env.from_collection(list(range(40))).rescale().map(Where()).print()
    env.execute("rescale")
    placed = [eval(line.split("> ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(v for v, _ in placed) == list(range(40))
    assert {s for _, s in placed} == {0, 1}


def test_execute_and_collect_returns_every_record_once(runner, tmp_path):
    env = _env(runner, tmp_path)
    records = env.from_collection(RECORDS).key_by(lambda r: r[0]).sum(1).execute_and_collect()
    with records:
        collected = list(records)
    running: dict[str, tuple] = {}
    reference = []
    for key, value, i in RECORDS:  # the rolling sums, the key's first record's other fields
        first = running.get(key, (key, 0, i))
        running[key] = (key, first[1] + value, first[2])
        reference.append(running[key])
    assert sorted(collected) == sorted(reference)
    assert not any(p.name.startswith("collect-") for p in (tmp_path / "chk").iterdir())


def test_execute_and_collect_with_a_limit_stops_an_endless_job(runner, tmp_path):
    env = _env(runner, tmp_path)
    env.enable_checkpointing(100)
    source = DataGeneratorSource(lambda i: {"n": i}, records_per_second=2000)
    records = env.from_source(source, None, "endless").execute_and_collect("endless", limit=50)
    assert len(records) == 50
    assert all(isinstance(r, dict) for r in records)
    assert len({r["n"] for r in records}) == 50  # exactly once: no record twice


def test_execute_and_collect_raises_the_jobs_failure(tmp_path):
    env = _env("local", tmp_path)

    def broken(x):
        raise RuntimeError(f"broken at {x}")

    with pytest.raises(JobExecutionException, match="broken at"):
        list(env.from_collection([1, 2]).map(broken).execute_and_collect())
    with pytest.raises(ValueError, match="limit must be"):
        env.from_collection([1]).execute_and_collect(limit=0)


class SplitOdd(ProcessFunction):
    """PyFlink's side-output form: `yield tag, value` for odd numbers, `yield value` else."""

    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            yield value


ODD = OutputTag("odd", Types.INT())


def test_yielding_a_tag_and_a_value_emits_to_the_side_output(runner, tmp_path, capsys):
    env = _env(runner, tmp_path)
    evens = env.from_collection(list(range(10))).process(SplitOdd(), output_type=Types.INT())
    evens.print("even")
    evens.get_side_output(ODD).print("odd")
    env.execute("side outputs")
    lines = capsys.readouterr().out.splitlines()
    by_sink = collections.defaultdict(list)
    for line in lines:
        sink, _, value = line.partition("> ")
        by_sink[sink.split(":")[0]].append(int(value))
    assert sorted(by_sink["even"]) == [0, 2, 4, 6, 8]
    assert sorted(by_sink["odd"]) == [1, 3, 5, 7, 9]


LIMIT = MapStateDescriptor("limit", Types.STRING(), Types.INT())


class CountAndReportAtTheEnd(KeyedBroadcastProcessFunction):
    """Counts per key; one event-time timer per key reports the count if it reaches the limit
    from the broadcast state (read in on_timer)."""

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(10_000)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(LIMIT).put("limit", value)

    def on_timer(self, timestamp, ctx):
        limit = ctx.get_broadcast_state(LIMIT).get("limit")
        if self.count.value() >= limit:
            yield ctx.get_current_key(), self.count.value(), timestamp


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


def test_a_keyed_broadcast_function_has_timers_that_read_the_broadcast_state(
    runner, tmp_path, capsys
):
    env = _env(runner, tmp_path)
    events = [(f"k{i % 4}", i) for i in range(10)]  # k0, k1: 3 events; k2, k3: 2
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(FirstField())
    keyed = (
        env.from_collection(events)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda e: e[0])
    )
    limits = env.from_collection([3]).broadcast(LIMIT)
    keyed.connect(limits).process(CountAndReportAtTheEnd()).print()
    env.execute("broadcast timers")
    reported = [eval(line.split("> ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(reported) == [("k0", 3, 10_000), ("k1", 3, 10_000)]


class Scale(MapFunction):
    """Reads the global job parameter `factor` once per subtask (PyFlink's get_job_parameter)."""

    def open(self, runtime_context):
        self.factor = int(runtime_context.get_job_parameter("factor", "1"))
        self.missing = runtime_context.get_job_parameter("absent", "default")

    def map(self, value):
        return (value * self.factor, self.missing)


def test_functions_read_the_global_job_parameters(runner, tmp_path):
    env = _env(runner, tmp_path)
    env.get_config().set_global_job_parameters({"factor": 3})
    collected = env.from_collection(list(range(10))).map(Scale()).execute_and_collect()
    with collected:
        assert sorted(collected) == [(3 * i, "default") for i in range(10)]
