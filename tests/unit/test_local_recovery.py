"""Task-local recovery: local copies written beside the checkpoint files, found only when
intact, pruned when a newer checkpoint completes; a failing local disk never fails a write.
And a rescaled restore reading several old subtasks' files reads them at once."""

from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass, field

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common.filesystems import FileSystems
from tidegate.runtime.restore import KeyedStateHandle, RestoredOperatorState
from tidegate.state.descriptors import ValueStateDescriptor
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.keygroups import assign_to_key_group, key_group_range, stable_hash
from tidegate.state.local_recovery import LocalStateStore
from tidegate.state.snapshot_format import write_state_file


def _write_checkpoint_file(storage, local, checkpoint_id, keys):
    """A real state file of `keys` written as a subtask writes one, mirrored locally."""
    backend = HeapKeyedStateBackend(8, range(0, 8))
    state = backend.get_state(ValueStateDescriptor("v"))
    for k in keys:
        backend.current_key = k
        state.update(k * 10)
    directory = storage.checkpoint_dir(checkpoint_id)
    with storage.create_artifact(directory, "count-0", ".state") as f:
        f.mirror_to(local.open_copy(checkpoint_id, f.name), lambda: None)
        index = write_state_file(f, backend.snapshot(), None)
    path = f"{directory}/{f.name}"
    return KeyedStateHandle(path, index, range(0, 8), f.size, f.checksum)


def _restore(handle, local):
    backend = HeapKeyedStateBackend(8, range(0, 8))
    counts = RestoredOperatorState(keyed=(handle,)).restore_keyed(backend, local)
    state = backend.get_state(ValueStateDescriptor("v"))
    values = {}
    for key in range(100):
        backend.current_key = key
        if state.value() is not None:
            values[key] = state.value()
    return counts, values


def test_a_mirrored_state_file_is_restored_from_its_local_copy(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    handle = _write_checkpoint_file(storage, local, 3, range(20))
    copy = local.find(handle.path, handle.size, handle.checksum)
    assert copy is not None and copy.startswith(str(tmp_path / "local"))
    with open(copy, "rb") as a, open(handle.path, "rb") as b:
        assert a.read() == b.read()
    counts, values = _restore(handle, local)
    assert counts == (1, 0)
    assert values == {k: k * 10 for k in range(20)}


def test_a_missing_local_copy_falls_back_to_the_checkpoint_storage(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    handle = _write_checkpoint_file(storage, local, 3, range(20))
    os.remove(local.find(handle.path, handle.size, handle.checksum))
    counts, values = _restore(handle, local)
    assert counts == (0, 1)
    assert values == {k: k * 10 for k in range(20)}


def test_a_damaged_local_copy_is_deleted_and_the_remote_file_is_read(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    handle = _write_checkpoint_file(storage, local, 3, range(20))
    copy = local.find(handle.path, handle.size, handle.checksum)
    with open(copy, "r+b") as f:  # same size, one bit flipped
        f.seek(20)
        byte = f.read(1)[0]
        f.seek(20)
        f.write(bytes([byte ^ 1]))
    counts, values = _restore(handle, local)
    assert counts == (0, 1)
    assert values == {k: k * 10 for k in range(20)}
    assert not os.path.exists(copy)


def test_a_local_copy_of_another_size_or_without_a_recorded_checksum_is_not_trusted(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    handle = _write_checkpoint_file(storage, local, 3, range(5))
    assert local.find(handle.path, None, None) is None
    with open(local.path_of(3, os.path.basename(handle.path)), "ab") as f:
        f.write(b"x")
    assert local.find(handle.path, handle.size, handle.checksum) is None


def test_savepoint_files_have_no_local_copies(tmp_path):
    local = LocalStateStore(str(tmp_path / "local"), "job")
    assert local.find(str(tmp_path / "savepoint-ab12/count-0.state"), 10, "crc32:00000000") is None


def test_a_completed_checkpoint_prunes_the_local_copies_of_older_ones_only(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    handles = {cid: _write_checkpoint_file(storage, local, cid, range(5)) for cid in (1, 2, 3)}
    local.confirm(2)
    found = {cid: local.find(h.path, h.size, h.checksum) for cid, h in handles.items()}
    assert found[1] is None
    assert found[2] is not None and found[3] is not None


def test_several_local_directories_share_the_copies_by_file_name(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    roots = f"{tmp_path / 'disk1'}, {tmp_path / 'disk2'}"
    local = LocalStateStore(roots, "job")
    disks = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    handles, used = [], set()
    # file names carry a random part: write until both disks hold a copy (40 files all
    # hashing to one disk has probability 2^-39)
    for cid in range(1, 41):
        handle = _write_checkpoint_file(storage, local, cid, range(5))
        copy = local.find(handle.path, handle.size, handle.checksum)
        name = os.path.basename(handle.path)
        assert copy.startswith(disks[zlib.crc32(name.encode()) % 2] + os.sep)
        handles.append(handle)
        used.add(copy.split(os.sep)[-4])
        if used == {"disk1", "disk2"}:
            break
    assert used == {"disk1", "disk2"}
    # another process with the same setting finds every copy
    again = LocalStateStore(roots, "job")
    assert all(again.find(h.path, h.size, h.checksum) for h in handles)


class _FailingFile:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data):
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        self.closed = True


def test_a_failing_local_disk_drops_the_copy_and_the_checkpoint_file_is_intact(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    directory = storage.checkpoint_dir(1)
    dropped = []
    broken = _FailingFile()
    with storage.create_artifact(directory, "count-0", ".state") as f:
        f.mirror_to(broken, lambda: dropped.append(True))
        f.write(b"state bytes")
    assert dropped == [True] and broken.closed
    with open(f"{directory}/{f.name}", "rb") as data:
        assert data.read() == b"state bytes"
    assert f.size == 11


def test_an_unwritable_local_directory_gives_no_copy_instead_of_failing(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the local directory should be")
    local = LocalStateStore(str(blocker), "job")
    assert local.open_copy(1, "count-0.state") is None


def test_a_subtask_reading_several_files_downloads_them_in_parallel_and_loads_all(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    local = LocalStateStore(str(tmp_path / "local"), "job")
    low = [k for k in range(60) if stable_hash(k) % 8 < 4]  # key groups [0, 3]
    high = [k for k in range(60) if stable_hash(k) % 8 >= 4]  # key groups [4, 7]
    first = _write_checkpoint_file(storage, local, 1, low)
    second = _write_checkpoint_file(storage, local, 1, high)
    os.remove(local.find(second.path, second.size, second.checksum))
    # as after a rescale: one new subtask owns everything two old files hold
    backend = HeapKeyedStateBackend(8, range(0, 8))
    both = RestoredOperatorState(keyed=(first, second))
    assert both.restore_keyed(backend, local) == (1, 1)
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in range(60):
        backend.current_key = key
        assert state.value() == key * 10


@dataclass(frozen=True)
class MeetingReads(FileSystems):
    """The local disk, where a read waits until `readers` reads are open at once (and fails
    after 10 s if they never are)."""

    readers: threading.Barrier = field(default_factory=lambda: threading.Barrier(1))

    def open(self, url: str, mode: str = "rb"):
        self.readers.wait()
        return super().open(url, mode)


def test_a_rescaled_subtask_downloads_the_files_of_its_old_subtasks_in_parallel(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "remote"), "job")
    directory = storage.checkpoint_dir(1)
    handles = []
    for subtask in range(3):  # three old subtasks' files, restored into one new subtask
        key_groups = key_group_range(subtask, 3, 8)
        backend = HeapKeyedStateBackend(8, key_groups)
        state = backend.get_state(ValueStateDescriptor("v"))
        for k in (k for k in range(60) if assign_to_key_group(k, 8) in key_groups):
            backend.current_key = k
            state.update(k * 10)
        with storage.create_artifact(directory, f"count-{subtask}", ".state") as f:
            index = write_state_file(f, backend.snapshot(), None)
        handles.append(KeyedStateHandle(f"{directory}/{f.name}", index, key_groups))
    backend = HeapKeyedStateBackend(8, range(0, 8))
    filesystems = MeetingReads(readers=threading.Barrier(3, timeout=10))
    restored = RestoredOperatorState(keyed=tuple(handles))
    assert restored.restore_keyed(backend, None, filesystems) == (0, 3)
    state = backend.get_state(ValueStateDescriptor("v"))
    for k in range(60):
        backend.current_key = k
        assert state.value() == k * 10
