"""Checksums computed while a checkpoint file is written (state/checksums.py), through the
storage's one helper for it (`CheckpointStorage.create_artifact`), on real filesystems."""

from __future__ import annotations

import errno
import io
import os
import re
import uuid
import zlib

import pytest

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.state.channel_state import write_channel_state
from tidegate.state.checksums import (
    ChecksummingWriter,
    checksum_of,
    is_known_checksum,
    read_checksum,
)
from tidegate.state.snapshot_format import KeyedStateSnapshot, write_state_file


@pytest.fixture(params=["local", "memory"])
def storage(request, tmp_path) -> CheckpointStorage:
    base = str(tmp_path) if request.param == "local" else f"memory://chk-{uuid.uuid4().hex}"
    return CheckpointStorage(base, "job", generation=3)


def test_a_checksum_names_its_algorithm_and_is_the_crc32_of_the_bytes():
    assert checksum_of(b"tidegate") == f"crc32:{zlib.crc32(b'tidegate'):08x}"
    assert checksum_of(b"") == "crc32:00000000"
    assert is_known_checksum(checksum_of(b"x"))
    for bad in (None, 5, "crc32:1234", "crc32:GGGGGGGG", "sha256:00000000", "00000000"):
        assert not is_known_checksum(bad)


def test_the_writer_checksums_exactly_the_bytes_that_reach_the_file(storage):
    directory = storage.checkpoint_dir(1)
    chunks = [b"header", bytearray(b"\x00" * 70_000), memoryview(b"tail-bytes")[2:]]
    with storage.create_artifact(directory, "op-0", ".state") as f:
        for chunk in chunks:
            assert f.write(chunk) == len(chunk)
    data = storage.read_bytes(f"{directory}/{f.name}")
    assert data == b"".join(bytes(c) for c in chunks)
    assert (f.size, f.checksum) == (len(data), checksum_of(data))
    with storage.open_read(f"{directory}/{f.name}") as g:
        assert read_checksum(g) == (len(data), checksum_of(data))


def test_artifact_names_are_unique_and_carry_the_writer_generation(storage):
    directory = storage.checkpoint_dir(1)
    names = set()
    for _ in range(20):
        with storage.create_artifact(directory, "count-1", ".state") as f:
            f.write(b"x")
        names.add(f.name)
    assert len(names) == 20
    assert all(re.fullmatch(r"count-1-g3-[0-9a-f]{12}\.state", n) for n in names)


def test_a_state_file_and_a_channel_state_file_are_checksummed_while_written(storage):
    directory = storage.checkpoint_dir(2)
    keyed = KeyedStateSnapshot(128, range(0, 128), {"count": ("value", {"a": 1, "b": 2})})
    with storage.create_artifact(directory, "count-0", ".state") as f:
        index = write_state_file(f, keyed, {"splits": ("split", [1, 2])})
    assert f.size == index.size
    assert f.checksum == checksum_of(storage.read_bytes(f"{directory}/{f.name}"))
    with storage.create_artifact(directory, "channels-count-0", ".inflight") as g:
        size = write_channel_state(g, [b"frame-1", b"frame-2"])
    assert g.size == size
    assert g.checksum == checksum_of(storage.read_bytes(f"{directory}/{g.name}"))


def test_the_writer_closes_the_file_also_when_writing_fails(tmp_path):
    path = tmp_path / "partial.state"
    with pytest.raises(RuntimeError), ChecksummingWriter(open(path, "wb"), "partial.state") as f:
        f.write(b"abc")
        raise RuntimeError("pickling failed")
    assert f.closed and path.read_bytes() == b"abc"


class FullDisk(io.BytesIO):
    """A file on a disk with `room` bytes left: writing more fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def test_a_write_error_names_the_file_being_written():
    location = "/ckpt/job/chk-3/op-0.state"
    with (
        pytest.raises(OSError) as failed,
        ChecksummingWriter(FullDisk(4), "op-0.state", location) as f,
    ):
        f.write(b"abc")
        f.write(b"def")
    assert failed.value.errno == errno.ENOSPC
    assert failed.value.__notes__ == ["while writing /ckpt/job/chk-3/op-0.state"]
    assert f.closed


def test_an_unfenced_storage_names_artifacts_without_a_generation(tmp_path):
    storage = CheckpointStorage(str(tmp_path), "job")
    with storage.create_artifact(storage.checkpoint_dir(1), "op-0", ".state") as f:
        f.write(b"x")
    assert re.fullmatch(r"op-0-[0-9a-f]{12}\.state", f.name)
    assert os.path.exists(tmp_path / "job" / "chk-1" / f.name)
