"""Checkpoint storage on real filesystems: temporary local directories and fsspec's memory://."""

from __future__ import annotations

import errno
import os
import stat
import uuid
from pathlib import Path

import pytest

from tidegate.checkpoint.errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
)
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.storage import CheckpointStorage, resolve_checkpoint_path


def metadata(checkpoint_id: int, job_name: object = None) -> CheckpointMetadata:
    """A checkpoint's metadata; `job_name` tells two writes apart."""
    return CheckpointMetadata(
        job_id="job-1",
        checkpoint_id=checkpoint_id,
        timestamp_ms=1_000 * checkpoint_id,
        generation=1,
        job_name=job_name,  # type: ignore[arg-type]
    )


def complete(storage: CheckpointStorage, checkpoint_id: int) -> str:
    directory = storage.create_checkpoint_dir(checkpoint_id)
    storage.write_bytes(f"{directory}/map-0-abc.state", b"state")
    storage.write_metadata(directory, metadata(checkpoint_id))
    return directory


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(str(tmp_path / "ckpt"), "job-1")


@pytest.fixture
def memory_storage() -> CheckpointStorage:
    return CheckpointStorage(f"memory://tidegate-test-{uuid.uuid4().hex}", "job-1")


# ------------------------------------------------------------------ layout and files


def test_checkpoints_live_in_chk_directories_under_the_job_directory(tmp_path, storage):
    assert storage.job_dir == f"{tmp_path}/ckpt/job-1"
    assert storage.checkpoint_dir(12) == f"{tmp_path}/ckpt/job-1/chk-12"


def test_a_relative_base_becomes_absolute_and_uris_keep_their_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert CheckpointStorage("ckpt", "j").job_dir == f"{tmp_path}/ckpt/j"
    assert CheckpointStorage(f"file://{tmp_path}/", "j").job_dir == f"file://{tmp_path}/j"
    assert CheckpointStorage("memory://bucket/ckpt", "j").checkpoint_dir(1) == (
        "memory://bucket/ckpt/j/chk-1"
    )


def test_a_job_id_that_is_not_a_single_directory_name_is_rejected():
    for job_id in ("", "a/b", ".."):
        with pytest.raises(ValueError):
            CheckpointStorage("/tmp/ckpt", job_id)


@pytest.mark.parametrize("fixture", ["storage", "memory_storage"])
def test_files_written_are_read_back_and_parent_directories_are_created(fixture, request):
    storage: CheckpointStorage = request.getfixturevalue(fixture)
    directory = storage.checkpoint_dir(1)
    storage.write_bytes(f"{directory}/a.state", b"abc")
    with storage.open_write(f"{directory}/sub/b.state") as f:
        f.write(b"0123456789")
    assert storage.read_bytes(f"{directory}/a.state") == b"abc"
    with storage.open_read(f"{directory}/sub/b.state") as f:
        f.seek(6)
        assert f.read() == b"6789"
    assert storage.size_of(directory) == 13


# ------------------------------------------------------------------ _metadata


@pytest.mark.parametrize("fixture", ["storage", "memory_storage"])
def test_metadata_is_written_and_read_back(fixture, request):
    storage: CheckpointStorage = request.getfixturevalue(fixture)
    directory = storage.create_checkpoint_dir(3)
    path = storage.write_metadata(directory, metadata(3, "written"))
    assert path == f"{directory}/_metadata"
    assert storage.read_metadata(directory) == metadata(3, "written")


def test_writing_metadata_leaves_no_temporary_file(storage):
    directory = storage.create_checkpoint_dir(1)
    storage.write_metadata(directory, metadata(1))
    assert os.listdir(directory) == ["_metadata"]


@pytest.mark.parametrize("fixture", ["storage", "memory_storage"])
def test_metadata_is_never_written_over_an_existing_one(fixture, request):
    storage: CheckpointStorage = request.getfixturevalue(fixture)
    directory = storage.create_checkpoint_dir(1)
    storage.write_metadata(directory, metadata(1, "first"))
    with pytest.raises(CheckpointStorageError, match=r"chk-1/_metadata: it exists already"):
        storage.write_metadata(directory, metadata(1, "second"))
    assert storage.read_metadata(directory).job_name == "first"
    assert storage.fs.ls(storage._fs_path(directory), detail=False)[0].endswith("_metadata")
    assert len(storage.fs.ls(storage._fs_path(directory))) == 1


def test_a_failing_metadata_write_leaves_no_file_and_no_temporary(storage, monkeypatch):
    directory = storage.create_checkpoint_dir(1)

    def disk_error(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", disk_error)  # fault injection: the disk fails on fsync
    with pytest.raises(CheckpointStorageError, match=r"chk-1/_metadata.*Input/output error"):
        storage.write_metadata(directory, metadata(1))
    monkeypatch.undo()
    assert os.listdir(directory) == []
    storage.write_metadata(directory, metadata(1, "retried"))
    assert storage.read_metadata(directory).job_name == "retried"


def _failing_directory_fsync(monkeypatch, error: OSError) -> None:
    """Fault injection: os.fsync of a directory raises `error`, of a file works."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise error
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_metadata_whose_directory_entry_cannot_be_made_durable_is_removed(storage, monkeypatch):
    directory = storage.create_checkpoint_dir(1)
    _failing_directory_fsync(monkeypatch, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(
        CheckpointStorageError,
        match=r"could not write checkpoint metadata .*chk-1/_metadata: \[Errno 5\] Input/output "
        r"error while making it durable \(fsync of the directory .*chk-1 failed, so the file was "
        r"removed\).*this checkpoint is not completed",
    ):
        storage.write_metadata(directory, metadata(1))
    assert os.listdir(directory) == []  # never listed as a completed checkpoint
    assert storage.list_checkpoints() == []


def test_a_filesystem_that_cannot_fsync_directories_still_takes_metadata(storage, monkeypatch):
    directory = storage.create_checkpoint_dir(1)
    _failing_directory_fsync(monkeypatch, OSError(errno.EINVAL, "Invalid argument"))
    storage.write_metadata(directory, metadata(1, "written"))
    assert storage.read_metadata(directory).job_name == "written"


def test_metadata_that_cannot_be_encoded_is_not_written(storage):
    directory = storage.create_checkpoint_dir(1)
    with pytest.raises(ValueError):
        storage.write_metadata(directory, metadata(1, float("nan")))
    assert os.listdir(directory) == []


def test_reading_metadata_of_an_incomplete_checkpoint_says_it_did_not_complete(storage):
    directory = storage.create_checkpoint_dir(4)
    with pytest.raises(CheckpointNotFoundError, match="chk-4 holds no _metadata"):
        storage.read_metadata(directory)


# ------------------------------------------------------------------ listing and discarding


def test_a_discard_that_races_a_writer_leaves_the_directory_with_a_warning(
    storage, monkeypatch, caplog
):
    directory = storage.create_checkpoint_dir(3)

    def rm_failing_with(code):
        def rm(path, recursive=False):
            raise OSError(code, os.strerror(code), path)

        return rm

    # a writer added a file after rm listed the directory
    monkeypatch.setattr(storage.fs, "rm", rm_failing_with(errno.ENOTEMPTY))
    storage.discard_checkpoint_dir(directory)
    assert "left behind: a file was written into it meanwhile" in caplog.text
    monkeypatch.setattr(storage.fs, "rm", rm_failing_with(errno.EACCES))
    with pytest.raises(PermissionError):  # any other failure is the caller's
        storage.discard_checkpoint_dir(directory)


@pytest.mark.parametrize("fixture", ["storage", "memory_storage"])
def test_only_checkpoints_with_metadata_are_listed_in_id_order(fixture, request):
    storage: CheckpointStorage = request.getfixturevalue(fixture)
    assert storage.list_checkpoints() == []
    for cid in (10, 2, 9):
        complete(storage, cid)
    storage.write_bytes(f"{storage.checkpoint_dir(11)}/x.state", b"in progress")
    storage.write_bytes(f"{storage.job_dir}/shared/f", b"shared")
    storage.write_bytes(f"{storage.job_dir}/chk-x/_metadata", b"not a checkpoint")
    assert storage.list_checkpoints() == [(n, storage.checkpoint_dir(n)) for n in (2, 9, 10)]


@pytest.mark.parametrize("fixture", ["storage", "memory_storage"])
def test_discarding_a_checkpoint_deletes_its_directory_and_tolerates_a_missing_one(
    fixture, request
):
    storage: CheckpointStorage = request.getfixturevalue(fixture)
    complete(storage, 1)
    complete(storage, 2)
    storage.discard_checkpoint_dir(storage.checkpoint_dir(1))
    storage.discard_checkpoint_dir(storage.checkpoint_dir(1))
    storage.discard_checkpoint_dir(storage.checkpoint_dir(99))
    assert [cid for cid, _ in storage.list_checkpoints()] == [2]


def test_discarding_refuses_paths_outside_the_job_directory(tmp_path, storage):
    complete(storage, 1)
    for path in (storage.job_dir, str(tmp_path), f"{storage.job_dir}-other/chk-1"):
        with pytest.raises(ValueError, match="refusing to delete"):
            storage.discard_checkpoint_dir(path)
    assert len(storage.list_checkpoints()) == 1


# ------------------------------------------------------------------ verify_writable


def test_a_writable_directory_is_created_and_verified_without_leaving_files(storage):
    storage.verify_writable()
    assert os.listdir(storage.job_dir) == []


def test_an_unwritable_directory_is_reported_with_its_path_and_what_to_do(tmp_path):
    (tmp_path / "afile").write_text("a regular file, so nothing can be created under it")
    storage = CheckpointStorage(str(tmp_path / "afile" / "sub"), "job-1")
    with pytest.raises(CheckpointStorageError) as raised:
        storage.verify_writable()
    message = str(raised.value)
    assert f"{tmp_path}/afile/sub/job-1" in message
    assert "Set the checkpoint directory" in message and "shared filesystem" in message


# ------------------------------------------------------------------ resolve_checkpoint_path


def test_a_checkpoint_directory_resolves_to_itself(storage):
    directory = complete(storage, 3)
    assert resolve_checkpoint_path(directory) == directory
    assert resolve_checkpoint_path(directory + "/") == directory


def test_a_metadata_file_resolves_to_its_directory(storage):
    directory = complete(storage, 3)
    assert resolve_checkpoint_path(f"{directory}/_metadata") == directory


def test_a_job_directory_resolves_to_its_latest_completed_checkpoint(storage):
    for cid in (2, 10, 9):
        complete(storage, cid)
    storage.create_checkpoint_dir(11)  # not completed
    assert resolve_checkpoint_path(storage.job_dir) == storage.checkpoint_dir(10)


def test_uris_resolve_in_their_own_form(tmp_path, memory_storage):
    complete(memory_storage, 1)
    complete(memory_storage, 2)
    assert resolve_checkpoint_path(memory_storage.job_dir) == memory_storage.checkpoint_dir(2)
    file_storage = CheckpointStorage(f"file://{tmp_path}/ckpt", "job-1")
    directory = complete(file_storage, 5)
    assert directory.startswith("file://")
    assert resolve_checkpoint_path(f"{directory}/_metadata") == directory


def test_a_path_that_does_not_exist_is_not_found(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match=r"nowhere.*does not exist.*chk-<n>"):
        resolve_checkpoint_path(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointNotFoundError, match="nowhere/_metadata does not exist"):
        resolve_checkpoint_path(str(tmp_path / "nowhere" / "_metadata"))


def test_a_file_that_is_not_metadata_is_not_a_checkpoint(storage):
    directory = complete(storage, 1)
    with pytest.raises(CheckpointNotFoundError, match="is a file, not a checkpoint directory"):
        resolve_checkpoint_path(f"{directory}/map-0-abc.state")


def test_an_incomplete_checkpoint_directory_points_to_the_job_directory(storage):
    complete(storage, 1)
    directory = storage.create_checkpoint_dir(2)
    with pytest.raises(CheckpointNotFoundError) as raised:
        resolve_checkpoint_path(directory)
    assert "chk-2 holds no _metadata" in str(raised.value)
    assert f"pass the job directory {storage.job_dir}" in str(raised.value)


def test_a_job_directory_without_completed_checkpoints_is_not_found(storage):
    storage.create_checkpoint_dir(1)
    with pytest.raises(CheckpointNotFoundError, match=r"no completed checkpoint in .*job-1"):
        resolve_checkpoint_path(storage.job_dir)


def test_a_checkpoint_base_directory_hints_at_its_job_directories(tmp_path, storage):
    complete(storage, 1)
    CheckpointStorage(str(tmp_path / "ckpt"), "job-2").create_checkpoint_dir(1)
    with pytest.raises(CheckpointNotFoundError) as raised:
        resolve_checkpoint_path(str(tmp_path / "ckpt"))
    assert f"pass a job directory: {storage.job_dir}" in str(raised.value)
    assert "job-2" not in str(raised.value)
