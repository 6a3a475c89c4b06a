"""The proof that driver and slots see one storage (checkpoint/shared_storage.py), on real
directories: a slot reading another disk at the same path is refused naming its host."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.errors import StorageNotSharedError
from tidegate.checkpoint.shared_storage import (
    StorageCheck,
    check_problem,
    remove_check,
    verify_check,
    write_check,
)
from tidegate.common.filesystems import NO_OPTIONS


def test_a_check_file_holding_its_token_is_the_only_proof():
    assert check_problem("abc", b"abc") is None
    assert check_problem("abc", None) == "is missing"
    assert check_problem("abc", b"xyz") == "holds something else"
    assert check_problem("abc", b"\xff") == "holds something else"


def test_a_slot_proves_it_sees_the_drivers_directory_and_another_disk_is_refused(tmp_path):
    out = tmp_path / "shared" / "out"
    check = write_check(NO_OPTIONS, f"the path {out} of sink 'sink'", str(out), vertex_id=3)
    assert (out / f".storage-check-{check.token}").read_text() == check.token  # hidden
    verify_check(check, NO_OPTIONS, "h1")
    # another host: the same path on its own disk (here: another directory)
    elsewhere = StorageCheck(check.what, str(tmp_path / "private" / "out"), check.token, 3)
    with pytest.raises(StorageNotSharedError) as refused:
        verify_check(elsewhere, NO_OPTIONS, "h2 (10.0.0.12)")
    message = str(refused.value)
    assert message.startswith(f"the path {out} of sink 'sink' is not the same storage on host ")
    assert "h2 (10.0.0.12) as on the driver" in message
    assert f"check file {elsewhere.file} is missing here" in message
    assert "s3://" in message  # what to do


def test_each_attempt_has_its_own_check_file_and_removes_only_its_own(tmp_path):
    first = write_check(NO_OPTIONS, "the checkpoint directory", str(tmp_path))
    second = write_check(NO_OPTIONS, "the checkpoint directory", str(tmp_path))
    assert first.file != second.file
    remove_check(first, NO_OPTIONS)
    remove_check(first, NO_OPTIONS)  # gone already: fine
    verify_check(second, NO_OPTIONS, "h1")
    with pytest.raises(StorageNotSharedError, match="is missing here"):
        verify_check(first, NO_OPTIONS, "h1")
