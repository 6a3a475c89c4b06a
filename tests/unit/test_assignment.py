"""Tests for tidegate.checkpoint.assignment: restoring and rescaling operator and keyed state."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tidegate.checkpoint.assignment import (
    check_max_parallelism,
    keyed_handles_for_subtask,
    redistribute_list_state,
    redistribute_union_state,
)
from tidegate.state.keygroups import key_group_range


def random_old_state(rng: random.Random) -> list[list[str]]:
    """Per-subtask entries, uniquely named so order and multiplicity can be checked."""
    old_parallelism = rng.randint(1, 12)
    return [
        [f"s{subtask}-e{entry}" for entry in range(rng.randint(0, 9))]
        for subtask in range(old_parallelism)
    ]


def concatenation(state: list[list[str]]) -> list[str]:
    return [entry for entries in state for entry in entries]


def handles_of(parallelism: int, max_parallelism: int) -> list[tuple[range, str]]:
    """The keyed-state handles a snapshot at `parallelism` has: one per old subtask."""
    return [
        (key_group_range(i, parallelism, max_parallelism), f"handle-{i}")
        for i in range(parallelism)
    ]


# --- operator list state ---------------------------------------------------------------------


def test_list_state_scaling_out_from_two_to_three_follows_the_design_example() -> None:
    old = [["a0", "a1", "a2"], ["b0", "b1"]]
    assert redistribute_list_state(old, 3) == [["a0", "a1"], ["a2", "b0"], ["b1"]]


def test_list_state_scaling_in_from_three_to_two_keeps_entries_in_order() -> None:
    old = [["a0"], ["b0", "b1"], ["c0", "c1"]]
    assert redistribute_list_state(old, 2) == [["a0", "b0", "b1"], ["c0", "c1"]]


def test_list_state_at_unchanged_parallelism_rebalances_uneven_subtasks() -> None:
    old = [["a0", "a1", "a2", "a3"], []]
    assert redistribute_list_state(old, 2) == [["a0", "a1"], ["a2", "a3"]]


def test_list_state_with_fewer_entries_than_subtasks_leaves_later_subtasks_empty() -> None:
    assert redistribute_list_state([["x"], ["y"]], 4) == [["x"], ["y"], [], []]


def test_empty_list_state_gives_every_new_subtask_an_empty_list() -> None:
    assert redistribute_list_state([[], []], 3) == [[], [], []]
    assert redistribute_list_state([], 2) == [[], []]


def test_list_state_redistribution_returns_lists_independent_of_the_input() -> None:
    old = [["a0", "a1"]]
    new = redistribute_list_state(old, 1)
    new[0].append("extra")
    assert old == [["a0", "a1"]]


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_list_state_redistribution_preserves_entries_order_and_balance(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        old = random_old_state(rng)
        new_parallelism = rng.randint(1, 15)
        new = redistribute_list_state(old, new_parallelism)
        assert len(new) == new_parallelism
        assert concatenation(new) == concatenation(old)
        assert Counter(concatenation(new)) == Counter(concatenation(old))
        sizes = [len(entries) for entries in new]
        assert sizes == sorted(sizes, reverse=True), "earlier chunks take the remainder"
        assert max(sizes) - min(sizes) <= 1


def test_list_state_redistribution_rejects_a_parallelism_below_one() -> None:
    with pytest.raises(ValueError, match="new_parallelism must be at least 1, got 0"):
        redistribute_list_state([["a"]], 0)


# --- union list state ------------------------------------------------------------------------


def test_union_state_gives_every_new_subtask_all_entries_in_subtask_order() -> None:
    old = [["a0", "a1"], [], ["c0"]]
    assert redistribute_union_state(old, 2) == [["a0", "a1", "c0"], ["a0", "a1", "c0"]]


def test_union_state_lists_are_independent_of_each_other() -> None:
    new = redistribute_union_state([["a"], ["b"]], 3)
    new[0].append("only-in-subtask-0")
    assert new[1] == ["a", "b"]
    assert new[2] == ["a", "b"]


@pytest.mark.parametrize("seed", [20, 21])
def test_union_state_redistribution_preserves_entries_and_order_for_each_subtask(
    seed: int,
) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        old = random_old_state(rng)
        new_parallelism = rng.randint(1, 15)
        new = redistribute_union_state(old, new_parallelism)
        assert len(new) == new_parallelism
        assert all(entries == concatenation(old) for entries in new)


def test_union_state_redistribution_rejects_a_parallelism_below_one() -> None:
    with pytest.raises(ValueError, match="new_parallelism must be at least 1"):
        redistribute_union_state([["a"]], -2)


# --- keyed state handles ---------------------------------------------------------------------


def test_scaling_keyed_state_from_two_to_three_splits_the_middle_subtask_over_both_handles() -> (
    None
):
    handles = handles_of(parallelism=2, max_parallelism=128)  # [0,63] [64,127]
    assert keyed_handles_for_subtask(handles, 0, 3, 128) == [(range(0, 43), "handle-0")]
    assert keyed_handles_for_subtask(handles, 1, 3, 128) == [
        (range(43, 64), "handle-0"),
        (range(64, 86), "handle-1"),
    ]
    assert keyed_handles_for_subtask(handles, 2, 3, 128) == [(range(86, 128), "handle-1")]


def test_scaling_keyed_state_in_to_one_subtask_reads_every_handle_whole() -> None:
    handles = handles_of(parallelism=3, max_parallelism=128)
    assert keyed_handles_for_subtask(handles, 0, 1, 128) == handles


def test_handles_with_empty_or_disjoint_ranges_are_not_assigned() -> None:
    handles = [(range(10, 10), "empty"), (range(0, 5), "low"), (range(100, 128), "high")]
    assert keyed_handles_for_subtask(handles, 0, 2, 128) == [(range(0, 5), "low")]


@pytest.mark.parametrize("seed", [30, 31, 32])
def test_keyed_handles_cover_every_key_group_exactly_once_after_rescaling(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        max_parallelism = rng.choice([rng.randint(1, 64), 128, rng.randint(1, 4096)])
        old_parallelism = rng.randint(1, min(max_parallelism, 40))
        new_parallelism = rng.randint(1, min(max_parallelism, 40))
        handles = handles_of(old_parallelism, max_parallelism)
        old_range_of = dict((handle, key_groups) for key_groups, handle in handles)
        read_by: dict[int, list[tuple[int, str]]] = {}
        for subtask in range(new_parallelism):
            owned = key_group_range(subtask, new_parallelism, max_parallelism)
            for key_groups, handle in keyed_handles_for_subtask(
                handles, subtask, new_parallelism, max_parallelism
            ):
                assert key_groups, "no empty assignments"
                for key_group in key_groups:
                    assert key_group in owned
                    assert key_group in old_range_of[handle]
                    read_by.setdefault(key_group, []).append((subtask, handle))
        assert sorted(read_by) == list(range(max_parallelism))
        assert all(len(readers) == 1 for readers in read_by.values())


@pytest.mark.parametrize(
    "bad_range", [range(0, 129), range(-1, 10), range(0, 10, 2)], ids=["past-end", "neg", "step"]
)
def test_a_handle_range_outside_the_key_groups_is_rejected(bad_range: range) -> None:
    with pytest.raises(ValueError, match="snapshot was written with a different max parallel"):
        keyed_handles_for_subtask([(bad_range, "h")], 0, 2, 128)


def test_keyed_handle_assignment_validates_the_new_subtask() -> None:
    with pytest.raises(ValueError, match="subtask_index must be in"):
        keyed_handles_for_subtask(handles_of(2, 128), 3, 3, 128)


# --- max parallelism -------------------------------------------------------------------------


def test_the_snapshots_max_parallelism_is_used_when_none_is_configured() -> None:
    assert check_max_parallelism(snapshot_max=128, new_parallelism=5, configured_max=None) == 128


def test_a_configured_max_parallelism_equal_to_the_snapshots_is_accepted() -> None:
    assert check_max_parallelism(snapshot_max=256, new_parallelism=256, configured_max=256) == 256


def test_a_configured_max_parallelism_that_differs_from_the_snapshot_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        check_max_parallelism(snapshot_max=128, new_parallelism=4, configured_max=256)
    message = str(info.value)
    assert "configured max parallelism 256 differs from the snapshot's 128" in message
    assert "Set it to 128 or remove the setting" in message


def test_a_parallelism_above_the_snapshots_max_parallelism_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        check_max_parallelism(snapshot_max=128, new_parallelism=129, configured_max=None)
    message = str(info.value)
    assert "cannot restore with parallelism 129" in message
    assert "Use a parallelism of at most 128" in message


@pytest.mark.parametrize("snapshot_max", [0, 32769])
def test_a_snapshot_max_parallelism_outside_the_valid_bounds_is_rejected(
    snapshot_max: int,
) -> None:
    with pytest.raises(ValueError, match="snapshot metadata is corrupt"):
        check_max_parallelism(snapshot_max=snapshot_max, new_parallelism=1, configured_max=None)


def test_a_parallelism_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="new_parallelism must be at least 1"):
        check_max_parallelism(snapshot_max=128, new_parallelism=0, configured_max=None)
