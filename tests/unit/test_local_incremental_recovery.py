"""Task-local recovery of incremental rocksdb checkpoints with real RocksDB and real files: the
snapshot's RocksDB checkpoint is kept as the local copy, a restore takes each intact file from
it (counting remote reads) and downloads the missing or damaged ones, and pruning keeps only
the newest completed checkpoint's copies."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

import pytest

from tests.e2e.jobs import flip_a_byte
from tests.unit.test_incremental_snapshots import Job, M, _owns, fill, read, restored
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.runtime.restore import RestoredOperatorState
from tidegate.state import local_incremental
from tidegate.state.handles import IncrementalFile
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.keygroups import key_group_range
from tidegate.state.local_incremental import local_copy_dir
from tidegate.state.local_recovery import LocalStateStore


@pytest.fixture
def job(tmp_path):
    job = Job(tmp_path)
    job.local = LocalStateStore(str(tmp_path / "task-local"), "job")
    yield job
    job.close()


def restore(
    job: Job, metadata: CheckpointMetadata, backend, parallelism_before: int = 1
) -> tuple[int, int]:
    """Restore `metadata` into `backend` as a task does; (files read locally, remotely)."""
    handles = restored(job, metadata, backend.key_group_range, True, parallelism_before)
    return RestoredOperatorState(keyed=tuple(handles)).restore_keyed(backend, job.local)


def files_of(metadata: CheckpointMetadata, subtask: int = 0) -> list[IncrementalFile]:
    return list(metadata.operators["op"].subtasks[subtask].incremental.files)


def copy_dir(job: Job, metadata: CheckpointMetadata, subtask: int = 0) -> str:
    inc = metadata.operators["op"].subtasks[subtask].incremental
    return local_copy_dir(job.local, metadata.checkpoint_id, inc.backend_id)


def two_checkpoints(job: Job) -> tuple[dict, dict]:
    """Checkpoint 1 of 10,000 keys, checkpoint 2 (incremental: it reuses 1's SST files) after
    changing 10% of them; and the values as of checkpoint 2."""
    backend = job.backend()
    fill(backend, range(10_000))
    job.snapshot(1, [backend])
    fill(backend, range(0, 10_000, 10), lambda k: -k)
    second = job.snapshot(2, [backend])
    shared = second.operators["op"].subtasks[0].incremental.shared
    assert any(not f.uploaded for f in shared)
    return second, read(backend, range(10_000))


def test_a_restore_of_an_incremental_checkpoint_reads_every_file_from_the_local_copy(job):
    second, expected = two_checkpoints(job)
    files = files_of(second)
    # the uploaded RocksDB checkpoint was kept (moved) as the local copy, under RocksDB names
    assert sorted(os.listdir(copy_dir(job, second))) == sorted(f.name for f in files)
    assert not os.listdir(os.path.join(job.backends[0].instance.path, "checkpoints"))
    # the remote SST files are not needed at all: delete them
    shutil.rmtree(os.path.join(job.storage.job_dir, "shared"))
    again = job.backend()
    assert restore(job, second, again) == (len(files), 0)
    assert read(again, range(10_000)) == expected
    # the local copy is intact after the restored database was opened and written
    fill(again, range(100), lambda k: k * 3)
    again.instance.db.compact_range(None, None)
    assert restore(job, second, job.backend()) == (len(files), 0)


def test_a_deleted_or_damaged_local_file_is_downloaded_and_the_others_read_locally(job):
    second, expected = two_checkpoints(job)
    files = files_of(second)
    local = copy_dir(job, second)
    ssts = [f.name for f in files if f.name.endswith(".sst")]
    assert len(ssts) >= 2
    os.remove(os.path.join(local, ssts[0]))
    flip_a_byte(os.path.join(local, ssts[1]))
    manifest = next(f.name for f in files if f.name.startswith("MANIFEST"))
    with open(os.path.join(local, manifest), "ab") as f:
        f.write(b"x")  # another size
    again = job.backend()
    assert restore(job, second, again) == (len(files) - 3, 3)
    assert read(again, range(10_000)) == expected
    # damaged copies are deleted, so the next restore does not check them again
    assert not os.path.exists(os.path.join(local, ssts[1]))
    assert not os.path.exists(os.path.join(local, manifest))


def test_a_rescaled_restore_into_the_hashmap_backend_reads_each_old_subtasks_local_copy(job):
    old = [job.backend(key_group_range(i, 2, M)) for i in range(2)]
    for backend in old:
        fill(backend, [k for k in range(4000) if _owns(backend, k)], str)
    metadata = job.snapshot(1, old)
    total = len(files_of(metadata, 0)) + len(files_of(metadata, 1))
    heap = HeapKeyedStateBackend(M, range(M))
    assert restore(job, metadata, heap, parallelism_before=2) == (total, 0)
    assert read(heap, range(4000)) == {k: str(k) for k in range(4000)}


def test_a_completed_checkpoint_prunes_the_local_copies_of_older_ones(job, tmp_path):
    backend = job.backend()
    for cid in (1, 2, 3):
        fill(backend, range(cid * 100, cid * 100 + 500))
        third = job.snapshot(cid, [backend])
    job_dir = tmp_path / "task-local" / "job"
    assert os.listdir(job_dir) == ["chk-3"]
    assert os.path.isdir(copy_dir(job, third))
    # a checkpoint taken but not yet completed keeps its copy until a later one completes
    fill(backend, range(5))
    job.snapshot(4, [backend], notify=False)
    assert sorted(os.listdir(job_dir)) == ["chk-3", "chk-4"]
    job.local.remove_job()
    assert not job_dir.exists()


class _CrossDeviceOs:
    """`os` as seen across two filesystems: renames and hard links fail with EXDEV."""

    def __getattr__(self, name: str):
        return getattr(os, name)

    @staticmethod
    def rename(*_args, **_kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    link = rename


def test_a_local_root_on_another_filesystem_gets_a_copy_of_the_files(job, tmp_path, monkeypatch):
    shm = "/dev/shm"
    other_fs = os.access(shm, os.W_OK) and os.stat(shm).st_dev != os.stat(tmp_path).st_dev
    if not other_fs:
        # No second filesystem on this machine: the local-copy module's moves and hard links
        # fail as they would across filesystems (EXDEV), so the same copying path runs.
        monkeypatch.setattr(local_incremental, "os", _CrossDeviceOs())
    with tempfile.TemporaryDirectory(dir=shm if other_fs else tmp_path) as root:
        job.local = LocalStateStore(root, "job")
        second, expected = two_checkpoints(job)
        kept = copy_dir(job, second)
        if other_fs:
            assert os.stat(kept).st_dev != os.stat(tmp_path).st_dev
        # copied, not linked: the local copy shares no file with the database
        assert all(os.stat(os.path.join(kept, f)).st_nlink == 1 for f in os.listdir(kept))
        again = job.backend()
        assert restore(job, second, again) == (len(files_of(second)), 0)
        assert read(again, range(10_000)) == expected


def test_an_unusable_local_root_neither_fails_the_checkpoint_nor_the_restore(job, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the local root should be")
    job.local = LocalStateStore(str(blocker), "job")
    second, expected = two_checkpoints(job)
    again = job.backend()
    assert restore(job, second, again) == (0, len(files_of(second)))
    assert read(again, range(10_000)) == expected


def test_without_local_recovery_every_file_is_downloaded(job):
    second, expected = two_checkpoints(job)
    job.local = None
    again = job.backend()
    assert restore(job, second, again) == (0, len(files_of(second)))
    assert read(again, range(10_000)) == expected
