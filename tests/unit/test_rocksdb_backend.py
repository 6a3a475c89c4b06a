"""The rocksdb keyed state backend's own properties: key layout, column families, snapshots from
hard-linked checkpoints, state larger than its memory, instance directories, configuration.
(The state semantics it shares with the hashmap backend are tested in test_keyed_state.py.)"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import replace

import pytest
import rocksdict

from tidegate.common.configuration import Configuration
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.functions import AggregateFunction
from tidegate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from tidegate.datastream.state_backend import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    resolve_state_backend,
)
from tidegate.runtime.windows.windows import TimeWindow
from tidegate.state import rocksdb_codec as codec
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.keygroups import KeyGroupAssigner, _encode
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_instance import MIB, RocksDBOptions, parse_memory_size
from tidegate.state.snapshot_format import read_key_groups

M = 128


@pytest.fixture
def options(tmp_path) -> RocksDBOptions:
    return RocksDBOptions(local_dir=str(tmp_path / "local"))


@pytest.fixture
def backend(options):
    backend = RocksDBKeyedStateBackend(M, range(M), options)
    yield backend
    backend.dispose()


def write_snapshot(snapshot) -> tuple[io.BytesIO, object]:
    out = io.BytesIO()
    index = snapshot.write(out)
    out.seek(0)
    return out, index


def raw_keys(backend: RocksDBKeyedStateBackend, name: str) -> list[bytes]:
    backend.buffer.flush()
    return list(backend._column_family(name).keys())


def test_stored_keys_start_with_their_key_group_so_they_are_sorted_by_key_group(backend):
    state = backend.get_state(ValueStateDescriptor("v"))
    assigner = KeyGroupAssigner(M)
    keys = [f"user-{i}" for i in range(2000)] + list(range(2000))
    for key in keys:
        backend.current_key = key
        state.update(1)
    stored = raw_keys(backend, "v")
    groups = [codec.key_group_of(raw) for raw in stored]
    assert len(stored) == len(keys)
    assert groups == sorted(groups)
    assert sorted(groups) == sorted(assigner.key_group(k) for k in keys)


def test_a_key_group_range_is_one_contiguous_run_that_deletes_as_a_range(backend):
    state = backend.get_state(ValueStateDescriptor("v"))
    assigner = KeyGroupAssigner(M)
    for key in range(5000):
        backend.current_key = key
        state.update(key)
    backend.buffer.flush()
    cf = backend._column_family("v")
    begin, end = codec.key_group_bound(40), codec.key_group_bound(60)
    scanned = [raw for raw in cf.keys(from_key=begin) if raw < end]
    expected = {k for k in range(5000) if 40 <= assigner.key_group(k) < 60}
    assert len(scanned) == len(expected)
    assert all(40 <= codec.key_group_of(raw) < 60 for raw in scanned)
    cf.delete_range(begin, end)
    assert {k for k, _ in backend.entries("v")} == set(range(5000)) - expected


def test_equal_keys_of_different_types_are_one_key(backend):
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.current_key = 1
    state.update("one")
    backend.current_key = 1.0
    assert state.value() == "one"
    backend.current_key = True
    state.update("true")
    assert len(raw_keys(backend, "v")) == 1


def test_every_state_has_its_own_column_family(backend):
    value = backend.get_state(ValueStateDescriptor("v"))
    events = backend.get_list_state(ListStateDescriptor("l"))
    index = backend.get_map_state(MapStateDescriptor("m"))
    backend.current_key = "k"
    value.update("value")
    events.add("event")
    index.put("x", "entry")
    db_path = os.path.join(backend.instance.path, "db")
    families = rocksdict.Rdict.list_cf(db_path, rocksdict.Options(raw_mode=True))
    assert sorted(families) == ["default", "state:l", "state:m", "state:v"]
    assert (value.value(), events.get(), index.items()) == ("value", ["event"], [("x", "entry")])
    assert list(backend.instance.db.keys()) == []  # nothing in the default column family


def test_map_entries_of_a_key_are_contiguous_and_clear_removes_only_them(backend):
    state = backend.get_map_state(MapStateDescriptor("m"))
    for key in ["a", "ab", "b", ("a",), 7]:  # "a" is a prefix of "ab" in the key encoding
        backend.current_key = key
        state.put_all({i: f"{key}-{i}" for i in range(10)})
    backend.current_key = "a"
    assert sorted(state.keys()) == list(range(10))
    state.clear()
    assert state.is_empty()
    remaining = dict(backend.entries("m"))
    assert sorted(map(repr, remaining)) == sorted(map(repr, ["ab", "b", ("a",), 7]))
    assert remaining["ab"] == {i: f"ab-{i}" for i in range(10)}


def test_writes_after_the_synchronous_phase_are_not_in_the_snapshot(backend):
    value = backend.get_state(ValueStateDescriptor("v"))
    events = backend.get_list_state(ListStateDescriptor("l"))
    for key in range(100):
        backend.current_key = key
        value.update(key)
        events.add(key)
    snapshot = backend.snapshot()
    for key in range(100):  # overwrite, clear, add keys and a new state after the sync phase
        backend.current_key = key
        value.update(-1)
        events.clear()
    backend.current_key = "late"
    value.update("late")
    backend.get_state(ValueStateDescriptor("registered later")).update(1)
    out, index = write_snapshot(snapshot)
    written: dict = {}
    for _, data in read_key_groups(out, index, range(M)):
        for name, (_, entries) in data.items():
            written.setdefault(name, {}).update(entries)
    assert written == {"v": {k: k for k in range(100)}, "l": {k: [k] for k in range(100)}}
    assert index.state_kinds == {"v": "value", "l": "list"}


def test_a_snapshot_deletes_its_checkpoint_directory_when_written_or_dropped(backend):
    backend.current_key = "k"
    backend.get_state(ValueStateDescriptor("v")).update(1)
    written = backend.snapshot()
    assert os.path.isdir(written.path)
    write_snapshot(written)
    assert not os.path.exists(written.path)
    dropped = backend.snapshot()
    path = dropped.path
    assert os.path.isdir(path)
    del dropped  # an aborted checkpoint's snapshot, never written
    assert not os.path.exists(path)


def sst_bytes(path: str) -> int:
    """Bytes of the SST files under `path`, counted again when a background compaction deleted
    one of them between the listing and its size."""

    def count() -> int:
        return sum(
            os.path.getsize(os.path.join(root, f))
            for root, _, files in os.walk(path)
            for f in files
            if f.endswith(".sst")
        )

    for _ in range(9):
        with contextlib.suppress(FileNotFoundError):
            return count()
    return count()


def test_state_larger_than_the_block_cache_and_write_buffers_works(tmp_path):
    n = 250_000  # 4 to 7 MiB of SST files
    kib = 1024
    tiny = RocksDBOptions(
        local_dir=str(tmp_path),
        block_cache_size=256 * kib,
        write_buffer_size=256 * kib,
        value_cache_entries=1000,  # the reads below go to RocksDB
    )
    backend = RocksDBKeyedStateBackend(M, range(M), tiny)
    try:
        state = backend.get_state(ValueStateDescriptor("v"))
        for key in range(n):
            backend.current_key = key
            state.update(key * 2)
        for key in range(0, n, 997):
            backend.current_key = key
            assert state.value() == key * 2
        on_disk = sst_bytes(backend.instance.path)
        assert on_disk > 4 * (256 + 256) * kib  # on disk: 4x the block cache and a memtable
        out, index = write_snapshot(backend.snapshot())
        count = total = 0
        for _, data in read_key_groups(out, index, range(M)):
            entries = data["v"][1]
            count += len(entries)
            total += sum(entries.values())
        assert (count, total) == (n, n * (n - 1))
    finally:
        backend.dispose()


def test_hashmap_and_rocksdb_restore_each_others_snapshots(backend, options):
    heap = HeapKeyedStateBackend(M, range(M))
    for source in (heap, backend):
        value = source.get_state(ValueStateDescriptor("v"))
        index = source.get_map_state(MapStateDescriptor("m"))
        for key in [*range(300), "x", ("t", 1)]:
            source.current_key = key
            value.update(str(key))
            index.put_all({"a": key, "b": [key]})
    into_rocksdb = RocksDBKeyedStateBackend(M, range(M), options, operator_uid="other")
    into_heap = HeapKeyedStateBackend(M, range(M))
    try:
        for source, target in ((heap, into_rocksdb), (backend, into_heap)):
            out, index = write_snapshot(source.snapshot())
            target.restore(read_key_groups(out, index, range(M)))
            target.get_state(ValueStateDescriptor("v"))
            target.get_map_state(MapStateDescriptor("m"))
            assert dict(target.entries("v")) == dict(source.entries("v"))
            assert dict(target.entries("m")) == dict(source.entries("m"))
    finally:
        into_rocksdb.dispose()


def test_dispose_closes_the_database_and_deletes_its_directory(options):
    backend = RocksDBKeyedStateBackend(M, range(M), options, job_id="j")
    backend.current_key = "k"
    backend.get_state(ValueStateDescriptor("v")).update(1)
    path = backend.instance.path
    assert os.path.isdir(path)
    backend.dispose()
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.dirname(path))  # the job's directory, now empty


def test_a_new_attempt_deletes_what_a_killed_attempt_left_behind(options):
    old = RocksDBKeyedStateBackend(M, range(M), options, job_id="j", operator_uid="count")
    other = RocksDBKeyedStateBackend(
        M, range(M), options, job_id="j", operator_uid="count", subtask=1
    )
    old.instance.db.close()  # as if its process died: closed, never disposed
    from tidegate.state import rocksdb_instance

    rocksdb_instance._open_instances.discard(old.instance.path)
    new = RocksDBKeyedStateBackend(
        M, range(M), options, job_id="j", operator_uid="count", attempt=1
    )
    try:
        assert not os.path.exists(old.instance.path)
        assert os.path.isdir(other.instance.path)  # another subtask's: not touched
    finally:
        new.dispose()
        other.dispose()


def test_a_local_dir_that_cannot_hold_directories_is_a_clear_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(
        OSError,
        match=r"cannot create its instance directory .* set state\.backend\.rocksdb\.localdir",
    ):
        RocksDBKeyedStateBackend(M, range(M), RocksDBOptions(local_dir=str(not_a_dir)))


def test_memory_sizes_are_read_as_flink_writes_them():
    assert parse_memory_size("k", "67108864") == 64 * MIB
    assert parse_memory_size("k", "64mb") == parse_memory_size("k", "64 m") == 64 * MIB
    assert parse_memory_size("k", "1gb") == 1024 * MIB
    assert parse_memory_size("k", "512kb") == 512 * 1024
    with pytest.raises(ValueError, match="'k' must be a memory size"):
        parse_memory_size("k", "lots")


def test_state_backend_type_and_rocksdb_keys_configure_the_job():
    conf = Configuration()
    conf.set_string("state.backend.type", "rocksdb")
    conf.set_string("state.backend.rocksdb.block-cache-size", "8mb")
    conf.set_string("state.backend.rocksdb.writebuffer.size", "2mb")
    conf.set_string("state.backend.rocksdb.writebuffer.count", "3")
    conf.set_string("state.backend.rocksdb.localdir", "/data/rocksdb")
    conf.set_string("state.backend.rocksdb.value-cache.entries", "5000")
    backend = StreamExecutionEnvironment(conf).get_state_backend()
    assert isinstance(backend, EmbeddedRocksDBStateBackend)
    assert backend.rocksdb_options() == RocksDBOptions("/data/rocksdb", 8 * MIB, 2 * MIB, 3, 5000)
    assert isinstance(StreamExecutionEnvironment().get_state_backend(), HashMapStateBackend)


def test_a_backend_set_on_the_environment_wins_and_keeps_its_own_settings():
    conf = Configuration().set_string("state.backend.type", "hashmap")
    conf.set_string("state.backend.rocksdb.block-cache-size", "8mb")
    conf.set_string("state.backend.rocksdb.writebuffer.size", "2mb")
    env = StreamExecutionEnvironment(conf)
    env.set_state_backend(EmbeddedRocksDBStateBackend(True, block_cache_size="32mb"))
    backend = env.get_state_backend()
    assert backend.is_incremental_checkpoints_enabled()
    assert backend.rocksdb_options().block_cache_size == 32 * MIB
    assert backend.rocksdb_options().write_buffer_size == 2 * MIB


def test_bad_state_backend_settings_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown state backend 'rocks'.*'hashmap'.*'rocksdb'"):
        resolve_state_backend(None, Configuration().set_string("state.backend.type", "rocks"))
    bad_size = Configuration().set_string("state.backend.rocksdb.writebuffer.size", "big")
    with pytest.raises(ValueError, match=r"writebuffer\.size' must be a memory size"):
        resolve_state_backend(EmbeddedRocksDBStateBackend(), bad_size)
    with pytest.raises(ValueError, match="write_buffer_count must be at least 2"):
        EmbeddedRocksDBStateBackend(write_buffer_count=1)
    many = Configuration().set_string("state.backend.rocksdb.value-cache.entries", "many")
    with pytest.raises(ValueError, match=r"value-cache\.entries must be an integer, got 'many'"):
        resolve_state_backend(EmbeddedRocksDBStateBackend(), many)
    with pytest.raises(ValueError, match="value_cache_entries must be a positive integer, got 0"):
        EmbeddedRocksDBStateBackend(value_cache_entries=0)
    with pytest.raises(ValueError, match="unsupported state backend dict"):
        StreamExecutionEnvironment().set_state_backend({})


def test_buffered_writes_reach_rocksdb_when_the_buffer_fills_and_reads_see_both(backend):
    backend.buffer.max_entries = 10
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in range(25):
        backend.current_key = key
        state.update(key)
    assert 20 <= len(list(backend._column_family("v").keys())) < 25  # two flushes of 10
    assert len(state._cache.dirty) < 10
    for key in range(0, 25, 2):  # deletes buffered over flushed and buffered values
        backend.current_key = key
        state.update(None)
    for key in range(25):
        backend.current_key = key
        assert state.value() == (None if key % 2 == 0 else key)
    out, index = write_snapshot(backend.snapshot())
    written: dict = {}
    for _, data in read_key_groups(out, index, range(M)):
        written.update(data["v"][1])
    assert written == dict(backend.entries("v")) == {k: k for k in range(1, 25, 2)}


def test_the_write_buffer_is_bounded_by_bytes_too(backend):
    backend.buffer.max_bytes = 10_000
    state = backend.get_list_state(ListStateDescriptor("l"))
    backend.current_key = "one key"
    flushed = 0
    for _ in range(100):  # each add buffers the whole list again: 0.5 kB more every time
        state.add("x" * 500)
        assert backend.buffer.bytes < 10_000
        flushed += not backend.buffer.table("l")
    assert flushed > 10
    assert state.get() == ["x" * 500] * 100


def test_a_backend_dropped_without_dispose_still_deletes_its_directory(options):
    import gc

    backend = RocksDBKeyedStateBackend(M, range(M), options, job_id="j")
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.current_key = "k"
    state.update(1)
    path = backend.instance.path
    del backend, state  # e.g. its task failed in initialize_state, before it could close
    gc.collect()
    assert not os.path.exists(path)


@pytest.mark.parametrize("how", ["dispose", "dropped"])
def test_the_database_is_shut_down_before_its_directory_is_deleted(options, monkeypatch, how):
    """Every column family the states hold keeps RocksDB open (rocksdict): closing the instance
    closes them all, so RocksDB is shut down, not later by the garbage collector, when its
    shutdown flush fails in the deleted directory (and RocksDB then waits a second, GIL held)."""
    import gc
    import shutil

    from tidegate.state import rocksdb_instance

    backend = RocksDBKeyedStateBackend(M, range(M), options, job_id="j")
    for name in ("v", "w"):
        state = backend.get_state(ValueStateDescriptor(name))
        backend.current_key = "k"
        state.update(1)
    backend.buffer.flush()  # in the memtables: a RocksDB still open would flush them at shutdown
    path = backend.instance.path
    reopened: list[bool] = []  # per deletion: the database reopened, with the state's value
    rmtree = shutil.rmtree

    def reopen_then_rmtree(target: str, *args, **kwargs) -> None:
        if target == path:  # only possible once this process no longer holds the database
            db_path = os.path.join(path, "db")
            opts = rocksdb_instance.db_options(options)
            names = rocksdict.Rdict.list_cf(db_path, opts)
            db = rocksdict.Rdict(db_path, opts, column_families={n: opts for n in names})
            reopened.append(db.get_column_family("state:v")[codec.key_prefix("k", M)] is not None)
            db.close()
        rmtree(target, *args, **kwargs)

    monkeypatch.setattr(rocksdb_instance.shutil, "rmtree", reopen_then_rmtree)
    if how == "dispose":
        backend.dispose()
    else:
        del backend, state  # e.g. its task failed in initialize_state, before it could close
        gc.collect()
    assert reopened == [True]
    assert not os.path.exists(path)


# the value cache (rocksdb_cache) -----------------------------------------------------------------
class CollectAll(AggregateFunction):
    """An accumulator changed in place (a list), as many aggregate functions do."""

    def create_accumulator(self):
        return []

    def add(self, value, accumulator):
        accumulator.append(value)
        return accumulator

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


def test_values_changed_in_place_after_a_write_or_a_read_are_not_stored(backend):
    value = backend.get_state(ValueStateDescriptor("v"))
    reducing = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    aggregating = backend.get_aggregating_state(AggregatingStateDescriptor("a", CollectAll()))
    backend.current_key = "k"
    written = [1, 2]
    value.update(written)
    written.append(3)  # after update: not stored (Flink's RocksDB semantics)
    read = value.value()
    read.append(4)  # a read is a copy
    assert value.value() == [1, 2]
    added = [1]
    reducing.add(added)
    added.append(2)
    reducing.get().append(3)
    assert reducing.get() == [1]
    aggregating.add("x")
    aggregating.get().append("y")
    aggregating.add("z")
    assert aggregating.get() == ["x", "z"]
    out, index = write_snapshot(backend.snapshot())
    (_, data), *_ = read_key_groups(out, index, range(M))
    assert {name: entries["k"] for name, (_, entries) in data.items()} == {
        "v": [1, 2],
        "r": [1],
        "a": ["x", "z"],
    }


def test_immutable_values_are_cached_as_objects_and_pickled_when_flushed(backend):
    value = backend.get_state(ValueStateDescriptor("v"))
    backend.current_key = "k"
    pair = ("count", 10**20, (1.5, frozenset({"a"})))
    value.update(pair)
    assert value.value() is pair  # no copy: nobody can change it
    assert list(backend._column_family("v").keys()) == []  # not written yet
    backend.buffer.flush()
    assert [codec.loads(raw) for raw in backend._column_family("v").values()] == [("k", pair)]
    assert value.value() is pair  # still cached
    value.clear()
    backend.buffer.flush()
    assert list(backend._column_family("v").keys()) == []


def test_a_snapshot_right_after_updates_holds_them_and_removals(backend):
    value = backend.get_state(ValueStateDescriptor("v"))
    reducing = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    for key in range(300):
        backend.current_key = key
        value.update((key, "x"))
        reducing.add(key)
        reducing.add(1)
    backend.buffer.flush()  # in RocksDB; then removals and changes only in the cache
    for key in range(0, 300, 3):
        backend.current_key = key
        value.clear()
        reducing.add(1)
    out, index = write_snapshot(backend.snapshot())
    written: dict = {}
    for _, data in read_key_groups(out, index, range(M)):
        for name, (_, entries) in data.items():
            written.setdefault(name, {}).update(entries)
    assert written == {
        "v": {k: (k, "x") for k in range(300) if k % 3},
        "r": {k: k + 1 + (k % 3 == 0) for k in range(300)},
    }


def test_the_value_cache_keeps_at_most_its_entries_and_dirty_keys_per_state(options):
    backend = RocksDBKeyedStateBackend(M, range(M), replace(options, value_cache_entries=100))
    backend.buffer.max_entries = 50  # dirty keys per state
    try:
        state = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
        for _ in range(3):
            for key in range(1000):
                state.add_for_key(key, 1)
                assert len(state._cache.values) <= 100
                assert len(state._cache.dirty) <= 50
        for key in range(0, 1000, 7):
            backend.current_key = key
            assert state.get() == 3
        assert dict(backend.entries("r")) == dict.fromkeys(range(1000), 3)
    finally:
        backend.dispose()


def _merge(a, b):
    """A reduce function whose results are ints, flat and nested tuples or lists by key."""
    kind = b[0] % 4
    total = (a if type(a) is int else a[1]) + b[1]
    return [total, (kind, total), (kind, total, ("n", total)), [kind, total]][kind]


def test_add_all_of_a_batch_equals_add_for_key_of_each_record(options):
    """The keyed reduce's batch path: the same new values, the same state (through flushes of
    the dirty entries), and values that are not immutable kept as copies."""

    def make(name):
        backend = RocksDBKeyedStateBackend(
            M, range(M), replace(options, local_dir=str(options.local_dir) + name)
        )
        backend.buffer.max_entries = 40  # dirty keys per state: flushes within a batch
        state = backend.get_reducing_state(ReducingStateDescriptor("r", _merge))
        return backend, state

    one, one_state = make("one")
    batch, batch_state = make("batch")
    try:
        for round_ in range(4):
            keys = [(i * 7 + round_) % 150 for i in range(300)]
            values = [(k, i) for i, k in enumerate(keys)]
            expected = [one_state.add_for_key(k, v) for k, v in zip(keys, values, strict=True)]
            got = batch_state.add_all(keys, values)
            assert got == expected
            for value in got:
                if isinstance(value, list):
                    value.append("changed by the caller")  # must not reach the state
        assert dict(batch.entries("r")) == dict(one.entries("r"))
    finally:
        one.dispose()
        batch.dispose()


def test_user_key_bytes_memo_keeps_the_canonical_encoding():
    """The memo of map-state user key encodings gives what `_encode` gives: equal keys encode
    equally (1 and 1.0), the memo is bounded, and an unhashable key fails as before."""
    for key in (1, 1.0, (1, 2), TimeWindow(0, 10), "a", None):
        assert codec.user_key_bytes(key) == _encode(key)
        assert codec.user_key_bytes(key) == _encode(key)  # from the memo
    assert codec.user_key_bytes(1.0) == codec.user_key_bytes(1)
    for n in range(codec._USER_KEYS_LIMIT + 10):
        assert codec.user_key_bytes(("n", n)) == _encode(("n", n))
    assert len(codec._USER_KEYS) <= codec._USER_KEYS_LIMIT
    with pytest.raises(TypeError) as memo_error:
        codec.user_key_bytes([1, 2])
    with pytest.raises(TypeError) as direct_error:
        _encode([1, 2])
    assert str(memo_error.value) == str(direct_error.value)


def test_an_instance_is_created_when_the_job_directory_goes_meanwhile(tmp_path, monkeypatch):
    """The last other instance of the job closing (its finalizer, at any allocation) deletes
    the empty job directory between its creation and the new instance's: made again."""
    from tidegate.state import rocksdb_instance

    real_mkdtemp, removed = rocksdb_instance.tempfile.mkdtemp, []

    def job_dir_goes_first(prefix, dir):
        if not removed:
            removed.append(dir)
            os.rmdir(dir)  # what RocksDBInstance.close does with an empty job directory
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(rocksdb_instance.tempfile, "mkdtemp", job_dir_goes_first)
    options = RocksDBOptions(local_dir=str(tmp_path))
    path = rocksdb_instance.create_instance_dir(options, "job", "op", 0, 0)
    assert removed and os.path.isdir(path) and os.path.dirname(path) == removed[0]
