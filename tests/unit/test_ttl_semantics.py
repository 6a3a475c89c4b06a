"""State TTL semantics on the heap backend, driven by an injected processing-time clock:
StateTtlConfig, every update type x visibility, and list/map/reducing/aggregating with TTL."""

from __future__ import annotations

import pytest

from tidegate.common.time import Duration, Time
from tidegate.datastream.functions import AggregateFunction
from tidegate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.ttl import TtlValue
from tidegate.state.ttl.factory import ttl_states

M = 128
TTL_MS = 1000
UpdateType = StateTtlConfig.UpdateType
Visibility = StateTtlConfig.StateVisibility


class Clock:
    """A manual processing-time clock (epoch ms)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend(request, clock, tmp_path):
    """A TTL-clocked backend of the parametrised type (both must behave alike)."""
    if request.param == "hashmap":
        b = HeapKeyedStateBackend(M, range(M))
    else:
        b = RocksDBKeyedStateBackend(M, range(M), RocksDBOptions(local_dir=str(tmp_path / "r")))
    ttl_states(b, clock)
    b.current_key = "k"
    yield b
    getattr(b, "dispose", lambda: None)()


def config(
    update: StateTtlConfig.UpdateType = UpdateType.OnCreateAndWrite,
    visibility: StateTtlConfig.StateVisibility = Visibility.NeverReturnExpired,
) -> StateTtlConfig:
    return (
        StateTtlConfig.new_builder(Time.milliseconds(TTL_MS))
        .set_update_type(update)
        .set_state_visibility(visibility)
        .disable_cleanup_in_background()
        .build()
    )


def with_ttl(descriptor, ttl_config=None):
    descriptor.enable_time_to_live(ttl_config or config())
    return descriptor


# StateTtlConfig --------------------------------------------------------------------------------
def test_the_builder_defaults_are_flinks():
    c = StateTtlConfig.new_builder(Time.seconds(1)).build()
    assert c.get_ttl() == Duration.of_millis(1000)
    assert c.get_update_type() is UpdateType.OnCreateAndWrite
    assert c.get_state_visibility() is Visibility.NeverReturnExpired
    assert c.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    assert c.is_enabled()
    strategies = c.get_cleanup_strategies()
    assert strategies.is_cleanup_in_background()
    assert not strategies.in_full_snapshot()
    incremental = strategies.get_incremental_cleanup_strategy()
    assert (incremental.get_cleanup_size(), incremental.run_cleanup_for_every_record()) == (
        5,
        False,
    )


def test_the_builder_chains_every_pyflink_setter():
    c = (
        StateTtlConfig.new_builder(Time.seconds(1))
        .set_update_type(UpdateType.OnReadAndWrite)
        .set_state_visibility(Visibility.ReturnExpiredIfNotCleanedUp)
        .set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
        .cleanup_full_snapshot()
        .cleanup_incrementally(10, True)
        .cleanup_in_rocksdb_compact_filter(1000, Time.hours(1))
        .disable_cleanup_in_background()
        .set_ttl(Time.minutes(2))
        .build()
    )
    strategies = c.get_cleanup_strategies()
    assert c.get_ttl().to_milliseconds() == 120_000
    assert strategies.in_full_snapshot() and not strategies.is_cleanup_in_background()
    assert strategies.get_incremental_cleanup_strategy().get_cleanup_size() == 10
    compaction = strategies.get_rocksdb_compact_filter_cleanup_strategy()
    assert compaction.get_query_time_after_num_entries() == 1000
    assert compaction.get_periodic_compaction_time() == Time.hours(1)


def test_disabled_update_type_leaves_the_state_without_ttl(backend, clock):
    c = StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(UpdateType.Disabled).build()
    assert not c.is_enabled()
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), c))
    state.update(1)
    clock.advance(10_000)
    assert state.value() == 1
    assert dict(backend.entries("v")) == {"k": 1}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StateTtlConfig.new_builder(Time.seconds(0)).build(), "positive"),
        (lambda: StateTtlConfig.new_builder(5), "Time/Duration"),
        (
            lambda: StateTtlConfig.new_builder(Time.seconds(1)).cleanup_incrementally(-1, False),
            ">= 0",
        ),
        (
            lambda: StateTtlConfig.new_builder(Time.seconds(1)).cleanup_in_rocksdb_compact_filter(
                0
            ),
            ">= 1",
        ),
        (
            lambda: StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnRead"),
            "UpdateType",
        ),
    ],
)
def test_bad_ttl_configs_are_refused_with_a_clear_error(build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()


def test_enable_time_to_live_refuses_anything_but_a_state_ttl_config():
    with pytest.raises(TypeError, match="StateTtlConfig"):
        ValueStateDescriptor("v").enable_time_to_live(Time.seconds(1))


# update type x visibility ----------------------------------------------------------------------
@pytest.mark.parametrize("visibility", list(Visibility))
@pytest.mark.parametrize("update", [UpdateType.OnCreateAndWrite, UpdateType.OnReadAndWrite])
def test_value_state_expiry_for_every_update_type_and_visibility(
    backend, clock, update, visibility
):
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(update, visibility)))
    state.update("a")
    clock.advance(TTL_MS - 1)
    assert state.value() == "a"  # a read: refreshes the timestamp on OnReadAndWrite only
    clock.advance(TTL_MS - 1)
    if update is UpdateType.OnReadAndWrite:
        assert state.value() == "a"  # 2*TTL-2 after the write, TTL-1 after the last read
        clock.advance(TTL_MS)
    expected = "a" if visibility is Visibility.ReturnExpiredIfNotCleanedUp else None
    assert state.value() == expected  # expired: returned at most once, and cleaned up
    assert state.value() is None
    assert dict(backend.entries("v")) == {}


def test_a_write_refreshes_the_timestamp(backend, clock):
    state = backend.get_state(with_ttl(ValueStateDescriptor("v")))
    state.update(1)
    clock.advance(TTL_MS - 1)
    state.update(2)
    clock.advance(TTL_MS - 1)
    assert state.value() == 2
    clock.advance(1)
    assert state.value() is None


def test_a_value_expires_exactly_ttl_after_its_last_access(backend, clock):
    state = backend.get_state(with_ttl(ValueStateDescriptor("v")))
    state.update(1)
    clock.advance(TTL_MS - 1)
    assert state.value() == 1
    clock.advance(1)
    assert state.value() is None


def test_keys_expire_independently(backend, clock):
    state = backend.get_state(with_ttl(ValueStateDescriptor("v")))
    state.update("old")
    clock.advance(TTL_MS // 2)
    backend.current_key = "j"
    state.update("new")
    clock.advance(TTL_MS // 2)
    assert state.value() == "new"
    backend.current_key = "k"
    assert state.value() is None


def test_the_backend_stores_values_with_their_last_access_timestamp(backend, clock):
    backend.get_state(with_ttl(ValueStateDescriptor("v"))).update("a")
    assert dict(backend.entries("v")) == {"k": TtlValue("a", clock.now)}


# list / map / reducing / aggregating -----------------------------------------------------------
def test_list_elements_expire_one_by_one(backend, clock):
    state = backend.get_list_state(with_ttl(ListStateDescriptor("l")))
    state.add(1)
    clock.advance(TTL_MS // 2)
    state.add_all([2, 3])
    assert state.get() == [1, 2, 3]
    clock.advance(TTL_MS // 2)
    assert state.get() == [2, 3]
    assert [e.value for e in dict(backend.entries("l"))["k"]] == [2, 3]  # cleaned up on read
    clock.advance(TTL_MS // 2)
    assert state.get() == []
    assert "k" not in dict(backend.entries("l"))


def test_list_update_restamps_every_element(backend, clock):
    state = backend.get_list_state(with_ttl(ListStateDescriptor("l")))
    state.add(1)
    clock.advance(TTL_MS - 1)
    state.update([1, 2])
    clock.advance(TTL_MS - 1)
    assert list(state) == [1, 2]


def test_list_read_refreshes_elements_on_read_and_write(backend, clock):
    state = backend.get_list_state(
        with_ttl(ListStateDescriptor("l"), config(UpdateType.OnReadAndWrite))
    )
    state.add(1)
    clock.advance(TTL_MS - 1)
    assert state.get() == [1]
    clock.advance(TTL_MS - 1)
    assert state.get() == [1]


def test_list_returns_expired_elements_once_if_not_cleaned_up(backend, clock):
    c = config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)
    state = backend.get_list_state(with_ttl(ListStateDescriptor("l"), c))
    state.add(1)
    clock.advance(TTL_MS)
    state.add(2)
    assert state.get() == [1, 2]
    assert state.get() == [2]


def test_map_entries_expire_one_by_one(backend, clock):
    state = backend.get_map_state(with_ttl(MapStateDescriptor("m")))
    state.put("a", 1)
    clock.advance(TTL_MS // 2)
    state.put_all({"b": 2, "c": 3})
    clock.advance(TTL_MS // 2)
    assert state.get("a") is None
    assert not state.contains("a")
    assert state.contains("b") and state.get("b") == 2
    assert sorted(state.items()) == [("b", 2), ("c", 3)]
    assert sorted(state.keys()) == ["b", "c"] and sorted(state.values()) == [2, 3]
    assert sorted(state) == ["b", "c"]
    assert set(dict(backend.entries("m"))["k"]) == {"b", "c"}
    state.remove("b")
    assert not state.is_empty()
    clock.advance(TTL_MS // 2)
    assert state.is_empty()
    assert "k" not in dict(backend.entries("m"))


def test_map_get_refreshes_an_entry_on_read_and_write(backend, clock):
    state = backend.get_map_state(
        with_ttl(MapStateDescriptor("m"), config(UpdateType.OnReadAndWrite))
    )
    state.put("a", 1)
    state.put("b", 2)
    clock.advance(TTL_MS - 1)
    assert state.get("a") == 1
    clock.advance(TTL_MS - 1)
    assert state.items() == [("a", 1)]


def test_map_returns_an_expired_entry_once_if_not_cleaned_up(backend, clock):
    c = config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)
    state = backend.get_map_state(with_ttl(MapStateDescriptor("m"), c))
    state.put("a", 1)
    clock.advance(TTL_MS)
    assert state.contains("a")
    assert state.get("a") is None


def test_reducing_state_restarts_from_the_next_value_after_expiry(backend, clock):
    state = backend.get_reducing_state(with_ttl(ReducingStateDescriptor("r", lambda a, b: a + b)))
    state.add(1)
    state.add(2)
    assert state.get() == 3
    clock.advance(TTL_MS)
    state.add(10)  # the expired 3 is dropped, not added to
    assert state.get() == 10
    clock.advance(TTL_MS)
    assert state.get() is None
    assert dict(backend.entries("r")) == {}


def test_reducing_state_read_refreshes_on_read_and_write(backend, clock):
    c = config(UpdateType.OnReadAndWrite)
    state = backend.get_reducing_state(with_ttl(ReducingStateDescriptor("r", max), c))
    state.add(5)
    clock.advance(TTL_MS - 1)
    assert state.get() == 5
    clock.advance(TTL_MS - 1)
    assert state.get() == 5
    state.add(7)
    assert state.get() == 7


def test_aggregating_state_restarts_its_accumulator_after_expiry(backend, clock):
    state = backend.get_aggregating_state(with_ttl(AggregatingStateDescriptor("a", Average())))
    state.add(2)
    state.add(4)
    assert state.get() == 3
    clock.advance(TTL_MS)
    state.add(10)
    assert state.get() == 10
    clock.advance(TTL_MS)
    assert state.get() is None
    assert dict(backend.entries("a")) == {}


@pytest.mark.parametrize("visibility", list(Visibility))
def test_aggregating_state_read_and_visibility(backend, clock, visibility):
    c = config(UpdateType.OnReadAndWrite, visibility)
    state = backend.get_aggregating_state(with_ttl(AggregatingStateDescriptor("a", Average()), c))
    state.add(4)
    clock.advance(TTL_MS - 1)
    assert state.get() == 4  # refreshed by the read
    clock.advance(TTL_MS - 1)
    assert state.get() == 4
    clock.advance(TTL_MS)
    assert state.get() == (4 if visibility is Visibility.ReturnExpiredIfNotCleanedUp else None)
    assert state.get() is None


def test_clear_removes_the_current_key(backend):
    state = backend.get_state(with_ttl(ValueStateDescriptor("v")))
    state.update(1)
    state.clear()
    assert state.value() is None and dict(backend.entries("v")) == {}


# registration ----------------------------------------------------------------------------------
def test_the_same_descriptor_gives_the_same_ttl_state(backend):
    d = with_ttl(ValueStateDescriptor("v"))
    assert backend.get_state(d) is backend.get_state(d)


def test_registering_a_name_with_and_without_ttl_is_an_error(backend):
    backend.get_state(with_ttl(ValueStateDescriptor("v")))
    with pytest.raises(ValueError, match="already registered with TTL"):
        backend.get_state(ValueStateDescriptor("v"))
    backend.get_state(ValueStateDescriptor("w"))
    with pytest.raises(ValueError, match="already registered without TTL"):
        backend.get_state(with_ttl(ValueStateDescriptor("w")))


def test_registering_a_name_with_another_ttl_config_is_an_error(backend):
    backend.get_state(with_ttl(ValueStateDescriptor("v")))
    other = StateTtlConfig.new_builder(Time.seconds(5)).build()
    with pytest.raises(ValueError, match="another TTL config"):
        backend.get_state(with_ttl(ValueStateDescriptor("v"), other))


def test_a_descriptor_with_ttl_pickles_and_keeps_its_identity():
    import pickle

    d = with_ttl(ValueStateDescriptor("v"), config(UpdateType.OnReadAndWrite))
    back = pickle.loads(pickle.dumps(d))
    assert back.ttl_config == d.ttl_config
    assert back.ttl_config.get_update_type() is UpdateType.OnReadAndWrite
    assert d == ValueStateDescriptor("v") and hash(d) == hash(ValueStateDescriptor("v"))
