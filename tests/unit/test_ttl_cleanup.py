"""State TTL cleanup strategies and restore, on the heap backend with an injected clock: entries
are physically gone from the backend's tables and from the snapshot files."""

from __future__ import annotations

import pytest

from tidegate.common.time import Time
from tidegate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tidegate.runtime.operators import MapOperator, OperatorRuntime
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.snapshot_format import read_key_groups
from tidegate.state.ttl import TtlValue
from tidegate.state.ttl.factory import batch_cleanup, ttl_states

M = 128
TTL_MS = 1000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["hashmap", "rocksdb"])
def new_backend(request, tmp_path):
    """Creates TTL-clocked backends of the parametrised type (both must behave alike)."""
    created = []

    def make(clock: Clock):
        if request.param == "hashmap":
            backend = HeapKeyedStateBackend(M, range(M))
        else:
            options = RocksDBOptions(local_dir=str(tmp_path / "rocksdb"))
            backend = RocksDBKeyedStateBackend(
                M, range(M), options, operator_uid=f"op{len(created)}"
            )
        created.append(backend)
        ttl_states(backend, clock)
        return backend

    yield make
    for backend in created:
        getattr(backend, "dispose", lambda: None)()


@pytest.fixture
def backend(clock, new_backend):
    return new_backend(clock)


def builder() -> StateTtlConfig.Builder:
    return StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).disable_cleanup_in_background()


def ttl(descriptor, ttl_config: StateTtlConfig):
    descriptor.enable_time_to_live(ttl_config)
    return descriptor


def fill(backend, state, keys, write=lambda state, key: state.update(key)) -> None:
    for key in keys:
        backend.current_key = key
        write(state, key)
    backend.current_key = None


def write_snapshot(backend, path):
    with path.open("wb") as f:
        return backend.snapshot().write(f)


def read_file(path, index) -> dict:
    result: dict = {}
    with path.open("rb") as f:
        for _, data in read_key_groups(f, index, range(M)):
            for name, (_, entries) in data.items():
                result.setdefault(name, {}).update(entries)
    return result


# without cleanup, nothing unread goes away ------------------------------------------------------
def test_without_background_cleanup_expired_entries_stay_until_read(backend, clock):
    state = backend.get_state(ttl(ValueStateDescriptor("v"), builder().build()))
    fill(backend, state, range(10))
    clock.advance(TTL_MS)
    backend.current_key = 0
    assert state.value() is None
    assert len(dict(backend.entries("v"))) == 9


# incremental cleanup ---------------------------------------------------------------------------
def test_incremental_cleanup_checks_cleanup_size_entries_per_access(backend, clock):
    state = backend.get_state(
        ttl(ValueStateDescriptor("v"), builder().cleanup_incrementally(3, False).build())
    )
    fill(backend, state, range(10))  # 10 accesses: a pass over what exists as it goes
    clock.advance(TTL_MS)
    backend.current_key = "fresh"
    state.update("x")  # this access starts a new pass: 3 expired entries go
    assert len(dict(backend.entries("v"))) == 11 - 3
    for _ in range(3):
        state.value()
    assert set(dict(backend.entries("v"))) == {"fresh"}
    assert backend.current_key == "fresh"  # the cleanup restores the current key


def test_incremental_cleanup_is_the_default_background_cleanup(backend, clock):
    state = backend.get_state(
        ttl(
            ValueStateDescriptor("v"), StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).build()
        )
    )
    fill(backend, state, range(20))
    clock.advance(TTL_MS)
    backend.current_key = "fresh"
    for _ in range(6):
        state.value()
    assert set(dict(backend.entries("v"))) == set()  # 5 entries per access


def test_incremental_cleanup_prunes_expired_list_elements_and_map_entries(backend, clock):
    c = builder().cleanup_incrementally(100, False).build()
    lists = backend.get_list_state(ttl(ListStateDescriptor("l"), c))
    maps = backend.get_map_state(ttl(MapStateDescriptor("m"), c))
    fill(backend, lists, range(5), lambda s, k: s.add(k))
    fill(backend, maps, range(5), lambda s, k: s.put("old", k))
    clock.advance(TTL_MS // 2)
    fill(backend, lists, range(2), lambda s, k: s.add("new"))
    fill(backend, maps, range(2), lambda s, k: s.put("new", k))
    clock.advance(TTL_MS // 2)
    backend.current_key = "other"
    lists.get()
    maps.get("x")
    assert {k: [e.value for e in v] for k, v in dict(backend.entries("l")).items()} == {
        0: ["new"],
        1: ["new"],
    }
    assert {k: set(v) for k, v in dict(backend.entries("m")).items()} == {0: {"new"}, 1: {"new"}}


def test_per_record_cleanup_runs_after_each_batch_of_the_operator(clock):
    class Remember:
        def open(self, runtime_context):
            c = builder().cleanup_incrementally(1, True).build()
            self.state = runtime_context.get_state(ttl(ValueStateDescriptor("seen"), c))

        def map(self, value):
            if value[1] == "write":
                self.state.update(value)
            return value

    function = Remember()
    op = MapOperator(function, function.map, key_selector=lambda r: r[0], uid="m", name="m")
    op.initialize_state(OperatorRuntime(0, 1, M, attempt=0), None)
    ttl_states(op.keyed_backend, clock)
    op.open()
    op.process_batch([(k, "write") for k in range(10)])
    clock.advance(TTL_MS)
    op.process_batch([("x", "read")] * 4)  # 4 records that touch no state: 4 entries checked
    assert len(dict(op.keyed_backend.entries("seen"))) == 6
    op.process_batch([("x", "read")] * 6)
    assert dict(op.keyed_backend.entries("seen")) == {}


# background sweep (the RocksDB compaction filter's equivalent) ---------------------------------
def test_background_sweep_removes_expired_entries_between_batches(backend, clock):
    c = builder().cleanup_in_rocksdb_compact_filter(4).build()
    state = backend.get_state(ttl(ValueStateDescriptor("v"), c))
    fill(backend, state, range(10))
    after_batch = batch_cleanup(backend)
    assert after_batch is not None
    after_batch(1)  # the first pass starts: nothing has expired yet
    after_batch(1)
    after_batch(1)
    assert len(dict(backend.entries("v"))) == 10
    clock.advance(TTL_MS)
    after_batch(1)  # one interval (the TTL) since the last pass started: a new pass
    assert len(dict(backend.entries("v"))) == 6
    after_batch(1)
    after_batch(1)
    assert dict(backend.entries("v")) == {}


def test_background_sweep_waits_for_the_periodic_compaction_time(backend, clock):
    c = builder().cleanup_in_rocksdb_compact_filter(100, Time.milliseconds(TTL_MS * 10)).build()
    state = backend.get_state(ttl(ValueStateDescriptor("v"), c))
    fill(backend, state, range(3))
    after_batch = batch_cleanup(backend)
    after_batch(1)  # pass 1 over fresh entries
    clock.advance(TTL_MS // 2)
    fill(backend, state, range(3, 6))
    clock.advance(TTL_MS // 2)
    after_batch(1)  # min(ttl, periodic) = ttl has passed: a pass removes the first three
    assert sorted(dict(backend.entries("v"))) == [3, 4, 5]
    clock.advance(TTL_MS // 2)
    after_batch(1)  # not yet: the last pass started half a TTL ago
    assert sorted(dict(backend.entries("v"))) == [3, 4, 5]
    clock.advance(TTL_MS // 2)
    after_batch(1)
    assert dict(backend.entries("v")) == {}


def test_no_batch_hook_without_per_record_or_background_cleanup(backend):
    backend.get_state(
        ttl(ValueStateDescriptor("v"), builder().cleanup_incrementally(5, False).build())
    )
    assert batch_cleanup(backend) is None
    assert batch_cleanup(HeapKeyedStateBackend(M, range(M))) is None


# cleanup in full snapshot ----------------------------------------------------------------------
def test_full_snapshot_cleanup_leaves_expired_entries_out_of_the_file(backend, clock, tmp_path):
    c = builder().cleanup_full_snapshot().build()
    values = backend.get_state(ttl(ValueStateDescriptor("v"), c))
    lists = backend.get_list_state(ttl(ListStateDescriptor("l"), c))
    maps = backend.get_map_state(ttl(MapStateDescriptor("m"), c))
    fill(backend, values, ["old"])
    fill(backend, lists, ["old", "mixed"], lambda s, k: s.add(k))
    fill(backend, maps, ["old", "mixed"], lambda s, k: s.put("a", k))
    clock.advance(TTL_MS // 2)
    fill(backend, values, ["new"])
    fill(backend, lists, ["mixed"], lambda s, k: s.add("late"))
    fill(backend, maps, ["mixed"], lambda s, k: s.put("b", k))
    clock.advance(TTL_MS // 2)
    stamp = clock.now - TTL_MS // 2
    index = write_snapshot(backend, tmp_path / "chk")
    assert read_file(tmp_path / "chk", index) == {
        "v": {"new": TtlValue("new", stamp)},
        "l": {"mixed": [TtlValue("late", stamp)]},
        "m": {"mixed": {"b": TtlValue("mixed", stamp)}},
    }
    assert len(dict(backend.entries("v"))) == 2  # the live state is not touched by the snapshot


def test_full_snapshot_cleanup_uses_the_time_of_the_synchronous_phase(backend, clock, tmp_path):
    state = backend.get_state(
        ttl(ValueStateDescriptor("v"), builder().cleanup_full_snapshot().build())
    )
    fill(backend, state, ["k"])
    snapshot = backend.snapshot()
    clock.advance(TTL_MS)  # expires while the snapshot is being written: it is still in it
    with (tmp_path / "chk").open("wb") as f:
        index = snapshot.write(f)
    assert set(read_file(tmp_path / "chk", index)["v"]) == {"k"}


def test_without_full_snapshot_cleanup_expired_entries_are_written(backend, clock, tmp_path):
    state = backend.get_state(ttl(ValueStateDescriptor("v"), builder().build()))
    fill(backend, state, ["k"])
    clock.advance(TTL_MS)
    index = write_snapshot(backend, tmp_path / "chk")
    assert set(read_file(tmp_path / "chk", index)["v"]) == {"k"}


# restore ---------------------------------------------------------------------------------------
def restored(new_backend, clock, path, index):
    backend = new_backend(clock)
    with path.open("rb") as f:
        backend.restore(read_key_groups(f, index, range(M)))
    return backend


def test_ttl_timestamps_are_checkpointed_and_restored(backend, new_backend, clock, tmp_path):
    c = builder().build()
    state = backend.get_state(ttl(ValueStateDescriptor("v"), c))
    fill(backend, state, ["early"])
    clock.advance(TTL_MS // 2)
    fill(backend, state, ["late"])
    index = write_snapshot(backend, tmp_path / "chk")
    clock.advance(TTL_MS // 2)
    again = restored(new_backend, clock, tmp_path / "chk", index)
    state = again.get_state(ttl(ValueStateDescriptor("v"), c))
    again.current_key = "early"
    assert state.value() is None  # expired while the job was down: never returned
    again.current_key = "late"
    assert state.value() == "late"
    clock.advance(TTL_MS // 2)
    assert state.value() is None


def test_enabling_ttl_on_state_restored_without_it_is_refused(
    backend, new_backend, clock, tmp_path
):
    for kind, descriptor, write in [
        ("v", ValueStateDescriptor("v"), lambda s, k: s.update(k)),
        ("l", ListStateDescriptor("l"), lambda s, k: s.add(k)),
        ("m", MapStateDescriptor("m"), lambda s, k: s.put(k, k)),
    ]:
        getter = {"v": backend.get_state, "l": backend.get_list_state, "m": backend.get_map_state}
        fill(backend, getter[kind](descriptor), ["k"], write)
    index = write_snapshot(backend, tmp_path / "chk")
    again = restored(new_backend, clock, tmp_path / "chk", index)
    for get, descriptor in [
        (again.get_state, ValueStateDescriptor("v")),
        (again.get_list_state, ListStateDescriptor("l")),
        (again.get_map_state, MapStateDescriptor("m")),
    ]:
        with pytest.raises(ValueError, match=r"written without TTL.*Remove enable_time_to_live"):
            get(ttl(descriptor, builder().build()))


def test_disabling_ttl_on_state_restored_with_it_is_refused(backend, new_backend, clock, tmp_path):
    c = builder().build()
    fill(backend, backend.get_state(ttl(ValueStateDescriptor("v"), c)), ["k"])
    fill(
        backend,
        backend.get_list_state(ttl(ListStateDescriptor("l"), c)),
        ["k"],
        lambda s, k: s.add(k),
    )
    index = write_snapshot(backend, tmp_path / "chk")
    again = restored(new_backend, clock, tmp_path / "chk", index)
    with pytest.raises(ValueError, match=r"written with TTL.*Keep enable_time_to_live"):
        again.get_state(ValueStateDescriptor("v"))
    with pytest.raises(ValueError, match="written with TTL"):
        again.get_list_state(ListStateDescriptor("l"))


def test_a_value_state_holding_lists_is_not_mistaken_for_ttl_state(
    backend, new_backend, clock, tmp_path
):
    fill(
        backend,
        backend.get_state(ValueStateDescriptor("v")),
        ["k"],
        lambda s, k: s.update([TtlValue(1, 2)]),
    )
    index = write_snapshot(backend, tmp_path / "chk")
    again = restored(new_backend, clock, tmp_path / "chk", index)
    again.current_key = "k"
    assert again.get_state(ValueStateDescriptor("v")).value() == [TtlValue(1, 2)]
