"""OperatorStateBackend: split and union list state, snapshot copies, restore and rescale."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.assignment import assign_operator_state, redistribute_operator_state
from tidegate.datastream.state import ListState, ListStateDescriptor
from tidegate.state.operator_state import OperatorStateBackend
from tidegate.state.snapshot_format import read_operator_state, write_state_file


def test_operator_list_state_holds_a_list_per_subtask():
    backend = OperatorStateBackend()
    state = backend.get_list_state(ListStateDescriptor("offsets"))
    assert isinstance(state, ListState)
    assert state.get() == []
    state.add(1)
    state.add_all([2, 3])
    for element in state.get():  # the result is a copy: adding while iterating is safe
        state.add(element)
    assert state.get() == [1, 2, 3, 1, 2, 3]
    state.update([9])
    assert state.get() == [9]
    state.clear()
    assert state.get() == []


def test_the_same_name_gives_the_same_state_object():
    backend = OperatorStateBackend()
    state = backend.get_union_list_state(ListStateDescriptor("u"))
    assert backend.get_union_list_state(ListStateDescriptor("u")) is state


def test_snapshot_records_the_mode_and_copies_the_entries():
    backend = OperatorStateBackend()
    split = backend.get_list_state(ListStateDescriptor("split"))
    union = backend.get_union_list_state(ListStateDescriptor("union"))
    split.add("a")
    union.add("b")
    snapshot = backend.snapshot()
    split.add("later")
    union.clear()
    assert snapshot == {"split": ("split", ["a"]), "union": ("union", ["b"])}


def test_registering_a_name_with_the_other_mode_is_an_error():
    backend = OperatorStateBackend()
    backend.get_list_state(ListStateDescriptor("s"))
    with pytest.raises(ValueError, match=r"'s' is a split list state .* union"):
        backend.get_union_list_state(ListStateDescriptor("s"))


def test_registering_a_restored_name_with_the_other_mode_is_an_error():
    backend = OperatorStateBackend()
    backend.restore({"s": ("union", [1])})
    with pytest.raises(ValueError, match="'s' is a union list state"):
        backend.get_list_state(ListStateDescriptor("s"))
    assert backend.get_union_list_state(ListStateDescriptor("s")).get() == [1]


def test_restore_after_registration_is_refused():
    backend = OperatorStateBackend()
    backend.get_list_state(ListStateDescriptor("s"))
    with pytest.raises(RuntimeError, match="before any state is registered"):
        backend.restore({})


def test_split_state_is_cut_in_order_and_union_state_is_given_whole_on_rescale():
    old = [
        {"split": ("split", ["a0", "a1", "a2"]), "union": ("union", ["x"])},
        {"split": ("split", ["b0", "b1"]), "union": ("union", ["y"])},
    ]
    new = redistribute_operator_state(old, 3)
    assert [s["split"] for s in new] == [
        ("split", ["a0", "a1"]),
        ("split", ["a2", "b0"]),
        ("split", ["b1"]),
    ]
    assert [s["union"] for s in new] == [("union", ["x", "y"])] * 3


def test_at_the_same_parallelism_each_subtask_keeps_its_split_and_broadcast_state():
    old = [
        {"split": ("split", ["a0"]), "union": ("union", ["x"]), "b": ("broadcast", [("k", 0)])},
        {
            "split": ("split", ["b0", "b1", "b2"]),
            "union": ("union", ["y"]),
            "b": ("broadcast", [("k", 1)]),
        },
    ]
    same = assign_operator_state(old, 2)
    assert [s["split"] for s in same] == [("split", ["a0"]), ("split", ["b0", "b1", "b2"])]
    assert [s["b"] for s in same] == [("broadcast", [("k", 0)]), ("broadcast", [("k", 1)])]
    assert [s["union"] for s in same] == [("union", ["x", "y"])] * 2
    # at another parallelism: the redistribution (contiguous parts of the concatenation)
    assert assign_operator_state(old, 3) == redistribute_operator_state(old, 3)


def test_a_name_snapshotted_with_two_modes_cannot_be_redistributed():
    with pytest.raises(ValueError, match="both split and union"):
        redistribute_operator_state([{"s": ("split", [1])}, {"s": ("union", [2])}], 2)


def test_operator_state_round_trips_through_state_files_across_a_rescale(tmp_path):
    indexes = []
    for i in range(2):  # Step 1: two old subtasks write their state files
        old = OperatorStateBackend()
        old.get_list_state(ListStateDescriptor("splits")).add_all([f"s{i}-0", f"s{i}-1"])
        old.get_union_list_state(ListStateDescriptor("watermarks")).add(i)
        path = tmp_path / f"old-{i}.state"
        with path.open("wb") as f:
            indexes.append((path, write_state_file(f, None, old.snapshot())))

    snapshots = []
    for path, index in indexes:  # Step 2: read back and redistribute to three subtasks
        with path.open("rb") as f:
            snapshots.append(read_operator_state(f, index))
    restored = []
    for share in redistribute_operator_state(snapshots, 3):
        new = OperatorStateBackend()
        new.restore(share)
        restored.append(
            (
                new.get_list_state(ListStateDescriptor("splits")).get(),
                new.get_union_list_state(ListStateDescriptor("watermarks")).get(),
            )
        )
    assert restored == [
        (["s0-0", "s0-1"], [0, 1]),
        (["s1-0"], [0, 1]),
        (["s1-1"], [0, 1]),
    ]
