"""The state processor on Spark: job state -> DataFrame -> bootstrapped savepoint -> job is
lossless, for value, list, map and operator state; Spark SQL over state; bad input (unknown
uids and state names, non-canonical handles, corrupt files, duplicate keys). Incremental
RocksDB checkpoints are read in test_state_processor_incremental.py.

One savepoint of the running-count job (module fixture) serves the reading and bad-input tests;
every job runs on Spark (the shared `spark` fixture)."""

from __future__ import annotations

import collections
import json
import pickle
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.e2e.jobs import count_job
from tests.e2e.savepoint_jobs import savepoint_job
from tests.e2e.state_processor_jobs import PROBE_KEYS, probe_job, run_until_savepoint
from tests.support.output import committed_lines
from tests.support.references import NUM_KEYS, check_counted_exactly_once, records_per_key
from tests.support.snapshots import edit_metadata, records_read_at, stop_with_savepoint
from tidegate.state.keygroups import key_group_range, stable_hash
from tidegate.state_processor import (
    SavepointReader,
    SavepointWriter,
    StateNotFoundError,
    UnsupportedSnapshotError,
    list_state,
    read_keyed_state,
    read_operator_state,
)

N = 30_000


@pytest.fixture(scope="module")
def count_savepoint(spark, tmp_path_factory):
    """(savepoint dir, {key: count} from the committed output) of the running-count job,
    stopped with a savepoint after two checkpoints (parallelism 2, max parallelism 128)."""
    tmp = tmp_path_factory.mktemp("count-savepoint")
    env = savepoint_job(tmp / "out", tmp / "chk", runner="spark", n=N)
    client = env.execute_async("counted")
    path = stop_with_savepoint(client, tmp / "savepoints", after_checkpoints=2)
    lines = committed_lines(tmp / "out")
    check_counted_exactly_once(lines, records_read_at(path, N))
    # exactly-once: the savepoint's count of a key is the number of its committed records
    return path, dict(collections.Counter(int(line.split(",")[0]) for line in lines))


def _counts(df) -> dict:
    return {row.key: row.value for row in df.collect()}


def test_value_state_reads_as_the_reference_counts_with_key_groups_where_the_formula_puts_them(
    spark, count_savepoint
):
    path, reference = count_savepoint
    df = read_keyed_state(spark, path, "count", "count", include_key_group=True)
    assert df.columns == ["key", "value", "key_group", "subtask"]
    # the 13 non-empty key groups are read by several Spark tasks, no task mixing two files
    assert df.rdd.getNumPartitions() > 2
    rows = df.collect()
    assert {r.key: r.value for r in rows} == reference
    assert len(rows) == len(reference) == NUM_KEYS
    for row in rows:
        assert row.key_group == stable_hash(row.key) % 128
        assert row.key_group in key_group_range(row.subtask, 2, 128)


def test_state_is_queried_with_spark_sql(spark, count_savepoint):
    path, reference = count_savepoint
    read_keyed_state(spark, path, "count", "count").createOrReplaceTempView("counts")
    result = spark.sql(
        "SELECT key % 2 AS parity, SUM(value) AS total, COUNT(*) AS keys "
        "FROM counts GROUP BY key % 2 ORDER BY parity"
    ).collect()
    expected = collections.defaultdict(lambda: [0, 0])
    for key, count in reference.items():
        expected[key % 2][0] += count
        expected[key % 2][1] += 1
    assert [(r.parity, r.total, r.keys) for r in result] == [
        (parity, total, keys) for parity, (total, keys) in sorted(expected.items())
    ]


def test_list_state_names_every_state_of_every_operator(count_savepoint):
    path, _ = count_savepoint
    states = {(s.uid, s.state_name): s for s in list_state(path)}
    assert set(states) == {
        ("count", "count"),
        ("numbers", "__splits__"),
        ("sink", "__sink_committables__"),
    }
    count = states[("count", "count")]
    assert (count.scope, count.kind, count.parallelism) == ("keyed", "value", 2)
    assert count.key_groups == NUM_KEYS and count.size_bytes > 0
    splits = states[("numbers", "__splits__")]
    assert (splits.scope, splits.kind, splits.entries) == ("operator", "split", 2)


def test_round_trip_through_a_bootstrapped_savepoint_at_another_parallelism_is_lossless(
    spark, count_savepoint, tmp_path
):
    path, reference = count_savepoint
    counts = read_keyed_state(spark, path, "count", "count")
    plus_1000 = counts.withColumn("value", F.col("value") + 1000)
    bootstrapped = (
        SavepointWriter.new_savepoint(spark, max_parallelism=128)
        .with_keyed_state("count", plus_1000, "key", "count", parallelism=3)
        .write(str(tmp_path / "bootstrapped"))
    )
    metadata = json.loads((Path(bootstrapped) / "_metadata").read_text())
    assert metadata["is_savepoint"] and set(metadata["operators"]) == {"count"}
    handles = metadata["operators"]["count"]["subtasks"]
    assert sorted(handles) == ["0", "1", "2"]  # one file per new subtask
    for subtask, handle in handles.items():
        r = key_group_range(int(subtask), 3, 128)
        assert handle["key_group_range"] == [r.start, r.stop]
        assert all(kg in r for kg, _, _ in handle["index"]["key_groups"])
    assert _counts(read_keyed_state(spark, bootstrapped, "count", "count")) == {
        k: v + 1000 for k, v in reference.items()
    }

    # a job (parallelism 2) started from it counts on from exactly the bootstrapped values
    n = 260
    env = count_job(
        tmp_path / "out", tmp_path / "chk", runner="spark", n=n, restore_path=bootstrapped
    )
    env.execute("restored from a bootstrapped savepoint")
    seen = collections.defaultdict(list)
    for line in committed_lines(tmp_path / "out"):
        key, _value, count = map(int, line.split(","))
        seen[key].append(count)
    per_key = records_per_key(n)
    assert {k: sorted(c) for k, c in seen.items()} == {
        k: list(range(reference[k] + 1001, reference[k] + 1001 + per_key[k])) for k in per_key
    }


def test_list_map_and_operator_state_round_trip_through_a_job(spark, tmp_path):
    # Step 1: bootstrap list, map, split and union state
    keys = spark.createDataFrame(
        [(k, p, -(10 * k + p)) for k in range(PROBE_KEYS) for p in range(3)],
        "key LONG, position LONG, value LONG",
    )
    rests = spark.createDataFrame(
        [(k, r, 100 * k + r) for k in range(PROBE_KEYS) for r in range(3)],
        "key LONG, user_key LONG, value LONG",
    )
    boot = (
        SavepointWriter.new_savepoint(spark)
        .with_keyed_state("probe", keys.orderBy(F.desc("position")), "key", "seen", "list",
                          parallelism=2)
        .with_keyed_state("probe", rests, "key", "by_rest", "map")
        .with_operator_state("tagger", "tags", ["a", "b", "c", "d", "e"], parallelism=2)
        .with_operator_state("tagger", "everyone", ["x", "y"], mode="union")
        .write(str(tmp_path / "boot"))
    )  # fmt: skip
    tags = read_operator_state(spark, boot, "tagger", "tags").collect()
    assert [(r.subtask, r.position, r.value) for r in tags] == [
        (0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "d"), (1, 1, "e")
    ]  # fmt: skip

    # Step 2: a job starts from it, runs two checkpoints, and stops with a savepoint
    reports = tmp_path / "reports"
    reports.mkdir()
    env = probe_job(tmp_path / "out", tmp_path / "chk", reports, boot, runner="spark")
    savepoint = run_until_savepoint(env, tmp_path / "savepoints")
    restored = [json.loads((reports / f"restored-{i}.json").read_text()) for i in range(2)]
    assert restored == [
        {"tags": ["a", "b", "c"], "everyone": ["x", "y"]},
        {"tags": ["d", "e"], "everyone": ["x", "y"]},
    ]

    # Step 3: the savepoint's list and map state equal bootstrap + committed output
    expected_lists = {k: {p: -(10 * k + p) for p in range(3)} for k in range(PROBE_KEYS)}
    expected_maps = {k: {r: 100 * k + r for r in range(3)} for k in range(PROBE_KEYS)}
    for line in committed_lines(tmp_path / "out"):
        key, value, position = map(int, line.split(","))
        assert position not in expected_lists[key]
        expected_lists[key][position] = value
        expected_maps[key][value % 3] += 1
    reader = SavepointReader.read(spark, savepoint)
    seen = reader.read_keyed_state("probe", "seen")
    assert seen.columns == ["key", "position", "value"]
    lists = collections.defaultdict(dict)
    for row in seen.collect():
        lists[row.key][row.position] = row.value
    assert dict(lists) == expected_lists
    by_rest = reader.read_keyed_state("probe", "by_rest")
    assert by_rest.columns == ["key", "user_key", "value"]
    maps = collections.defaultdict(dict)
    for row in by_rest.collect():
        maps[row.key][row.user_key] = row.value
    assert dict(maps) == expected_maps
    seen.createOrReplaceTempView("seen")
    sizes = spark.sql("SELECT key, COUNT(*) AS n FROM seen GROUP BY key").collect()
    assert {r.key: r.n for r in sizes} == {k: len(v) for k, v in expected_lists.items()}
    # union state: every subtask snapshots the whole list it restored
    everyone = reader.read_operator_state("tagger", "everyone").collect()
    assert [(r.subtask, r.value) for r in everyone] == [(0, "x"), (0, "y"), (1, "x"), (1, "y")]


def test_source_splits_need_raw_and_raw_gives_the_python_objects(spark, count_savepoint):
    path, reference = count_savepoint
    with pytest.raises(TypeError, match=r"cannot be represented as Spark SQL columns.*raw=True"):
        read_operator_state(spark, path, "numbers", "__splits__")
    rows = read_operator_state(spark, path, "numbers", "__splits__", raw=True).collect()
    splits = [pickle.loads(r.value) for r in rows]
    assert [r.subtask for r in rows] == [0, 1]
    # the splits resume after exactly the records the savepoint counted
    assert sum(s.stop - s.next_index for s in splits) == N - sum(reference.values())


def test_from_existing_savepoint_replaces_keeps_and_removes_operators(
    spark, count_savepoint, tmp_path
):
    path, reference = count_savepoint
    before = json.loads((Path(path) / "_metadata").read_text())["operators"]
    doubled = read_keyed_state(spark, path, "count", "count", raw=True)
    new = (
        SavepointWriter.from_existing_savepoint(spark, path)
        .with_keyed_state("count", doubled, "key", "count", raw=True)
        .remove_operator("sink")
        .write(str(tmp_path / "edited"))
    )
    after = json.loads((Path(new) / "_metadata").read_text())["operators"]
    assert set(after) == {"count", "numbers"}
    assert after["numbers"] == before["numbers"]  # kept: the same files, copied
    for handle in after["numbers"]["subtasks"].values():
        assert (Path(new) / handle["file"]).read_bytes() == (
            Path(path) / handle["file"]
        ).read_bytes()
    assert after["count"]["parallelism"] == 2  # the replaced operator's own parallelism
    assert _counts(read_keyed_state(spark, new, "count", "count")) == reference


def test_unknown_uid_and_state_name_are_refused_naming_what_exists(spark, count_savepoint):
    path, _ = count_savepoint
    with pytest.raises(StateNotFoundError, match=r"uid 'counter'.*'count' \(Process\).*'numbers'"):
        read_keyed_state(spark, path, "counter", "count")
    with pytest.raises(
        StateNotFoundError, match=r"no keyed state named 'total'.*value state 'count'"
    ):
        read_keyed_state(spark, path, "count", "total")
    with pytest.raises(StateNotFoundError, match=r"no operator state named 'count'.*'count'"):
        read_operator_state(spark, path, "count", "count")


def test_a_handle_without_a_canonical_index_is_refused_with_take_a_savepoint(
    spark, count_savepoint, tmp_path
):
    path, _ = count_savepoint
    copy = tmp_path / "not-canonical"
    shutil.copytree(path, copy)
    edit_metadata(copy, lambda doc: doc["operators"]["count"]["subtasks"]["0"].pop("index"))
    with pytest.raises(UnsupportedSnapshotError, match=r"subtask 0.*[Tt]ake a savepoint"):
        read_keyed_state(spark, str(copy), "count", "count")
    with pytest.raises(UnsupportedSnapshotError, match=r"[Tt]ake a savepoint"):
        list_state(str(copy))


def test_a_corrupt_state_file_fails_the_read_naming_the_file(spark, count_savepoint, tmp_path):
    path, _ = count_savepoint
    copy = tmp_path / "corrupt"
    shutil.copytree(path, copy)
    handle = json.loads((copy / "_metadata").read_text())["operators"]["count"]["subtasks"]["1"]
    _kg, offset, _length = handle["index"]["key_groups"][0]
    damaged = copy / handle["file"]
    data = bytearray(damaged.read_bytes())
    data[offset + 8] ^= 0xFF  # a bit flip inside a key group's payload
    damaged.write_bytes(bytes(data))
    df = read_keyed_state(spark, str(copy), "count", "count", schema="key LONG, value LONG")
    with pytest.raises(Exception, match="checksum mismatch") as failure:
        df.collect()
    assert str(damaged) in str(failure.value)


def test_bad_bootstrap_input_is_refused(spark, count_savepoint, tmp_path):
    path, _ = count_savepoint
    twice = spark.createDataFrame([(1, 10), (1, 11)], "key LONG, value LONG")
    writer = SavepointWriter.new_savepoint(spark).with_keyed_state("count", twice, "key", "count")
    with pytest.raises(Exception, match="key 1 appears in more than one row"):
        writer.write(str(tmp_path / "duplicates"))
    assert not (tmp_path / "duplicates").exists()  # a failed write leaves nothing behind
    with pytest.raises(ValueError, match=r"no column\(s\) \['amount'\]"):
        SavepointWriter.new_savepoint(spark).with_keyed_state(
            "count", twice, "key", "count", value_column="amount"
        )
    one = spark.createDataFrame([(1, 10)], "key LONG, value LONG")
    with pytest.raises(FileExistsError, match="holds a completed checkpoint or savepoint"):
        SavepointWriter.new_savepoint(spark).with_keyed_state("count", one, "key", "count").write(
            path
        )
    (tmp_path / "not-empty").mkdir()
    (tmp_path / "not-empty" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not empty"):
        SavepointWriter.new_savepoint(spark).with_keyed_state("count", one, "key", "count").write(
            str(tmp_path / "not-empty")
        )
    assert (tmp_path / "not-empty" / "notes.txt").read_text() == "mine"


def test_broadcast_state_and_timers_read_back_as_written(spark, tmp_path):
    # timers as the timer service keeps them: map state __timers__, {(domain, timestamp): True}
    timers = spark.createDataFrame(
        [("a", (0, 1_000), True), ("a", (1, 5_000), True), ("b", (0, 2_000), True)],
        "key STRING, user_key STRUCT<domain: LONG, timestamp: LONG>, value BOOLEAN",
    )
    rules = {"max": 10, "min": -3}
    path = (
        SavepointWriter.new_savepoint(spark)
        .with_keyed_state("fn", timers, "key", "__timers__", "map", parallelism=2)
        .with_operator_state("fn", "rules", rules, mode="broadcast")
        .with_operator_state("plain", "tags", ["t"])
        .write(str(tmp_path / "sp"))
    )
    reader = SavepointReader.read(spark, path)
    got = reader.read_timers("fn").orderBy("key", "timestamp").collect()
    assert [tuple(r) for r in got] == [
        ("a", "EVENT_TIME", 1_000), ("a", "PROCESSING_TIME", 5_000), ("b", "EVENT_TIME", 2_000)
    ]  # fmt: skip
    assert {r.key: r.value for r in reader.read_broadcast_state("fn", "rules").collect()} == rules
    infos = {(s.uid, s.state_name): s for s in reader.list_state()}
    assert (infos[("fn", "rules")].kind, infos[("fn", "rules")].entries) == ("broadcast", 2)
    assert infos[("fn", "__timers__")].kind == "map"
    # every subtask holds a copy, as a job's broadcast state
    for _subtask, states in reader.snapshot.operator_state("fn"):
        assert states["rules"] == ("broadcast", sorted(rules.items()))
    with pytest.raises(StateNotFoundError, match="broadcast state: read it with read_broadcast"):
        reader.read_operator_state("fn", "rules")
    with pytest.raises(StateNotFoundError, match="has no timers"):
        reader.read_timers("plain")
