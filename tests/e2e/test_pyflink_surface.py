"""PyFlink DataStream calls beyond the basics, on both runners, against references computed
here: KeyedStream.sum/min/max/min_by/max_by, partition_custom, rescale, set_buffer_timeout,
execute_and_collect."""

from __future__ import annotations

import collections
import sys

import cloudpickle
import pytest

from tests.support.environments import job_environment
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import MapFunction, Partitioner, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource

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
    env.from_collection(list(range(40))).rescale().map(Where()).print()
    env.execute("rescale")
    placed = [eval(line.split("> ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(v for v, _ in placed) == list(range(40))
    assert {s for _, s in placed} == {0, 1}
    assert env.get_buffer_timeout() == 10


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
