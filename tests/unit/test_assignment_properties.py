"""Properties of key groups and state assignment on rescale (hypothesis): for any max
parallelism, old and new parallelism, every key group and every piece of state ends up in
exactly the place the rules say, once (tidegate/state/keygroups.py,
tidegate/checkpoint/assignment.py, connectors/base.py's `writer_subtask`)."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidegate.checkpoint.assignment import (
    assign_operator_state,
    keyed_handles_for_subtask,
    redistribute_operator_state,
)
from tidegate.connectors.base import writer_subtask
from tidegate.state.keygroups import (
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupAssigner,
    assign_to_key_group,
    key_group_range,
    subtask_for_key_group,
)

FAST = settings(max_examples=100)


@st.composite
def max_and_parallelisms(draw: st.DrawFn, count: int = 2) -> tuple[int, ...]:
    """A max parallelism (small ones often: the edge cases live there) and `count`
    parallelisms that fit it."""
    max_p = draw(st.one_of(st.integers(1, 300), st.integers(1, UPPER_BOUND_MAX_PARALLELISM)))
    ps = [draw(st.integers(1, min(max_p, 64))) for _ in range(count)]
    return (max_p, *ps)


@FAST
@given(max_and_parallelisms(count=1))
def test_the_key_group_ranges_of_the_subtasks_partition_all_key_groups_contiguously(mp) -> None:
    max_p, p = mp
    ranges = [key_group_range(i, p, max_p) for i in range(p)]
    assert ranges[0].start == 0 and ranges[-1].stop == max_p
    for before, after in itertools.pairwise(ranges):
        assert before.stop == after.start, "ranges must be contiguous and ascending"
    assert all(len(r) >= 1 and r.step == 1 for r in ranges), "every subtask owns a key group"
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1, "ranges are near-equal"
    for i, r in enumerate(ranges):
        for kg in (r.start, r.stop - 1):
            assert subtask_for_key_group(kg, p, max_p) == i


@FAST
@given(
    st.lists(
        st.one_of(st.integers(), st.text(max_size=8), st.tuples(st.integers(), st.text())),
        max_size=30,
    ),
    max_and_parallelisms(count=1),
)
def test_a_key_goes_to_the_subtask_owning_its_key_group_whatever_the_memo(keys, mp) -> None:
    max_p, p = mp
    assigner = KeyGroupAssigner(max_p, p, cache_limit=4)
    for key in keys + keys:  # the second round is served (partly) from the memo
        kg = assign_to_key_group(key, max_p)
        assert 0 <= kg < max_p
        assert assigner.key_group(key) == kg
        assert assigner.subtask(key) == subtask_for_key_group(kg, p, max_p)
        assert kg in key_group_range(assigner.subtask(key), p, max_p)


@FAST
@given(max_and_parallelisms(count=2))
def test_on_rescale_every_old_key_group_is_read_by_exactly_one_new_subtask(mp) -> None:
    max_p, old_p, new_p = mp
    handles = [(key_group_range(i, old_p, max_p), f"old-{i}") for i in range(old_p)]
    read: Counter[int] = Counter()
    for new in range(new_p):
        owned = key_group_range(new, new_p, max_p)
        assigned = keyed_handles_for_subtask(handles, new, new_p, max_p)
        assert [h for _, h in assigned] == sorted({h for _, h in assigned}, key=handles_order)
        for key_groups, handle in assigned:
            old_range = handles[int(handle.removeprefix("old-"))][0]
            assert key_groups.step == 1 and key_groups
            assert set(key_groups) <= set(old_range) & set(owned)
            read.update(key_groups)
        assert sum(len(r) for r, _ in assigned) == len(owned), "a subtask misses a key group"
    assert read == Counter(range(max_p)), "a key group is lost or read twice"


def handles_order(handle: str) -> int:
    return int(handle.removeprefix("old-"))


#: one old subtask's operator state: name -> (mode, entries); entries name their origin
_entries = st.lists(st.integers(0, 5), max_size=5)


@st.composite
def operator_snapshots(draw: st.DrawFn) -> list[dict[str, tuple[str, list]]]:
    old_p = draw(st.integers(1, 6))
    modes = draw(
        st.dictionaries(
            st.sampled_from(["splits", "offsets", "rules", "pending"]),
            st.sampled_from(["split", "union", "broadcast"]),
            max_size=4,
        )
    )
    snapshots: list[dict[str, tuple[str, list]]] = []
    broadcast_copy = {name: draw(_entries) for name, mode in modes.items() if mode == "broadcast"}
    for i in range(old_p):
        state = {}
        for name, mode in modes.items():
            if mode == "broadcast":
                state[name] = (mode, list(broadcast_copy[name]))
            elif draw(st.booleans()):  # a subtask may have no entries of a name
                state[name] = (mode, [(i, n, v) for n, v in enumerate(draw(_entries))])
        snapshots.append(state)
    return snapshots


@FAST
@given(operator_snapshots(), st.integers(1, 8))
# found by this test: split state of a subtask was also given to a subtask that had none of it
@example(old=[{}, {"splits": ("split", [(1, 0, 0)])}], new_p=2)
def test_operator_state_is_split_once_given_to_all_or_copied_by_its_mode(old, new_p) -> None:
    for assigned in (redistribute_operator_state(old, new_p), assign_operator_state(old, new_p)):
        assert len(assigned) == new_p
        names = {name for snapshot in old for name in snapshot}
        for name in names:
            mode = next(s[name][0] for s in old if name in s)
            every_entry = [e for s in old if name in s for e in s[name][1]]
            shares = [subtask[name] for subtask in assigned]
            assert all(m == mode for m, _ in shares)
            if mode == "split":  # each entry to exactly one new subtask, none invented
                got = [e for _, entries in shares for e in entries]
                assert Counter(map(repr, got)) == Counter(map(repr, every_entry))
            elif mode == "union":
                assert all(entries == every_entry for _, entries in shares)
            else:
                assert all(entries == old[0][name][1] for _, entries in shares)
        assert all(set(subtask) == names for subtask in assigned)
    if len(old) == new_p:  # same parallelism: split state stays with the subtask that wrote it
        for own, share in zip(old, assign_operator_state(old, new_p), strict=True):
            for name, (mode, entries) in own.items():
                if mode != "union":
                    assert share[name] == (mode, entries)


@FAST
@given(st.integers(1, 64), st.integers(1, 64))
def test_every_old_sink_writer_is_taken_over_by_exactly_one_new_subtask(old_p, new_p) -> None:
    owners = [writer_subtask(w, new_p) for w in range(old_p)]
    assert all(0 <= o < new_p for o in owners)
    # a writer index that still exists keeps its own subtask (its files, its transactions)
    assert all(owners[w] == w for w in range(min(old_p, new_p)))
