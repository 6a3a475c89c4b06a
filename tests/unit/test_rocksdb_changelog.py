"""Changelog checkpoints of the rocksdb backend (state/rocksdb_changelog.py): the plan of each
checkpoint (pure), and real RocksDB instances and files through `Job` (test_incremental_snapshots):
what a checkpoint writes, and restores of the chain at the same parallelism, rescaled, into the
hashmap backend and through the State Processor API, with state TTL."""

from __future__ import annotations

import pytest

from tests.unit.test_incremental_snapshots import Job, M, _owns, fill, read, restored
from tests.unit.test_ttl_cleanup import Clock
from tidegate.common import Time
from tidegate.common.configuration import Configuration
from tidegate.datastream import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
from tidegate.datastream.state import ListStateDescriptor, StateTtlConfig, ValueStateDescriptor
from tidegate.datastream.state_backend import resolve_state_backend
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.heap_changelog import ChainFile
from tidegate.state.keygroups import key_group_range
from tidegate.state.rocksdb_changelog import MAX_CHANGELOGS, Plan, plan_checkpoint
from tidegate.state.rocksdb_codec import key_prefix
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.rocksdb_restore import restore_keyed_incremental
from tidegate.state.snapshot_format import read_key_groups, write_state_file
from tidegate.state.ttl.factory import ttl_states
from tidegate.state_processor.incremental import rewrite_canonical
from tidegate.state_processor.snapshot import SnapshotView

COUNT = ValueStateDescriptor("count")


def chain(*names: str) -> list[ChainFile]:
    return [ChainFile(name, f"/shared/{name}", 100, None) for name in names]


DB = ("000008.sst", "CURRENT", "MANIFEST-000005", "OPTIONS-000007")


@pytest.mark.parametrize(
    ("files", "containers", "plan"),
    [
        ((), False, Plan.REBASE),  # no completed checkpoint yet
        (("000008.sst",), False, Plan.REBASE),  # a plain incremental one: no private files
        (("materialized-1",), False, Plan.REBASE),  # a hashmap chain
        (DB, False, Plan.EXTEND),
        ((*DB, *(f"changelog-{i}" for i in range(MAX_CHANGELOGS - 1))), False, Plan.EXTEND),
        ((*DB, *(f"changelog-{i}" for i in range(MAX_CHANGELOGS))), False, Plan.REBASE),
        (DB, True, Plan.MATERIALIZE),  # list or map state: everything goes to RocksDB
        ((), True, Plan.MATERIALIZE),
    ],
)
def test_the_plan_of_a_checkpoint(files, containers, plan):
    assert plan_checkpoint(chain(*files), containers) is plan


@pytest.fixture
def job(tmp_path):
    job = Job(tmp_path)
    yield job
    job.close()


def in_rocksdb(backend, key) -> bool:
    """Whether RocksDB itself (not the value cache) has `key`'s count."""
    return backend._column_family("count").get(key_prefix(key, M)) is not None


def names(metadata, subtask: int = 0) -> list[tuple[str, bool]]:
    inc = metadata.operators["op"].subtasks[subtask].incremental
    return [(f.name, bool(f.uploaded)) for f in inc.shared]


def test_a_checkpoint_writes_changed_values_as_a_changelog_not_to_rocksdb(job):
    backend = job.backend(changelog=True)
    fill(backend, range(10_000))
    first = job.snapshot(1, [backend])
    assert not in_rocksdb(backend, 5)  # in the first changelog, pending
    assert [n for n, _ in names(first) if n.startswith("changelog")] == ["changelog-1"]
    assert "CURRENT" in dict(names(first))  # the RocksDB files, all in shared/
    fill(backend, range(0, 10_000, 100), lambda k: -k)
    second = job.snapshot(2, [backend])
    new = [n for n, uploaded in names(second) if uploaded]
    assert new == ["changelog-2"]  # the RocksDB files and changelog-1 are reused
    assert [n for n, _ in names(second) if n.startswith("changelog")] == [
        "changelog-1",
        "changelog-2",
    ]
    assert job.referenced() == job.shared_files()


def restore_into(job, metadata, kg=range(M), before=1, reusable=True, **options):
    backend = job.backend(kg, changelog=True, **options)
    restore_keyed_incremental(backend, restored(job, metadata, kg, reusable, before))
    return backend


def test_a_restore_replays_the_changelogs_over_the_rocksdb_files_and_extends_the_chain(job):
    backend = job.backend(changelog=True)
    keys = range(5000)
    fill(backend, keys)
    job.snapshot(1, [backend])
    fill(backend, range(0, 5000, 7), lambda k: k * 3)
    fill(backend, range(0, 5000, 11), lambda k: None)  # removed
    backend.current_key = 9
    backend.get_state(ValueStateDescriptor("tags")).update(["a", 9])  # a mutable value
    job.snapshot(2, [backend])
    fill(backend, range(5000, 5100))
    third = job.snapshot(3, [backend])
    expected = read(backend, range(5100))
    again = restore_into(job, third)
    assert read(again, range(5100)) == expected
    again.current_key = 9
    assert again.get_state(ValueStateDescriptor("tags")).value() == ["a", 9]
    # the restored backend extends the chain it restored
    fill(again, range(3))
    fourth = job.snapshot(4, [again])
    inc = fourth.operators["op"].subtasks[0].incremental
    assert inc.base_checkpoint_id == 3
    assert [n for n, uploaded in names(fourth) if uploaded] == ["changelog-4"]


def test_a_changelog_holds_every_change_since_the_last_completed_checkpoint(job):
    backend = job.backend(changelog=True)
    fill(backend, range(100))
    job.snapshot(1, [backend])
    fill(backend, range(10), lambda k: k + 1000)
    directory = job.storage.create_checkpoint_dir(2)
    backend.snapshot(2).upload(job.storage, directory, "op-0", 2)  # never completes
    backend.notify_checkpoint_aborted(2)
    fill(backend, range(90, 100), lambda k: k + 2000)
    third = job.snapshot(3, [backend])
    assert [n for n, _ in names(third) if n.startswith("changelog")] == [
        "changelog-1",
        "changelog-3",
    ]
    assert read(restore_into(job, third), range(100)) == read(backend, range(100))


def test_the_chain_is_rebased_after_max_changelogs(job):
    backend = job.backend(changelog=True)
    for cid in range(1, MAX_CHANGELOGS + 3):
        fill(backend, range(cid * 10, cid * 10 + 50), lambda k, c=cid: k * c)
        metadata = job.snapshot(cid, [backend])
    changelogs = [n for n, _ in names(metadata) if n.startswith("changelog")]
    assert len(changelogs) <= 2
    assert job.referenced() == job.shared_files()
    assert read(restore_into(job, metadata), range(200)) == read(backend, range(200))


def test_pending_values_go_to_rocksdb_before_the_cache_forgets_them(job):
    small = RocksDBOptions(local_dir=job.options.local_dir, value_cache_entries=1000)
    backend = job.backend(changelog=True, options=small)
    fill(backend, range(800))
    job.snapshot(1, [backend])  # 800 pending
    assert not in_rocksdb(backend, 1)
    read(backend, range(800, 1500))  # misses fill the cache beyond its bound
    assert in_rocksdb(backend, 1)
    assert read(backend, range(800)) == {k: k for k in range(800)}
    second = job.snapshot(2, [backend])
    assert read(restore_into(job, second, options=small), range(800)) == {k: k for k in range(800)}


def test_list_state_makes_every_checkpoint_a_rocksdb_checkpoint(job):
    backend = job.backend(changelog=True)
    fill(backend, range(100))
    backend.current_key = 1
    backend.get_list_state(ListStateDescriptor("log", None)).add("x")
    metadata = job.snapshot(1, [backend])
    assert in_rocksdb(backend, 5)
    assert not [n for n, _ in names(metadata) if n.startswith("changelog")]
    again = restore_into(job, metadata)
    assert read(again, range(100)) == {k: k for k in range(100)}


@pytest.mark.parametrize("new_parallelism", [3, 1])
def test_a_changelog_chain_restores_rescaled(job, new_parallelism):
    old = [job.backend(key_group_range(i, 2, M), changelog=True) for i in range(2)]
    keys = range(6000)
    for cid in (1, 2):
        for backend in old:
            mine = [k for k in keys if _owns(backend, k)]
            fill(backend, mine[: 2000 * cid], lambda k, c=cid: k * c)
        metadata = job.snapshot(cid, old)
    found = {}
    for i in range(new_parallelism):
        kg = key_group_range(i, new_parallelism, M)
        new = restore_into(job, metadata, kg, before=2)
        mine = [k for k in keys if _owns(new, k)]
        values = read(new, mine)
        present = {k: v for k, v in values.items() if v is not None}
        found.update(present)
        assert sum(1 for _ in new.entries("count")) == len(present)  # only its key groups
    expected = {}
    for backend in old:
        expected.update(
            {k: v for k, v in read(backend, keys).items() if _owns(backend, k) and v is not None}
        )
    assert found == expected


def test_the_hashmap_backend_and_the_state_processor_read_a_changelog_chain(job, tmp_path):
    backend = job.backend(changelog=True)
    fill(backend, range(3000), lambda k: str(k))
    job.snapshot(1, [backend])
    fill(backend, range(0, 3000, 3), lambda k: None)
    metadata = job.snapshot(2, [backend])
    expected = {k: (None if k % 3 == 0 else str(k)) for k in range(3000)}
    heap = HeapKeyedStateBackend(M, range(M))
    restore_keyed_incremental(heap, restored(job, metadata, range(M), False, 1))
    assert read(heap, range(3000)) == expected
    view = SnapshotView.open(job.storage.checkpoint_dir(2))
    (source,) = view.incremental_sources("op")
    _subtask, handle = rewrite_canonical(source, "op-0", str(tmp_path), view.filesystems)
    canonical = HeapKeyedStateBackend(M, range(M))
    with open(tmp_path / handle.file, "rb") as f:
        canonical.restore(read_key_groups(f, handle.index, range(M)))
    assert read(canonical, range(3000)) == expected


def test_a_savepoint_is_canonical_and_holds_the_pending_values(job, tmp_path):
    backend = job.backend(changelog=True)
    fill(backend, range(500))
    job.snapshot(1, [backend])
    fill(backend, range(10), lambda k: -k)
    snapshot = backend.snapshot(None)  # a savepoint
    with open(tmp_path / "savepoint.state", "wb") as f:
        index = write_state_file(f, snapshot, None)
    with open(tmp_path / "savepoint.state", "rb") as f:
        heap = HeapKeyedStateBackend(M, range(M))
        heap.restore(read_key_groups(f, index, range(M)))
    assert read(heap, range(500)) == {k: (-k if k < 10 else k) for k in range(500)}
    # and the next checkpoint still has them (flushed: now in RocksDB, changed since the base)
    second = job.snapshot(2, [backend])
    assert read(restore_into(job, second), range(500)) == read(heap, range(500))


def test_state_backend_changelog_enabled_turns_it_on_for_rocksdb():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.is_changelog_state_backend_enabled() is False
    env.enable_changelog_state_backend(True).set_state_backend(EmbeddedRocksDBStateBackend())
    assert env.is_changelog_state_backend_enabled() is True
    assert env.get_state_backend().enable_changelog is True
    explicit = EmbeddedRocksDBStateBackend(enable_changelog=False)
    assert env.set_state_backend(explicit).get_state_backend().enable_changelog is False
    conf = Configuration().add_all(
        {"state.backend.type": "rocksdb", "state.backend.changelog.enabled": "true"}
    )
    backend = resolve_state_backend(None, conf)
    assert backend.enable_changelog is True
    plain = resolve_state_backend(None, Configuration().add_all({"state.backend.type": "rocksdb"}))
    assert plain.enable_changelog is False


def test_values_expired_at_a_changelog_checkpoint_are_written_as_removed(job):
    clock = Clock()
    backend = job.backend(changelog=True)
    ttl_states(backend, clock)
    config = (
        StateTtlConfig.new_builder(Time.milliseconds(1000))
        .disable_cleanup_in_background()
        .cleanup_full_snapshot()
        .build()
    )
    descriptor = ValueStateDescriptor("v")
    descriptor.enable_time_to_live(config)
    state = backend.get_state(descriptor)
    for k in range(10):
        backend.current_key = k
        state.update(k)
    clock.advance(600)
    for k in range(5, 10):
        backend.current_key = k
        state.update(k * 10)
    clock.advance(600)  # keys 0-4 expired, 5-9 not
    metadata = job.snapshot(1, [backend])
    heap = HeapKeyedStateBackend(M, range(M))
    ttl_states(heap, clock)
    restored_state = heap.get_state(descriptor)
    restore_keyed_incremental(heap, restored(job, metadata, range(M), False, 1))
    assert sorted(key for key, _ in heap.entries("v")) == list(range(5, 10))
    heap.current_key = 7
    assert restored_state.value() == 70
