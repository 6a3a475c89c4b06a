"""Incremental checkpoints end to end on Spark, of the rocksdb backend (SST files) and of the
hashmap backend (a changelog chain): the exactly-once running count survives injected exceptions
and a kill -9 restoring from incremental checkpoints, and a job restores an incremental
checkpoint rescaled (2 -> 3 subtasks), also with the rocksdb changelog after a kill -9; output
compared record by record with the reference.
NO_CLAIM leaves the restored checkpoint's shared files alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.jobs import (
    FAILURE_SCHEDULE,
    RunningCount,
    check_restarts,
    count_job,
    kill_slots,
    kill_when_scheduled,
)
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tests.support.references import NUM_KEYS, check_exactly_once
from tests.support.waiting import resolved, wait_for_checkpoints, wait_for_end, wait_until
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.storage import read_checkpoint_metadata, resolve_checkpoint_path
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.common import JobStatus
from tidegate.datastream import (
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointRetention,
    HashMapStateBackend,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource


def chain_files(cp) -> list:
    return [f for _, _, inc in cp.metadata.incremental_handles() for f in inc.shared]


def reused_files(metadata: CheckpointMetadata) -> int:
    return sum(
        1 for _, _, inc in metadata.incremental_handles() for f in inc.shared if not f.uploaded
    )


BACKENDS = ["rocksdb", "hashmap"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_incremental_job_with_exceptions_and_a_kill_9_is_exactly_once(spark, tmp_path, backend):
    n = 30_000
    markers = tmp_path / "markers"
    markers.mkdir()
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=6_000,
        interval_ms=200,
        failure_markers=str(markers),
        configuration={"state.backend.incremental": "true"},
    )
    if backend == "rocksdb":
        env.set_state_backend(EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "rocksdb")))
    else:
        env.set_state_backend(HashMapStateBackend())  # incremental from the configuration
    client = env.execute_async("incremental exactly once")
    killer = kill_when_scheduled(client, str(markers))
    jm = client.jobmaster
    # what failures leave behind, planted before the kill: the restart's sweep deletes it
    wait_until(lambda: (markers / "restore").exists(), "the restore failure fired", job=client)
    job_dir = Path(jm.storage.job_dir)
    planted = [job_dir / "chk-0" / "count-0-g1-0a0b0c0d0e0f.state", job_dir / "shared" / "orphan"]
    for path in planted:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"left by a failed attempt")
    wait_until(
        lambda: jm.stats.restarts >= 4 and jm.status.name == "RUNNING",
        "the job runs again after the kill",
        job=client,
    )
    assert [path for path in planted if path.exists()] == []
    resolved(client.get_job_execution_result(), "the job to finish", timeout=600)
    killer.join(5)
    fired = sorted(p for p in os.listdir(markers) if p in FAILURE_SCHEDULE)
    assert fired == sorted(FAILURE_SCHEDULE), f"only {fired} fired"
    assert jm.stats.restarts == len(FAILURE_SCHEDULE)
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
    latest = jm.store.latest()
    handles = list(latest.metadata.incremental_handles())
    assert handles, "the checkpoints were not incremental"
    assert {inc.backend for _, _, inc in handles} == {backend}
    if backend == "hashmap":  # the restores read chains with changelogs
        assert any(f.name.startswith("changelog") for cp in jm.store.all() for f in chain_files(cp))
    # the job finished: its checkpoints and every shared file it owned are deleted
    shared = Path(jm.storage.job_dir) / "shared"
    assert not shared.exists() or sorted(os.listdir(shared)) == []


def rescalable_job(
    out: Path, checkpoints: Path, n: int, parallelism: int, config: dict, backend: str = "rocksdb"
):
    """numbers (2 subtasks) -> key_by -> running count (`parallelism`) -> FileSink."""
    incremental = {"state.backend.type": backend, "state.backend.incremental": "true"}
    env = job_environment(
        "spark",
        checkpoints,
        parallelism=parallelism,
        interval_ms=150,
        restarts=3,
        config={**incremental, **config},
    )
    config_ = env.get_checkpoint_config()
    config_.set_num_retained_checkpoints(2)
    config_.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=4_000)
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(2)
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_incremental_checkpoint_restores_rescaled_from_2_to_3_subtasks(spark, tmp_path, backend):
    n = 24_000
    local = {"state.backend.rocksdb.localdir": str(tmp_path / "rocksdb")}
    first = rescalable_job(tmp_path / "out1", tmp_path / "chk", n, 2, local, backend)
    client = first.execute_async("incremental at 2")
    jm = client.jobmaster
    wait_for_checkpoints(client, 4)
    # savepoints stay canonical (self-contained) with incremental checkpoints enabled
    savepoint = resolved(client.trigger_savepoint(str(tmp_path / "savepoints")), "the savepoint")
    savepoint_metadata = read_checkpoint_metadata(savepoint)
    assert list(savepoint_metadata.incremental_handles()) == []
    kept = savepoint_metadata.operators["count"].handles()
    assert sum(len(h.index.key_group_offsets) for h in kept) == NUM_KEYS
    wait_for_checkpoints(client, 1)
    resolved(client.cancel(), "the job to be cancelled")
    wait_for_end(client)
    assert client.get_job_status().result() is JobStatus.CANCELED
    # a checkpoint reuses files of the one before (rocksdb: SST files, unless a compaction
    # rewrote them all; hashmap: the chain up to its new changelog)
    assert any(reused_files(cp.metadata) > 0 for cp in jm.store.all())
    restored_dir = resolve_checkpoint_path(jm.storage.job_dir)
    metadata = read_checkpoint_metadata(restored_dir)
    handles = list(metadata.incremental_handles())
    assert {(uid, subtask) for uid, subtask, _ in handles} == {("count", 0), ("count", 1)}
    if backend == "hashmap":  # the rescaled restore applies changelogs
        assert all(inc.shared[-1].name.startswith("changelog") for _, _, inc in handles)
    shared_before = metadata.references(restored_dir).paths
    assert shared_before and all(os.path.exists(p) for p in shared_before)

    second = rescalable_job(
        tmp_path / "out2",
        tmp_path / "chk",
        n,
        3,
        {**local, "execution.state-recovery.path": restored_dir},
        backend,
    )
    client2 = second.execute_async("incremental at 3")
    resolved(client2.get_job_execution_result(), "the job to finish", timeout=600)
    assert client2.get_job_status().result() is JobStatus.FINISHED
    assert client2.jobmaster.stats.restored_from == metadata.checkpoint_id
    lines = committed_lines(tmp_path / "out1") + committed_lines(tmp_path / "out2")
    check_exactly_once(lines, n, 2)
    # NO_CLAIM: the restored checkpoint's shared files are untouched; the new job's own are gone
    assert all(os.path.exists(p) for p in shared_before)
    own_shared = Path(client2.jobmaster.storage.job_dir) / "shared"
    assert not own_shared.exists() or sorted(os.listdir(own_shared)) == []


def test_a_claimed_incremental_checkpoint_is_deleted_but_not_the_files_of_its_siblings(
    spark, tmp_path
):
    n = 16_000
    local = {"state.backend.rocksdb.localdir": str(tmp_path / "rocksdb")}
    first = rescalable_job(tmp_path / "out1", tmp_path / "chk", n, 2, local)
    client = first.execute_async("incremental, claimed later")
    jm = client.jobmaster
    wait_for_checkpoints(client, 4)
    resolved(client.cancel(), "the job to be cancelled")
    wait_for_end(client)
    (older, _), (latest, _) = [(cp.path, cp) for cp in jm.store.all()]
    older_files = read_checkpoint_metadata(older).references(older).paths
    latest_files = read_checkpoint_metadata(latest).references(latest).paths
    assert latest_files - older_files  # the latest uploaded files of its own

    restore = {
        **local,
        "execution.state-recovery.path": latest,
        "execution.state-recovery.claim-mode": "CLAIM",
    }
    second = rescalable_job(tmp_path / "out2", tmp_path / "chk", n, 2, restore)
    client2 = second.execute_async("claiming")
    resolved(client2.get_job_execution_result(), "the job to finish", timeout=600)
    lines = committed_lines(tmp_path / "out1") + committed_lines(tmp_path / "out2")
    check_exactly_once(lines, n, 2)
    # the claimed checkpoint and the shared files only it used are gone ...
    assert not os.path.exists(latest)
    assert not any(os.path.exists(p) for p in latest_files - older_files)
    # ... while the older retained checkpoint beside it is intact, shared files included
    verify_checkpoint(read_checkpoint_metadata(older), older).raise_for_problems()


def test_a_changelog_job_killed_then_restored_at_3_subtasks_is_exactly_once(spark, tmp_path):
    """rocksdb with `state.backend.changelog.enabled`: a kill -9 restores the chain of RocksDB
    files and changelogs at 2 subtasks, then a retained checkpoint's chain restores at 3."""
    n = 12_000
    config = {
        "state.backend.rocksdb.localdir": str(tmp_path / "rocksdb"),
        "state.backend.changelog.enabled": "true",
    }
    first = rescalable_job(tmp_path / "out1", tmp_path / "chk", n, 2, config)
    client = first.execute_async("changelog at 2")
    jm = client.jobmaster
    killer = kill_slots(client, 1, after_checkpoints=2)
    killer.join(120)
    assert len(killer.killed) == 1, "the slot was not killed"
    wait_for_checkpoints(client, 2)
    resolved(client.cancel(), "the job to be cancelled")
    wait_for_end(client)
    check_restarts(client, kills=1)
    restored_dir = resolve_checkpoint_path(jm.storage.job_dir)
    metadata = read_checkpoint_metadata(restored_dir)
    chains = [inc.shared for _, _, inc in metadata.incremental_handles()]
    assert len(chains) == 2 and all(
        any(f.name.startswith("changelog") for f in chain) for chain in chains
    ), "the restored checkpoint has no changelogs"
    second = rescalable_job(
        tmp_path / "out2",
        tmp_path / "chk",
        n,
        3,
        {**config, "execution.state-recovery.path": restored_dir},
    )
    client2 = second.execute_async("changelog at 3")
    resolved(client2.get_job_execution_result(), "the job to finish", timeout=600)
    assert client2.jobmaster.stats.restored_from == metadata.checkpoint_id
    lines = committed_lines(tmp_path / "out1") + committed_lines(tmp_path / "out2")
    check_exactly_once(lines, n, 2)
