"""The pure logic of the hashmap backend's incremental checkpoints (state/heap_changelog.py):
which keys the states record as changed, which of them a checkpoint writes, when the chain is
materialized again, and how a changelog is applied on restore."""

from __future__ import annotations

import pytest

from tidegate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.heap_changelog import (
    ChainFile,
    ChangeLog,
    KeyedStateChanges,
    apply_changes,
    capture_changes,
    check_chain,
    needs_materialization,
)
from tidegate.state.keygroups import stable_hash
from tidegate.state.snapshot_format import CorruptStateError, KeyedStateSnapshot

M = 8


class Sum:
    """An AggregateFunction adding numbers."""

    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator


def test_every_change_through_a_heap_state_records_its_key_and_reads_do_not():
    backend = HeapKeyedStateBackend(M, range(M), incremental=True)
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_list_state(ListStateDescriptor("l", None))
    tags = backend.get_map_state(MapStateDescriptor("m", None, None))
    total = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    agg = backend.get_aggregating_state(AggregatingStateDescriptor("a", Sum()))
    changes = [
        lambda: value.update(1),
        lambda: value.update(None),
        lambda: value.clear(),  # nothing to remove: nothing changed
        lambda: items.add(1),
        lambda: items.add(2),  # in place
        lambda: items.add_all([3]),
        lambda: items.update([]),
        lambda: tags.put("x", 1),
        lambda: tags.put_all({"y": 2}),
        lambda: tags.remove("x"),  # no map: nothing changed
        lambda: total.add(5),
        lambda: agg.add(5),
    ]
    for i, change in enumerate(changes):
        backend.current_key = i
        change()
    backend.current_key = "reader"
    value.value(), items.get(), tags.get("x"), total.get(), agg.get()
    changed = ChangeLog().capture(1, backend._change_sets)
    assert changed == {"v": {0, 1}, "l": {3, 4, 5, 6}, "m": {7, 8}, "r": {10}, "a": {11}}
    assert ChangeLog().capture(2, backend._change_sets) == {}  # taken: tracking starts afresh
    # a savepoint's snapshot is full and leaves the changes to the next checkpoint
    backend.current_key = 0
    value.update(2)
    assert isinstance(backend.snapshot(), KeyedStateSnapshot)
    assert backend.change_set("v") == {0}
    assert HeapKeyedStateBackend(M, range(M)).change_set("v") is None  # full checkpoints


def chain(materialized: int, *changelogs: int) -> list[ChainFile]:
    files = [ChainFile("materialized-1", "/m", materialized, None)]
    return files + [
        ChainFile(f"changelog-{i + 2}", "/c", n, None) for i, n in enumerate(changelogs)
    ]


def test_the_chain_is_materialized_again_when_a_restore_would_read_too_much(monkeypatch):
    assert needs_materialization([])  # no completed checkpoint to extend
    assert not needs_materialization(chain(1000))
    assert not needs_materialization(chain(1000, 600_000, 448_576))  # a small state: 1 MiB
    assert needs_materialization(chain(1000, 600_000, 448_577))
    monkeypatch.setattr("tidegate.state.heap_changelog.CHANGELOG_BYTES_FLOOR", 0)
    monkeypatch.setattr("tidegate.state.heap_changelog.MAX_CHANGELOG_RATIO", 0.5)
    assert not needs_materialization(chain(1000, 200, 300))  # 50%: still bounded
    assert needs_materialization(chain(1000, 200, 301))  # more changelog bytes than allowed
    monkeypatch.setattr("tidegate.state.heap_changelog.MAX_CHANGELOG_FILES", 3)
    assert not needs_materialization(chain(10_000, 1, 1))
    assert needs_materialization(chain(10_000, 1, 1, 1))  # too many files to open


def test_a_checkpoint_writes_every_key_changed_since_the_last_completed_one():
    changes = ChangeLog()
    assert changes.capture(1, {"s": {"a"}}) == {"s": {"a"}}
    changes.notify_complete(1)  # the base: "a" is in its chain
    assert changes.capture(2, {"s": {"b"}}) == {"s": {"b"}}
    # 2 neither completed nor failed yet (or was aborted): 3 extends 1's chain, so it has "b"
    assert changes.capture(3, {"s": {"c"}}) == {"s": {"b", "c"}}
    changes.notify_complete(7)  # a savepoint's (or unknown) id: nothing it wrote is shared
    assert changes.capture(4, {"s": set()}) == {"s": {"b", "c"}}
    changes.notify_complete(3)
    assert changes.capture(5, {"s": {"a"}, "t": set()}) == {"s": {"a"}}


def test_the_synchronous_phase_copies_containers_and_records_removals():
    live = {"k1": [1], "k2": [2]}
    values, removed = capture_changes(
        {"l": ("list", live)}, {"l": {"k1", "gone"}}, containers=["l"]
    )
    assert (values, removed) == ({"l": ("list", {"k1": [1]})}, {"l": {"gone"}})
    live["k1"].append(5)  # the live list changes in place after the snapshot
    assert values["l"][1] == {"k1": [1]}
    assert capture_changes({"l": ("list", live)}, {}, ["l"]) == ({}, {})  # nothing changed


def kg(key) -> int:
    return stable_hash(key) % M


def test_changes_are_grouped_by_key_group_and_expired_values_become_removals():
    keys = list(range(20))
    changes = KeyedStateChanges(
        KeyedStateSnapshot(
            M,
            range(M),
            {"v": ("value", {k: k for k in keys})},
            transformers={"v": lambda v: None if v % 2 else v},  # odd values "expired"
        ),
        {"v": {"x"}},
    )
    groups = dict(changes.key_groups())
    assert list(groups) == sorted(groups)
    for g, data in groups.items():
        kind, upserts, removed = data["v"]
        assert kind == "value"
        assert upserts == {k: k for k in keys if kg(k) == g and k % 2 == 0}
        assert sorted(removed, key=str) == sorted(
            [k for k in keys if kg(k) == g and k % 2] + (["x"] if kg("x") == g else []), key=str
        )


def test_a_changed_key_of_another_subtask_fails_the_checkpoint():
    key = next(k for k in range(100) if kg(k) == 5)
    changes = KeyedStateChanges(
        KeyedStateSnapshot(M, range(0, 4), {"v": ("value", {})}), {"v": {key}}
    )
    with pytest.raises(RuntimeError, match=f"key {key} of state 'v' is in key group 5"):
        list(changes.key_groups())


def test_a_changelog_is_applied_over_the_key_group_so_far():
    data = {"v": ("value", {1: "a", 2: "b"}), "m": ("map", {1: {"x": 1}})}
    apply_changes(data, {"v": ("value", {2: "B", 3: "c"}, [1]), "m": ("map", {}, [1])}, "kg 0")
    assert data == {"v": ("value", {2: "B", 3: "c"})}  # the emptied map state is gone
    apply_changes(data, {"n": ("list", {4: [1]}, [])}, "kg 0")
    assert data["n"] == ("list", {4: [1]})
    with pytest.raises(CorruptStateError, match="state 'v' is value state, but a changelog"):
        apply_changes(data, {"v": ("map", {1: {}}, [])}, "kg 0")


@pytest.mark.parametrize(
    "names",
    [[], ["changelog-2"], ["materialized-1", "materialized-2"], ["materialized-1", "x-2"]],
)
def test_a_chain_not_made_of_one_materialization_and_changelogs_is_refused(names):
    with pytest.raises(CorruptStateError, match="not one materialized file followed by"):
        check_chain(names, "the handle")
    check_chain(["materialized-1", "changelog-2"], "the handle")
