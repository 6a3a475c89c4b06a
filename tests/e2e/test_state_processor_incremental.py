"""The state processor reads incremental RocksDB checkpoints: value, list and map state and
timers of a retained incremental checkpoint read as the same rows as a savepoint of the same
point, agree with the committed output, answer Spark SQL, and rewrite into a self-contained
canonical savepoint. Real RocksDB, real Spark (the shared `spark` fixture)."""

from __future__ import annotations

import collections
import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.state_processor_jobs import (
    FAR_FUTURE_MS,
    PROBE_KEYS,
    incremental_probe_job,
    run_until_savepoint,
)
from tests.support.output import committed_lines
from tests.support.waiting import resolved, wait_for_checkpoints, wait_for_end
from tidegate.checkpoint.errors import MissingCheckpointFileError
from tidegate.checkpoint.storage import read_checkpoint_metadata, resolve_checkpoint_path
from tidegate.common import JobStatus
from tidegate.state.incremental_handles import resolve
from tidegate.state_processor import SavepointReader, SavepointWriter

KEYED_STATES = {"count": "value", "seen": "list", "by_rest": "map", "__timers__": "map"}


@pytest.fixture(scope="module")
def incremental_and_savepoint(spark, tmp_path_factory):
    """(retained incremental checkpoint, savepoint of the same state, committed lines, tmp):
    job 1 runs on incremental RocksDB and is cancelled after 3 checkpoints (retained on
    cancellation); job 2 restores that checkpoint, drops every record before the probe (its
    state stays as restored) and stops with a savepoint."""
    tmp = tmp_path_factory.mktemp("incremental-state")
    first = incremental_probe_job(tmp / "out1", tmp / "chk", tmp / "rocksdb", None, False)
    client = first.execute_async("incremental probe")
    wait_for_checkpoints(client, 3)
    resolved(client.cancel(), "the job to be cancelled")
    wait_for_end(client)
    assert client.get_job_status().result() is JobStatus.CANCELED
    checkpoint = resolve_checkpoint_path(client.jobmaster.storage.job_dir)
    second = incremental_probe_job(tmp / "out2", tmp / "chk2", tmp / "rocksdb2", checkpoint, True)
    savepoint = run_until_savepoint(second, tmp / "savepoints", checkpoints=1)
    assert committed_lines(tmp / "out2") == []  # job 2 changed no state
    return checkpoint, savepoint, committed_lines(tmp / "out1"), tmp


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _read_all(reader: SavepointReader) -> dict[str, list[tuple]]:
    found = {
        name: _rows(reader.read_keyed_state("probe", name, include_key_group=True))
        for name in ("count", "seen", "by_rest")
    }
    found["timers"] = _rows(reader.read_timers("probe", include_key_group=True))
    return found


def test_every_keyed_state_and_the_timers_of_an_incremental_checkpoint_read_as_its_savepoint(
    spark, incremental_and_savepoint
):
    checkpoint, savepoint, _lines, _tmp = incremental_and_savepoint
    metadata = read_checkpoint_metadata(checkpoint)
    assert {(uid, s) for uid, s, _ in metadata.incremental_handles()} == {
        ("probe", 0),
        ("probe", 1),
    }
    assert list(read_checkpoint_metadata(savepoint).incremental_handles()) == []
    incremental = SavepointReader.read(spark, checkpoint)
    state = _read_all(incremental)
    assert state == _read_all(SavepointReader.read(spark, savepoint))
    assert len(state["count"]) == PROBE_KEYS
    # the columns are the canonical path's
    assert incremental.read_keyed_state("probe", "seen").columns == ["key", "position", "value"]
    assert incremental.read_timers("probe").columns == ["key", "time_domain", "timestamp"]
    # the operator state of the incremental subtasks is in their state files, as always
    assert incremental.snapshot.operator_state("tagger") == (
        SavepointReader.read(spark, savepoint).snapshot.operator_state("tagger")
    )


def test_the_incremental_state_agrees_with_itself_and_the_committed_output(
    spark, incremental_and_savepoint
):
    checkpoint, _savepoint, lines, _tmp = incremental_and_savepoint
    reader = SavepointReader.read(spark, checkpoint)
    seen = collections.defaultdict(dict)
    for key, position, value, _kg, _subtask in _rows(
        reader.read_keyed_state("probe", "seen", include_key_group=True)
    ):
        seen[key][position] = value
    assert all(sorted(p) == list(range(len(p))) for p in seen.values())
    assert sum(map(len, seen.values())) > 0
    # every committed record is in the state where its output line says
    assert lines
    for line in lines:
        key, value, position = map(int, line.split(","))
        assert seen[key][position] == value
    counts = {r.key: r.value for r in reader.read_keyed_state("probe", "count").collect()}
    assert counts == {k: len(v) for k, v in seen.items()}
    maps = collections.defaultdict(dict)
    for r in reader.read_keyed_state("probe", "by_rest").collect():
        maps[r.key][r.user_key] = r.value
    assert dict(maps) == {
        k: dict(collections.Counter(v % 3 for v in values.values())) for k, values in seen.items()
    }
    timers = {(r.key, r.time_domain, r.timestamp) for r in reader.read_timers("probe").collect()}
    assert timers == {
        (k, "PROCESSING_TIME", FAR_FUTURE_MS + v)
        for k, values in seen.items()
        for v in values.values()
    }


def test_spark_sql_and_list_state_over_an_incremental_checkpoint(spark, incremental_and_savepoint):
    checkpoint, _savepoint, _lines, _tmp = incremental_and_savepoint
    reader = SavepointReader.read(spark, checkpoint)
    reader.read_keyed_state("probe", "count").createOrReplaceTempView("inc_count")
    reader.read_keyed_state("probe", "seen").createOrReplaceTempView("inc_seen")
    mismatched = spark.sql(
        "SELECT c.key FROM inc_count c JOIN "
        "(SELECT key, COUNT(*) AS n FROM inc_seen GROUP BY key) s ON c.key = s.key "
        "WHERE c.value != s.n"
    ).collect()
    assert mismatched == []
    assert spark.sql("SELECT COUNT(*) AS n FROM inc_count").first().n == PROBE_KEYS

    metadata = read_checkpoint_metadata(checkpoint)
    files = sum(f.size for _uid, _s, inc in metadata.incremental_handles() for f in inc.files)
    infos = {s.state_name: s for s in reader.list_state() if s.uid == "probe"}
    assert {name: s.kind for name, s in infos.items()} == KEYED_STATES
    for info in infos.values():
        assert info.scope == "keyed" and info.incremental
        assert info.key_group_ranges == ((0, 64), (64, 128))
        assert (info.key_groups, info.size_bytes) == (128, files)


def test_an_incremental_checkpoint_rewrites_into_a_self_contained_canonical_savepoint(
    spark, incremental_and_savepoint
):
    checkpoint, savepoint, _lines, tmp = incremental_and_savepoint
    expected = _read_all(SavepointReader.read(spark, savepoint))
    # a missing RocksDB file fails the read, naming it
    metadata = read_checkpoint_metadata(checkpoint)
    broken = tmp / "broken"
    shutil.copytree(checkpoint, broken / Path(checkpoint).name)
    shutil.copytree(Path(checkpoint).parent / "shared", broken / "shared")
    copy = str(broken / Path(checkpoint).name)
    handles = metadata.incremental_handles()
    subtask, inc = next((s, inc) for uid, s, inc in handles if uid == "probe" and inc.shared)
    lost = resolve(copy, inc.shared[0].file)  # an SST file of the probe's state
    os.remove(lost)
    what = f"incremental rocksdb state of subtask {subtask}"
    with pytest.raises(Exception, match=what) as failure:
        SavepointReader.read(spark, copy).read_keyed_state("probe", "count", raw=True).collect()
    assert os.path.basename(lost) in str(failure.value)
    assert f"{MissingCheckpointFileError.__name__}" in str(failure.value)

    rewritten = SavepointWriter.from_existing_savepoint(spark, checkpoint).write(
        str(tmp / "rewritten")
    )
    assert list(read_checkpoint_metadata(rewritten).incremental_handles()) == []
    shutil.rmtree(tmp / "chk")  # the job's checkpoints and shared files: no longer needed
    assert _read_all(SavepointReader.read(spark, rewritten)) == expected
    # ... which a job restores: its own savepoint (no record reached the probe) holds the same
    job = incremental_probe_job(tmp / "out3", tmp / "chk3", tmp / "rocksdb3", rewritten, True)
    again = run_until_savepoint(job, tmp / "savepoints3", checkpoints=1)
    assert _read_all(SavepointReader.read(spark, again)) == expected
