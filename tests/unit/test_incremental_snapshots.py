"""Incremental checkpoints of the rocksdb backend with real RocksDB instances and real files:
sizes, the shared directory after subsumption, restores (same parallelism, rescaled, into the
hashmap backend), and damaged files found by verification.

`Job` plays the parts of the task's asynchronous phase and of the JobMaster with the same
functions they use (upload_snapshot, the store with its registry, delete_shared_files)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tidegate.checkpoint.errors import CheckpointError, ChecksumMismatchError
from tidegate.checkpoint.metadata import CheckpointMetadata, OperatorMetadata
from tidegate.checkpoint.selection import RestoreCandidate, choose_checkpoint
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.common.configuration import Configuration
from tidegate.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, resolve_state_backend
from tidegate.deploy.restore import keyed_restore_handle
from tidegate.deploy.shared_state import check_references, delete_shared_files
from tidegate.state import heap_changelog
from tidegate.state.handles import StateHandle
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.incremental_handles import resolve
from tidegate.state.keygroups import key_group_range
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_incremental import upload_snapshot
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.rocksdb_restore import restore_keyed_incremental
from tidegate.state.shared_registry import SharedStateRegistry
from tidegate.state.snapshot_format import read_key_groups, write_state_file
from tidegate.state_processor.incremental import rewrite_canonical
from tidegate.state_processor.snapshot import SnapshotView

M = 128
COUNT = ValueStateDescriptor("count")


class Job:
    def __init__(self, tmp_path, retained: int = 1) -> None:
        self.storage = CheckpointStorage(str(tmp_path / "checkpoints"), "job")
        self.registry = SharedStateRegistry()
        self.store = CompletedCheckpointStore(retained, self.registry)
        self.options = RocksDBOptions(local_dir=str(tmp_path / "local"))
        self.backends: list[RocksDBKeyedStateBackend] = []
        #: task-local recovery (test_local_incremental_recovery): a LocalStateStore or None
        self.local = None

    def backend(
        self, kg: range = range(M), heap: bool = False, changelog: bool = False, options=None
    ) -> Any:
        """An incremental keyed backend: rocksdb (with `changelog`: changelog checkpoints,
        test_rocksdb_changelog), or hashmap with `heap`."""
        if heap:
            return HeapKeyedStateBackend(M, kg, incremental=True)
        backend = RocksDBKeyedStateBackend(
            M, kg, options or self.options, incremental=True, changelog=changelog
        )
        self.backends.append(backend)
        return backend

    def snapshot(self, cid: int, backends, notify: bool = True) -> dict:
        """Take checkpoint `cid` of `backends` (subtask i = backends[i]) and complete it."""
        directory = self.storage.create_checkpoint_dir(cid)
        subtasks = {}
        for i, backend in enumerate(backends):
            snapshot = backend.snapshot(cid)
            if hasattr(snapshot, "upload"):  # a chain (heap or rocksdb changelog)
                inc = snapshot.upload(self.storage, directory, f"op-{i}", cid)
            else:
                inc = upload_snapshot(snapshot, self.storage, directory, f"op-{i}", cid, self.local)
            with self.storage.create_artifact(directory, f"op-{i}", ".state") as f:
                index = write_state_file(f, None, None)
            subtasks[i] = StateHandle(
                file=f.name,
                size=f.size,
                checksum=f.checksum,
                index=index,
                key_group_range=backend.key_group_range,
                incremental=inc,
            )
        metadata = CheckpointMetadata(
            job_id="job",
            checkpoint_id=cid,
            timestamp_ms=0,
            generation=0,
            max_parallelism=M,
            operators={"op": OperatorMetadata("op", len(backends), subtasks)},
        )
        check_references(self.registry, metadata, directory)
        self.storage.write_metadata(directory, metadata)
        cp = CompletedCheckpoint(cid, 0, 0, 0, directory, 0, False, metadata)
        for old in self.store.add(cp):
            self.storage.discard_checkpoint_dir(old.path)
        delete_shared_files(self.storage, self.registry.take_unused())
        if notify:
            if self.local is not None:
                self.local.confirm(cid)
            for backend in backends:
                backend.notify_checkpoint_complete(cid)
        return metadata

    def shared_files(self) -> set[str]:
        shared = os.path.join(self.storage.job_dir, "shared")
        if not os.path.isdir(shared):
            return set()
        return {os.path.join(shared, n) for n in os.listdir(shared)}

    def referenced(self) -> set[str]:
        return {path for cp in self.store.all() for path in cp.metadata.references(cp.path).paths}

    def close(self) -> None:
        for backend in self.backends:
            backend.dispose()


@pytest.fixture
def job(tmp_path):
    job = Job(tmp_path)
    yield job
    job.close()


def fill(backend, keys, value=lambda k: k) -> None:
    state = backend.get_state(COUNT)
    for k in keys:
        backend.current_key = k
        state.update(value(k))


def read(backend, keys) -> dict:
    state = backend.get_state(COUNT)
    out = {}
    for k in keys:
        backend.current_key = k
        out[k] = state.value()
    return out


def uploaded_bytes(metadata: CheckpointMetadata) -> int:
    return sum(inc.uploaded_bytes for _uid, _subtask, inc in metadata.incremental_handles())


def test_a_checkpoint_after_touching_one_percent_of_keys_uploads_about_one_percent(job):
    backend = job.backend()
    keys = range(100_000)
    fill(backend, keys)
    full = uploaded_bytes(job.snapshot(1, [backend]))
    fill(backend, range(0, 100_000, 100), lambda k: -k)  # 1% of the keys
    second = job.snapshot(2, [backend])
    print(f"full {full} bytes, after touching 1%: {uploaded_bytes(second)} bytes")
    assert uploaded_bytes(second) < 0.10 * full
    reused = second.operators["op"].subtasks[0].incremental.shared
    assert any(not f.uploaded for f in reused)


def test_no_shared_file_is_deleted_while_a_retained_checkpoint_references_it(tmp_path):
    job = Job(tmp_path, retained=2)
    try:
        backend = job.backend()
        for cid in range(1, 8):
            fill(backend, range(cid * 1000, cid * 1000 + 5000), lambda k, c=cid: k * c)
            if cid % 3 == 0:  # compaction replaces SST files: old ones lose their references
                backend.instance.db.compact_range(None, None)
            job.snapshot(cid, [backend])
            assert job.referenced() <= job.shared_files()
            # no orphans: everything in shared/ is referenced by a retained checkpoint
            assert job.shared_files() == job.referenced()
    finally:
        job.close()


def test_uploads_of_a_checkpoint_that_never_completed_are_never_reused(job):
    backend = job.backend()
    fill(backend, range(1000))
    job.snapshot(1, [backend])
    fill(backend, range(1000, 2000))
    directory = job.storage.create_checkpoint_dir(2)
    aborted = upload_snapshot(backend.snapshot(), job.storage, directory, "op-0", 2)
    backend.notify_checkpoint_aborted(2)
    fill(backend, range(2000, 3000))
    third = job.snapshot(3, [backend])
    aborted_paths = {resolve(directory, f.file) for f in aborted.shared if f.uploaded}
    third_paths = third.references(job.storage.checkpoint_dir(3)).paths
    assert aborted_paths and not aborted_paths & third_paths


def test_a_savepoint_confirmation_keeps_the_incremental_base(job):
    backend = job.backend()
    fill(backend, range(1000))
    job.snapshot(1, [backend])
    backend.notify_checkpoint_complete(2)  # a savepoint: canonical, nothing uploaded
    assert backend.tracker.base_id == 1


def restored(
    job: Job, metadata: CheckpointMetadata, kg: range, reusable: bool, parallelism_before: int
):
    cid = metadata.checkpoint_id
    directory = job.storage.checkpoint_dir(cid)
    handles = []
    for i in range(parallelism_before):
        h = metadata.operators["op"].subtasks[i]
        old = h.key_group_range
        part = range(max(old.start, kg.start), min(old.stop, kg.stop))
        if part:
            handles.append(keyed_restore_handle("", h, part, directory, cid, reusable))
    return handles


def test_restore_after_the_checkpoints_it_shares_files_with_were_subsumed(job):
    backend = job.backend()
    fill(backend, range(10_000))
    job.snapshot(1, [backend])
    fill(backend, range(0, 10_000, 10), lambda k: -k)
    job.snapshot(2, [backend])
    fill(backend, range(10_000, 11_000))
    third = job.snapshot(3, [backend])  # 1 and 2 are subsumed; 3 still uses their files
    expected = read(backend, range(11_000))
    assert job.referenced() == job.shared_files()
    again = job.backend()
    restore_keyed_incremental(again, restored(job, third, range(M), True, 1))
    assert read(again, range(11_000)) == expected
    # the restored backend reuses the restored checkpoint's files in its next checkpoint
    fill(again, range(5))
    fourth = job.snapshot(4, [again])
    inc = fourth.operators["op"].subtasks[0].incremental
    assert inc.base_checkpoint_id == 3
    assert any(not f.uploaded for f in inc.shared)
    assert job.referenced() == job.shared_files()


def test_a_restore_the_job_does_not_own_reuses_nothing(job):
    backend = job.backend()
    fill(backend, range(2000))
    first = job.snapshot(1, [backend])
    again = job.backend()
    restore_keyed_incremental(again, restored(job, first, range(M), False, 1))
    fill(again, range(3))
    directory = job.storage.create_checkpoint_dir(2)
    inc = upload_snapshot(again.snapshot(), job.storage, directory, "op-0", 2)
    assert inc.base_checkpoint_id is None and all(f.uploaded for f in inc.shared)


@pytest.mark.parametrize("new_parallelism", [3, 1])
def test_a_rescaled_restore_copies_only_the_new_subtasks_key_groups(job, new_parallelism):
    old = [job.backend(key_group_range(i, 2, M)) for i in range(2)]
    keys = range(6000)
    for backend in old:
        fill(backend, [k for k in keys if _owns(backend, k)], lambda k: k * 7)
        tags = backend.get_map_state(MapStateDescriptor("tags", None, None))
        for k in [k for k in keys if _owns(backend, k)][:50]:
            backend.current_key = k
            tags.put("a", k)
    metadata = job.snapshot(1, old)
    found = {}
    for i in range(new_parallelism):
        kg = key_group_range(i, new_parallelism, M)
        new = job.backend(kg)
        restore_keyed_incremental(new, restored(job, metadata, kg, True, 2))
        mine = [k for k in keys if _owns(new, k)]
        values = read(new, mine)
        assert all(v == k * 7 for k, v in values.items())
        found.update(values)
        # nothing outside its key groups was copied
        assert sum(1 for _ in new.entries("count")) == len(mine)
        assert all(_owns(new, k) and v == {"a": k} for k, v in new.entries("tags"))
    assert len(found) == len(keys)


def test_the_hashmap_backend_restores_an_incremental_rocksdb_checkpoint(job):
    backend = job.backend()
    fill(backend, range(3000), lambda k: str(k))
    metadata = job.snapshot(1, [backend])
    kg = key_group_range(1, 2, M)
    heap = HeapKeyedStateBackend(M, kg)
    restore_keyed_incremental(heap, restored(job, metadata, kg, False, 1))
    mine = [k for k in range(3000) if kg.start <= _group(k) < kg.stop]
    assert read(heap, mine) == {k: str(k) for k in mine}


def test_a_restore_with_another_max_parallelism_is_refused(job):
    backend = job.backend()
    fill(backend, range(10))
    metadata = job.snapshot(1, [backend])
    other = RocksDBKeyedStateBackend(256, range(256), job.options, incremental=True)
    job.backends.append(other)
    with pytest.raises(ValueError, match="max parallelism 128"):
        restore_keyed_incremental(other, restored(job, metadata, range(M), True, 1))


def test_a_corrupted_sst_file_is_named_by_verification(job):
    backend = job.backend()
    fill(backend, range(5000))
    metadata = job.snapshot(1, [backend])
    directory = job.storage.checkpoint_dir(1)
    sst = metadata.operators["op"].subtasks[0].incremental.shared[0]
    path = resolve(directory, sst.file)
    with open(path, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    report = verify_checkpoint(metadata, directory)
    with pytest.raises(ChecksumMismatchError) as e:
        report.raise_for_problems()
    assert f"shared RocksDB file {sst.file}" in str(e.value)
    assert "does not match its checksum" in str(e.value)
    # a restore (the JobMaster's choice of checkpoint) refuses it with the same message
    with pytest.raises(ChecksumMismatchError, match=r"shared RocksDB file .*shared/"):
        choose_checkpoint([RestoreCandidate(directory)], uids=None, allow_fallback=False)


def test_a_checkpoint_reusing_a_deleted_shared_file_does_not_complete(job):
    backend = job.backend()
    fill(backend, range(1000))
    job.snapshot(1, [backend])
    fill(backend, range(1000, 2000))
    backend.instance.db.compact_range(None, None)
    job.snapshot(2, [backend], notify=False)  # the backend does not learn 2 completed
    job.registry.unregister(2)  # simulate 1's and 2's files being gone from the registry
    job.registry.release_all()
    fill(backend, range(5))
    with pytest.raises(CheckpointError, match="reuses shared file"):
        job.snapshot(3, [backend])


def _group(key) -> int:
    from tidegate.state.keygroups import stable_hash

    return stable_hash(key) % M


def _owns(backend, key) -> bool:
    return _group(key) in backend.key_group_range


def test_state_backend_incremental_enables_it_unless_the_backend_says_otherwise():
    conf = Configuration().set_string("state.backend.type", "rocksdb")
    conf.set_string("state.backend.incremental", "true")
    assert resolve_state_backend(None, conf).is_incremental_checkpoints_enabled()
    explicit = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=False)
    assert not resolve_state_backend(explicit, conf).is_incremental_checkpoints_enabled()
    plain = resolve_state_backend(None, Configuration().set_string("state.backend.type", "rocksdb"))
    assert not plain.is_incremental_checkpoints_enabled()


def test_the_configured_backend_creates_incremental_keyed_backends(tmp_path):
    backend = EmbeddedRocksDBStateBackend(True, local_dir=str(tmp_path))
    keyed = backend.create_keyed_state_backend(M, range(M))
    try:
        assert keyed.tracker is not None
    finally:
        keyed.dispose()


# the hashmap backend's incremental checkpoints (state/heap_changelog.py) ----------------------
TAGS = MapStateDescriptor("tags", None, None)
SEEN = ListStateDescriptor("seen", None)


def names(metadata: CheckpointMetadata, subtask: int = 0) -> list[tuple[str, bool]]:
    inc = metadata.operators["op"].subtasks[subtask].incremental
    return [(f.name, bool(f.uploaded)) for f in inc.shared]


def everything(backend) -> dict:
    return {name: dict(backend.entries(name)) for name in ("count", "tags", "seen")}


def change_heap(backend, keys, tag: str) -> None:
    """Updates of every kind: a value, a map entry put and removed, a list appended in place."""
    count, tags, seen = (
        backend.get_state(COUNT),
        backend.get_map_state(TAGS),
        backend.get_list_state(SEEN),
    )
    for k in keys:
        backend.current_key = k
        count.update((count.value() or 0) + 1)
        tags.put(tag, k)
        tags.remove("gone")
        seen.add(tag)


def restore_heap(job: Job, metadata, kg: range, reusable: bool, before: int = 1):
    again = HeapKeyedStateBackend(M, kg, incremental=True)
    restore_keyed_incremental(again, restored(job, metadata, kg, reusable, before))
    return again


def test_a_heap_checkpoint_after_touching_one_percent_of_keys_writes_one_percent(job):
    backend = job.backend(heap=True)
    change_heap(backend, range(20_000), "a")
    first = job.snapshot(1, [backend])
    assert names(first) == [("materialized-1", True)]
    change_heap(backend, range(0, 20_000, 100), "b")
    second = job.snapshot(2, [backend])
    assert names(second) == [("materialized-1", False), ("changelog-2", True)]
    assert uploaded_bytes(second) < 0.05 * uploaded_bytes(first)  # 1% + per key group framing
    assert everything(restore_heap(job, second, range(M), False)) == everything(backend)


def test_a_heap_changelog_holds_every_change_since_the_last_completed_checkpoint(job):
    backend = job.backend(heap=True)
    change_heap(backend, range(3000), "a")
    job.snapshot(1, [backend])
    change_heap(backend, range(0, 3000, 7), "b")
    job.snapshot(2, [backend], notify=False)  # the backend does not learn 2 completed
    change_heap(backend, range(0, 3000, 11), "c")
    count = backend.get_state(COUNT)
    for k in range(0, 3000, 13):  # removals
        backend.current_key = k
        count.clear()
    savepoint = backend.snapshot()  # a savepoint: full, and the changes stay for checkpoints
    assert {name for name, _ in savepoint.tables.items()} == {"count", "tags", "seen"}
    third = job.snapshot(3, [backend])
    assert names(third) == [("materialized-1", False), ("changelog-3", True)]
    assert everything(restore_heap(job, third, range(M), False)) == everything(backend)
    # the rocksdb backend restores the chain too
    rocks = job.backend()
    restore_keyed_incremental(rocks, restored(job, third, range(M), False, 1))
    assert everything(rocks) == everything(backend)
    change_heap(backend, range(5), "d")
    fourth = job.snapshot(4, [backend])
    assert names(fourth) == [
        ("materialized-1", False),
        ("changelog-3", False),
        ("changelog-4", True),
    ]
    assert everything(restore_heap(job, fourth, range(M), False)) == everything(backend)
    assert job.referenced() == job.shared_files()  # changelog-2 is deleted


def test_a_heap_chain_is_materialized_again_when_it_grows(job, monkeypatch):
    monkeypatch.setattr(heap_changelog, "MAX_CHANGELOG_FILES", 2)
    backend = job.backend(heap=True)
    change_heap(backend, range(2000), "a")
    chains = []
    for cid in range(1, 6):
        change_heap(backend, range(cid, 2000, 50), str(cid))
        chains.append([name for name, _ in names(job.snapshot(cid, [backend]))])
    assert chains == [
        ["materialized-1"],
        ["materialized-1", "changelog-2"],
        ["materialized-1", "changelog-2", "changelog-3"],
        ["materialized-4"],
        ["materialized-4", "changelog-5"],
    ]
    assert job.referenced() == job.shared_files()  # the old chain is gone
    latest = job.store.latest().metadata
    assert everything(restore_heap(job, latest, range(M), False)) == everything(backend)


@pytest.mark.parametrize("new_parallelism", [3, 1])
def test_a_heap_chain_restores_rescaled(job, new_parallelism):
    old = [job.backend(key_group_range(i, 2, M), heap=True) for i in range(2)]
    keys = range(6000)
    for backend in old:
        change_heap(backend, [k for k in keys if _owns(backend, k)], "a")
    job.snapshot(1, old)
    for backend in old:
        change_heap(backend, [k for k in keys[::9] if _owns(backend, k)], "b")
    metadata = job.snapshot(2, old)
    expected = {name: {} for name in ("count", "tags", "seen")}
    for backend in old:
        for name, entries in everything(backend).items():
            expected[name].update(entries)
    found = {name: {} for name in expected}
    for i in range(new_parallelism):
        kg = key_group_range(i, new_parallelism, M)
        new = restore_heap(job, metadata, kg, True, 2)
        for name, entries in everything(new).items():
            assert all(_owns(new, k) for k in entries)
            found[name].update(entries)
        # a rescaled subtask starts a chain of its own
        assert new.snapshot(3).materialized
    assert found == expected


def test_a_restored_heap_backend_extends_the_chain_of_a_checkpoint_the_job_owns(job):
    backend = job.backend(heap=True)
    change_heap(backend, range(3000), "a")
    job.snapshot(1, [backend])
    change_heap(backend, range(0, 3000, 10), "b")
    second = job.snapshot(2, [backend])
    again = restore_heap(job, second, range(M), True)
    change_heap(again, range(5), "c")
    third = job.snapshot(3, [again])
    assert third.operators["op"].subtasks[0].incremental.base_checkpoint_id == 2
    assert names(third) == [
        ("materialized-1", False),
        ("changelog-2", False),
        ("changelog-3", True),
    ]
    assert everything(restore_heap(job, third, range(M), False)) == everything(again)
    # a restore the job does not own writes a materialization of its own
    other = restore_heap(job, third, range(M), False)
    assert other.snapshot(4).materialized


def test_the_state_processor_reads_a_heap_chain_and_rewrites_it_canonical(job, tmp_path):
    backend = job.backend(heap=True)
    change_heap(backend, range(2000), "a")
    job.snapshot(1, [backend])
    change_heap(backend, range(0, 2000, 3), "b")
    job.snapshot(2, [backend])
    view = SnapshotView.open(job.storage.checkpoint_dir(2))
    (source,) = view.incremental_sources("op")
    expected = {name: {} for name in ("count", "tags", "seen")}
    for _kg, data in source.key_groups():
        for name, (_kind, entries) in data.items():
            expected[name].update(entries)
    assert expected == everything(backend)
    # a savepoint writer's rewrite: one canonical state file, read like any other
    _subtask, handle = rewrite_canonical(source, "op-0", str(tmp_path), view.filesystems)
    assert handle.incremental is None
    canonical = HeapKeyedStateBackend(M, range(M))
    with open(tmp_path / handle.file, "rb") as f:
        canonical.restore(read_key_groups(f, handle.index, range(M)))
    assert everything(canonical) == everything(backend)


def test_a_damaged_file_of_a_heap_chain_is_named_by_verification(job):
    backend = job.backend(heap=True)
    change_heap(backend, range(500), "a")
    job.snapshot(1, [backend])
    change_heap(backend, range(0, 500, 5), "b")
    metadata = job.snapshot(2, [backend])
    directory = job.storage.checkpoint_dir(2)
    changelog = metadata.operators["op"].subtasks[0].incremental.shared[-1]
    with open(resolve(directory, changelog.file), "r+b") as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumMismatchError, match=f"shared state file {changelog.file}"):
        verify_checkpoint(metadata, directory).raise_for_problems()
