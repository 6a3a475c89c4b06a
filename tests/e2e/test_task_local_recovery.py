"""Task-local recovery end to end on Spark: after a failure the restore reads the keyed state
from the workers' local copies (no remote reads), and falls back to the checkpoint storage when
the local copies are gone or damaged; the committed output is exactly-once either way."""

from __future__ import annotations

import glob
import os
import sys

import cloudpickle
import pytest

from tests.e2e.jobs import InjectedFailure, RunningCount, count_job, flip_a_byte
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend

# Pytest imports this file as a top-level module the slot processes cannot import, so the
# classes defined here travel to them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailAfterSecondCheckpoint(RunningCount):
    """Subtask 0 fails once, in the first attempt, when its second checkpoint completed; before
    that it deletes or damages the task-local copies of that checkpoint's keyed state of every
    subtask (`local_damage`)."""

    def __init__(self, local_dir: str, local_damage: str | None) -> None:
        self.local_dir = local_dir
        self.local_damage = local_damage

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.acting = (
            runtime_context.get_attempt_number() == 0
            and runtime_context.get_index_of_this_subtask() == 0
        )
        self.completed = 0

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed += 1
        if not self.acting or self.completed < 2:
            return
        for path in glob.glob(f"{self.local_dir}/*/chk-{checkpoint_id}/count-*"):
            if self.local_damage == "delete":
                os.remove(path)
            elif self.local_damage == "flip":
                flip_a_byte(path)
        raise InjectedFailure(f"injected failure after checkpoint {checkpoint_id}")


@pytest.mark.parametrize(
    ("local_damage", "expected_reads"),
    [(None, (2, 0)), ("delete", (0, 2)), ("flip", (0, 2))],
    ids=["intact-copies-are-read", "deleted-copies-fall-back", "damaged-copies-fall-back"],
)
def test_a_restore_prefers_intact_local_copies_and_stays_exactly_once(
    spark, tmp_path, local_damage, expected_reads
):
    n = 20_000
    local_dir = tmp_path / "local"
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=10_000,
        count=FailAfterSecondCheckpoint(str(local_dir), local_damage),
        configuration={
            "state.backend.local-recovery": "true",
            "taskmanager.state.local.root-dirs": str(local_dir),
        },
    )
    client = env.execute_async("local recovery")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.restarts == 1
    # the keyed state of both subtasks of "count" was read where expected (local, remote)
    assert client.jobmaster.stats.metrics.restored_files == expected_reads
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
    # the job finished: its local copies are gone
    assert glob.glob(f"{local_dir}/*/chk-*") == []


def test_an_incremental_rocksdb_restore_reads_only_local_files_and_stays_exactly_once(
    spark, tmp_path
):
    n = 20_000
    local_dir = tmp_path / "local"
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=10_000,
        count=FailAfterSecondCheckpoint(str(local_dir), None),
        configuration={
            "state.backend.local-recovery": "true",
            "taskmanager.state.local.root-dirs": str(local_dir),
        },
    )
    env.set_state_backend(
        EmbeddedRocksDBStateBackend(
            enable_incremental_checkpointing=True, local_dir=str(tmp_path / "rocksdb")
        )
    )
    client = env.execute_async("incremental local recovery")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    stats = client.jobmaster.stats
    assert stats.restarts == 1 and stats.restored_from is not None
    # every SST and private file of both subtasks' RocksDB checkpoints came from the local
    # copies (each has at least CURRENT, MANIFEST, OPTIONS and one SST file): none remotely
    local_reads, remote_reads = stats.metrics.restored_files
    print(f"restored files: {local_reads} local, {remote_reads} remote")
    assert remote_reads == 0 and local_reads >= 8
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
    assert glob.glob(f"{local_dir}/*/chk-*") == []


def test_without_local_recovery_nothing_is_written_locally_and_restores_read_remotely(
    spark, tmp_path
):
    n = 10_000
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=n,
        rate=10_000,
        count=FailAfterSecondCheckpoint(str(tmp_path / "local"), None),
        configuration={"taskmanager.state.local.root-dirs": str(tmp_path / "local")},
    )
    client = env.execute_async("no local recovery")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.metrics.restored_files == (0, 2)
    assert not (tmp_path / "local").exists()
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
