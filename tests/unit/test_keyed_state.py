"""Keyed state backends (hashmap and rocksdb, the same suite for both): state semantics per kind,
snapshot isolation, restore and rescale. Tests of one backend's internals say so in their name."""

from __future__ import annotations

import pytest

from tidegate.datastream.functions import AggregateFunction
from tidegate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from tidegate.state.heap import HeapKeyedStateBackend, NoKeyContextError
from tidegate.state.keygroups import KeyGroupAssigner, key_group_range
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.snapshot_format import CorruptStateError, read_key_groups

M = 128


class MutatingAverage(AggregateFunction):
    """Changes its accumulator in place, as many Flink aggregate functions do."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


def in_place_sum(a: list, b: list) -> list:
    a.extend(b)
    return a


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend_type(request) -> str:
    return request.param


@pytest.fixture
def make_backend(backend_type, tmp_path):
    """Creates backends of the parametrised type; rocksdb ones are disposed after the test."""
    created: list = []

    def make(max_parallelism: int = M, key_groups: range = range(M)):
        if backend_type == "hashmap":
            backend = HeapKeyedStateBackend(max_parallelism, key_groups)
        else:
            options = RocksDBOptions(local_dir=str(tmp_path / "rocksdb"))
            backend = RocksDBKeyedStateBackend(
                max_parallelism, key_groups, options, operator_uid=f"op{len(created)}"
            )
        created.append(backend)
        return backend

    yield make
    for backend in created:
        if hasattr(backend, "dispose"):
            backend.dispose()


@pytest.fixture
def backend(make_backend):
    return make_backend()


@pytest.fixture
def state_backend(backend_type, tmp_path):
    """The user-facing backend object of the parametrised type (what a job configures)."""
    if backend_type == "hashmap":
        return HashMapStateBackend()
    return EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "rocksdb"))


def contents(backend, tmp_path, name: str = "snap") -> dict:
    """Write a snapshot to a real file and read it back: {state: {key: value}}."""
    path = tmp_path / f"{name}.state"
    with path.open("wb") as f:
        index = backend.snapshot().write(f)
    return read_back(path, index)


def read_back(path, index, key_groups: range = range(M)) -> dict:
    result: dict = {}
    with path.open("rb") as f:
        for _, data in read_key_groups(f, index, key_groups):
            for name, (_, entries) in data.items():
                result.setdefault(name, {}).update(entries)
    return result


def test_value_state_is_scoped_to_the_current_key(backend):
    state = backend.get_state(ValueStateDescriptor("count"))
    backend.current_key = "a"
    assert state.value() is None
    state.update(1)
    backend.current_key = "b"
    state.update(2)
    backend.current_key = "a"
    assert state.value() == 1
    state.clear()
    assert state.value() is None
    backend.current_key = "b"
    assert state.value() == 2


def test_updating_a_value_state_with_none_clears_it(backend, tmp_path):
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.current_key = "k"
    state.update("x")
    state.update(None)
    assert contents(backend, tmp_path) == {}


def test_list_state_adds_updates_and_reads_a_copy(backend):
    state = backend.get_list_state(ListStateDescriptor("events"))
    backend.current_key = "k"
    assert list(state.get()) == []
    state.add(1)
    state.add_all([2, 3])
    for element in state.get():  # adding while iterating the result is safe
        state.add(element * 10)
    assert state.get() == [1, 2, 3, 10, 20, 30]
    state.update([7])
    assert state.get() == [7]
    state.update([])
    assert state.get() == []
    state.add_all([])
    state.add(8)
    state.clear()
    assert state.get() == []


def test_map_state_behaves_like_a_dict_per_key(backend):
    state = backend.get_map_state(MapStateDescriptor("m"))
    backend.current_key = "k"
    assert state.is_empty() and state.get("x") is None and not state.contains("x")
    state.put("x", 1)
    state.put_all({"y": 2, "z": 3})
    assert state.get("x") == 1 and state.contains("y")
    assert sorted(state.items()) == [("x", 1), ("y", 2), ("z", 3)]
    assert sorted(state.keys()) == sorted(state) == ["x", "y", "z"]
    assert sorted(state.values()) == [1, 2, 3]
    for key in state:  # iterates a copy of the keys, so removing while iterating is safe
        state.remove(key)
    assert state.is_empty()
    state.put("a", 1)
    backend.current_key = "other"
    assert state.is_empty()
    backend.current_key = "k"
    state.clear()
    assert state.is_empty()


def test_removing_the_last_map_entry_removes_the_key(backend, tmp_path):
    state = backend.get_map_state(MapStateDescriptor("m"))
    backend.current_key = "k"
    state.put("x", 1)
    state.remove("x")
    state.remove("never there")
    assert contents(backend, tmp_path) == {}


def test_reducing_state_accepts_a_callable_or_a_reduce_function(backend):
    class Max:
        def reduce(self, a, b):
            return max(a, b)

    total = backend.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b))
    biggest = backend.get_reducing_state(ReducingStateDescriptor("max", Max()))
    backend.current_key = "k"
    assert total.get() is None
    for value in (3, 9, 4):
        total.add(value)
        biggest.add(value)
    assert (total.get(), biggest.get()) == (16, 9)
    total.clear()
    assert total.get() is None


def test_aggregating_state_reads_through_get_result(backend):
    state = backend.get_aggregating_state(AggregatingStateDescriptor("avg", MutatingAverage()))
    backend.current_key = "k"
    assert state.get() is None
    state.add(2)
    state.add(4)
    assert state.get() == 3
    state.clear()
    assert state.get() is None


def test_state_is_only_available_while_a_key_is_set(backend):
    state = backend.get_state(ValueStateDescriptor("count"))
    with pytest.raises(NoKeyContextError, match="only available on a keyed stream"):
        state.value()
    with pytest.raises(NoKeyContextError, match="process_element/on_timer"):
        backend.get_list_state(ListStateDescriptor("l")).add(1)


def test_the_same_name_gives_the_same_state_object(backend):
    first = backend.get_state(ValueStateDescriptor("count"))
    assert backend.get_state(ValueStateDescriptor("count")) is first


def test_registering_a_name_again_with_another_kind_is_an_error(backend):
    backend.get_state(ValueStateDescriptor("count"))
    with pytest.raises(ValueError, match=r"'count' is registered as value state .* list state"):
        backend.get_list_state(ListStateDescriptor("count"))


def test_registering_a_restored_name_with_another_kind_is_an_error(backend, make_backend, tmp_path):
    backend.get_state(ValueStateDescriptor("count"))
    backend.current_key = "k"
    backend.get_state(ValueStateDescriptor("count")).update(1)
    path = tmp_path / "s.state"
    with path.open("wb") as f:
        index = backend.snapshot().write(f)
    restored = make_backend()
    with path.open("rb") as f:
        restored.restore(read_key_groups(f, index, range(M)))
    with pytest.raises(ValueError, match=r"'count' is restored as value state .* map state"):
        restored.get_map_state(MapStateDescriptor("count"))


def test_changes_after_snapshot_do_not_appear_in_what_it_writes(backend, tmp_path):
    value = backend.get_state(ValueStateDescriptor("v"))
    events = backend.get_list_state(ListStateDescriptor("l"))
    index = backend.get_map_state(MapStateDescriptor("m"))
    total = backend.get_reducing_state(ReducingStateDescriptor("r", in_place_sum))
    average = backend.get_aggregating_state(AggregatingStateDescriptor("a", MutatingAverage()))
    backend.current_key = "k"
    value.update(1)
    events.add(1)
    index.put("x", 1)
    total.add([1])
    average.add(1)

    snapshot = backend.snapshot()
    value.update(2)
    events.add(2)
    index.put("y", 2)
    total.add([2])
    average.add(3)
    backend.current_key = "new key"
    value.update(3)

    path = tmp_path / "s.state"
    with path.open("wb") as f:
        written = snapshot.write(f)
    assert read_back(path, written) == {
        "v": {"k": 1},
        "l": {"k": [1]},
        "m": {"k": {"x": 1}},
        "r": {"k": [1]},
        "a": {"k": [1, 1]},
    }
    backend.current_key = "k"
    assert (total.get(), average.get()) == ([1, 2], 2)


def test_heap_copy_on_write_applies_again_after_each_snapshot(tmp_path):
    backend = HeapKeyedStateBackend(M, range(M))
    average = backend.get_aggregating_state(AggregatingStateDescriptor("a", MutatingAverage()))
    backend.current_key = "k"
    average.add(1)
    first = backend.snapshot()
    average.add(1)
    second = backend.snapshot()
    average.add(1)
    average.add(1)
    assert first.tables["a"][1] == {"k": [1, 1]}
    assert second.tables["a"][1] == {"k": [2, 2]}
    assert average.get() == 1


def test_a_snapshot_round_trips_through_a_state_file(backend, make_backend, tmp_path):
    value = backend.get_state(ValueStateDescriptor("v"))
    events = backend.get_list_state(ListStateDescriptor("l"))
    keys = [f"user-{i}" for i in range(500)] + list(range(500)) + [("t", 1), b"raw", 2.5]
    for key in keys:
        backend.current_key = key
        value.update(str(key))
        events.add_all([key, key])
    path = tmp_path / "s.state"
    with path.open("wb") as f:
        index = backend.snapshot().write(f)

    restored = make_backend()
    with path.open("rb") as f:
        restored.restore(read_key_groups(f, index, restored.key_group_range))
    value2 = restored.get_state(ValueStateDescriptor("v"))
    events2 = restored.get_list_state(ListStateDescriptor("l"))
    for key in keys:
        restored.current_key = key
        assert value2.value() == str(key)
        assert events2.get() == [key, key]
    assert index.state_kinds == {"v": "value", "l": "list"}
    assert index.max_parallelism == M


def test_rescaling_from_two_to_three_subtasks_gives_each_exactly_its_key_groups(
    make_backend, tmp_path
):
    assigner = KeyGroupAssigner(M)
    original = {f"key-{i}": i for i in range(3000)}
    files = []
    for i in range(2):  # Step 1: two old subtasks, each with the keys of its own key groups
        old = make_backend(M, key_group_range(i, 2, M))
        state = old.get_state(ValueStateDescriptor("v"))
        for key, value in original.items():
            if assigner.key_group(key) in old.key_group_range:
                old.current_key = key
                state.update(value)
        path = tmp_path / f"old-{i}.state"
        with path.open("wb") as f:
            files.append((path, old.snapshot().write(f)))

    union: dict = {}
    for j in range(3):  # Step 2: three new subtasks, each reading both old files
        new = make_backend(M, key_group_range(j, 3, M))
        for path, index in files:
            with path.open("rb") as f:
                new.restore(read_key_groups(f, index, new.key_group_range))
        new.get_state(ValueStateDescriptor("v"))
        restored = dict(new.entries("v"))
        owned = new.key_group_range
        expected = {k: v for k, v in original.items() if assigner.key_group(k) in owned}
        assert restored == expected
        assert union.keys().isdisjoint(restored)
        union.update(restored)
    assert union == original


def test_restore_rejects_key_groups_outside_the_backend_range(tmp_path, backend, make_backend):
    backend.get_state(ValueStateDescriptor("v"))
    for key in range(200):
        backend.current_key = key
        backend.get_state(ValueStateDescriptor("v")).update(key)
    path = tmp_path / "s.state"
    with path.open("wb") as f:
        index = backend.snapshot().write(f)
    narrow = make_backend(M, range(0, 64))
    with path.open("rb") as f, pytest.raises(ValueError, match=r"outside .* \[0, 63\]"):
        narrow.restore(read_key_groups(f, index, range(M)))


def test_restoring_the_same_key_group_twice_is_an_error(tmp_path, backend, make_backend):
    backend.current_key = "k"
    backend.get_state(ValueStateDescriptor("v")).update(1)
    path = tmp_path / "s.state"
    with path.open("wb") as f:
        index = backend.snapshot().write(f)
    restored = make_backend()
    with path.open("rb") as f:
        restored.restore(read_key_groups(f, index, range(M)))
        with pytest.raises(ValueError, match="restored twice"):
            restored.restore(read_key_groups(f, index, range(M)))


def test_a_key_stored_under_the_wrong_key_group_does_not_load(make_backend):
    key = "k"
    wrong = (KeyGroupAssigner(M).key_group(key) + 1) % M
    backend = make_backend()
    with pytest.raises(CorruptStateError, match=f"'k' belongs to key group .* {M}"):
        backend.restore([(wrong, {"v": ("value", {key: 1})})])


def test_a_snapshot_with_a_key_routed_to_the_wrong_subtask_fails_to_write(make_backend, tmp_path):
    assigner = KeyGroupAssigner(M)
    key = next(k for k in range(1000) if assigner.key_group(k) >= 64)
    backend = make_backend(M, range(0, 64))
    backend.current_key = key
    backend.get_state(ValueStateDescriptor("v")).update(1)
    with (tmp_path / "s.state").open("wb") as f, pytest.raises(RuntimeError, match="wrong subtask"):
        backend.snapshot().write(f)


def test_heap_table_gives_the_live_dict_of_a_registered_state():
    backend = HeapKeyedStateBackend(M, range(M))
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.table("v")["k"] = 5
    backend.current_key = "k"
    assert state.value() == 5
    with pytest.raises(KeyError, match="not registered"):
        backend.table("missing")


def test_a_key_group_range_outside_max_parallelism_is_rejected(make_backend):
    with pytest.raises(ValueError, match="key_group_range"):
        make_backend(128, range(64, 129))


def test_a_keyed_reduce_that_mutates_its_accumulator_cannot_change_a_taken_snapshot(
    state_backend,
):
    from tidegate.runtime.operators import KeyedReduceOperator, OperatorRuntime

    def append(acc, value):  # changes its first argument in place
        acc.append(value[1])
        return acc

    emitted = []

    class Collect:
        def process_batch(self, records):
            emitted.extend(list(r) for r in records)

    op = KeyedReduceOperator(None, append, lambda r: r[0])
    op.outputs = [Collect()]
    op.initialize_state(OperatorRuntime(0, 1, 128, 0, state_backend=state_backend), None)
    op.open()
    op.process_batch([["k", 1], ["k", 2]])
    snapshot = op.snapshot_state(1, 0)
    op.process_batch([["k", 3]])  # after the barrier, while the snapshot is being written
    ((_kg, data),) = list(snapshot.keyed.key_groups())
    assert data["__reduce__"][1] == {"k": ["k", 1, 2]}
    assert emitted[-1] == ["k", 1, 2, 3]
    op.close()


def test_heap_values_are_copied_on_write_only_while_a_snapshot_is_held():
    import gc

    from tidegate.state.descriptors import ReducingStateDescriptor
    from tidegate.state.heap import HeapKeyedStateBackend

    backend = HeapKeyedStateBackend(128, range(128))
    state = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    backend.current_key = "k"
    state.add([1])
    snapshot = backend.snapshot()
    assert backend.snapshots_in_flight == 1
    state.add([2])  # copies: the snapshot still holds [1]
    assert snapshot.tables["r"][1]["k"] == [1]
    del snapshot
    gc.collect()
    assert backend.snapshots_in_flight == 0
    before = backend.table("r")["k"]
    state.add([3])
    assert backend.table("r")["k"] == [1, 2, 3]
    assert before == [1, 2]  # `a + b` built a new list; nothing else was copied or changed
