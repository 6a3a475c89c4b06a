"""The rocksdb state backend end to end on Spark: the exactly-once running count survives injected
exceptions and a kill -9 with its keyed state in RocksDB, and savepoints move a job from rocksdb
to hashmap and back (the canonical format), each compared with the reference record by record."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from tests.e2e.jobs import FAILURE_SCHEDULE, count_job, kill_when_scheduled
from tests.e2e.savepoint_jobs import savepoint_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.snapshots import stop_with_savepoint
from tests.support.waiting import resolved
from tidegate.common import JobStatus
from tidegate.datastream import EmbeddedRocksDBStateBackend
from tidegate.state.rocksdb_instance import ROOT_NAME


def instance_dirs(local_dir: Path) -> list[str]:
    return glob.glob(f"{local_dir}/{ROOT_NAME}/*/*")


def test_a_rocksdb_job_with_exceptions_and_a_kill_9_commits_exactly_the_reference(spark, tmp_path):
    n = 30_000
    local = tmp_path / "rocksdb"
    markers = tmp_path / "markers"
    markers.mkdir()
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=6_000,
        interval_ms=200,
        failure_markers=str(markers),  # exceptions in map, snapshot, restore and close
    )
    env.set_state_backend(EmbeddedRocksDBStateBackend(local_dir=str(local)))
    client = env.execute_async("rocksdb exactly once")
    killer = kill_when_scheduled(client, str(markers))  # and a kill -9 of a slot
    resolved(client.get_job_execution_result(), "the job to finish", timeout=600)
    killer.join(5)
    fired = sorted(p for p in os.listdir(markers) if p in FAILURE_SCHEDULE)
    assert fired == sorted(FAILURE_SCHEDULE), f"only {fired} fired"
    assert client.jobmaster.stats.restarts == len(FAILURE_SCHEDULE)
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
    assert instance_dirs(local) == []  # disposed at the end; older attempts' deleted


def test_savepoints_move_a_job_from_rocksdb_to_hashmap_and_back_exactly_once(spark, tmp_path):
    n = 30_000
    local = tmp_path / "rocksdb"
    rocksdb = {"state.backend.type": "rocksdb", "state.backend.rocksdb.localdir": str(local)}
    lines: list[str] = []
    restore: dict[str, str] = {}
    for step, config in enumerate([rocksdb, {"state.backend.type": "hashmap"}, rocksdb]):
        out = tmp_path / f"out{step}"
        rate = 5_000 if step < 2 else None  # the last step is not stopped: at full speed
        env = savepoint_job(
            out, tmp_path / "chk", runner="spark", n=n, rate=rate, config={**config, **restore}
        )
        client = env.execute_async(f"step {step}")
        if step < 2:  # rocksdb -> savepoint -> hashmap -> savepoint -> rocksdb, to the end
            path = stop_with_savepoint(client, tmp_path / "savepoints")
            assert client.get_job_status().result() is JobStatus.FINISHED
            restore = {"execution.savepoint.path": path}
        else:
            resolved(client.get_job_execution_result(), "the job to finish")
        assert client.jobmaster.spec.state_backend.__class__.__name__ == (
            "HashMapStateBackend" if step == 1 else "EmbeddedRocksDBStateBackend"
        )
        step_lines = committed_lines(out)
        assert step_lines, f"step {step} committed nothing"
        lines += step_lines
    check_exactly_once(lines, n, 2)
    assert instance_dirs(local) == []
