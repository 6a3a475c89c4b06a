"""State assignment: which restored state each new subtask gets (at restore and on rescale).

Pure functions from a snapshot's per-subtask state and the new parallelism to per-subtask
state, with no I/O, so restore planning can be tested exhaustively (DESIGN.md sections 6, 7):

* operator list state is concatenated in old-subtask order and split into contiguous chunks
  (Flink's ``SPLIT_DISTRIBUTE``);
* union list state goes whole to every new subtask (Flink's ``UNION``);
* broadcast state is copied to every new subtask (Flink's ``BROADCAST``);
* keyed state moves in whole key groups: a new subtask reads the old handles whose key-group
  ranges intersect its own range, restricted to the intersection;
* the max parallelism (the number of key groups) is fixed by the job's first run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from tidegate.state.keygroups import UPPER_BOUND_MAX_PARALLELISM, key_group_range
from tidegate.state.operator_state import RedistributionMode
from tidegate.state.snapshot_format import OperatorStateData

T = TypeVar("T")
H = TypeVar("H")


def _check_new_parallelism(new_parallelism: int) -> None:
    if new_parallelism < 1:
        raise ValueError(f"new_parallelism must be at least 1, got {new_parallelism}")


def redistribute_list_state(old: Sequence[Sequence[T]], new_parallelism: int) -> list[list[T]]:
    """Split the old subtasks' list-state entries over `new_parallelism` subtasks.

    The entries of all old subtasks are concatenated in subtask order and cut into contiguous,
    near-equal chunks, earlier chunks taking the remainder, so order is preserved and sizes
    differ by at most one. Example, 2 -> 3 subtasks:
    ``[[a0, a1, a2], [b0, b1]] -> [[a0, a1], [a2, b0], [b1]]``.
    """
    _check_new_parallelism(new_parallelism)
    entries = [entry for subtask_entries in old for entry in subtask_entries]
    base, remainder = divmod(len(entries), new_parallelism)
    chunks: list[list[T]] = []
    start = 0
    for index in range(new_parallelism):
        end = start + base + (1 if index < remainder else 0)
        chunks.append(entries[start:end])
        start = end
    return chunks


def redistribute_union_state(old: Sequence[Sequence[T]], new_parallelism: int) -> list[list[T]]:
    """Give every one of `new_parallelism` subtasks all old entries, in old-subtask order.

    Each new subtask gets its own list, so one subtask's changes are not seen by another.
    """
    _check_new_parallelism(new_parallelism)
    entries = [entry for subtask_entries in old for entry in subtask_entries]
    return [list(entries) for _ in range(new_parallelism)]


def redistribute_broadcast_state(old: Sequence[Sequence[T]], new_parallelism: int) -> list[list[T]]:
    """Give every one of `new_parallelism` subtasks a full copy of the broadcast state.

    Every old subtask holds the same copy (each processed every broadcast record), so new
    subtask i takes old subtask i's copy, and a subtask beyond the old parallelism takes old
    subtask 0's — what Flink's ``RoundRobinOperatorStateRepartitioner`` does. At the same
    parallelism every subtask thus keeps its own copy. Example, 2 -> 3 subtasks:
    ``[[a, b], [a, b]] -> [[a, b], [a, b], [a, b]]`` (copies of subtasks 0, 1, 0).
    """
    _check_new_parallelism(new_parallelism)
    if not old:
        return [[] for _ in range(new_parallelism)]
    return [list(old[i] if i < len(old) else old[0]) for i in range(new_parallelism)]


def keyed_handles_for_subtask(
    handles: Sequence[tuple[range, H]],
    subtask_index: int,
    parallelism: int,
    max_parallelism: int,
) -> list[tuple[range, H]]:
    """The old keyed-state handles new subtask `subtask_index` reads, each with its key groups.

    Each old handle covers a contiguous key-group range (end exclusive). The result keeps the
    handles whose range intersects the subtask's own ``key_group_range``, in their given order,
    each paired with the intersection: the subtask reads only those key groups of that handle.
    Raises ``ValueError`` for a handle range that is not a step-1 range inside
    ``[0, max_parallelism)``, which means the snapshot used another max parallelism.
    """
    owned = key_group_range(subtask_index, parallelism, max_parallelism)
    assigned: list[tuple[range, H]] = []
    for key_groups, handle in handles:
        if key_groups.step != 1 or key_groups.start < 0 or key_groups.stop > max_parallelism:
            raise ValueError(
                f"keyed-state handle {handle!r} covers key groups {key_groups}, which is not a "
                f"contiguous range inside [0, {max_parallelism}); the snapshot was written "
                "with a different max parallelism"
            )
        overlap = range(max(key_groups.start, owned.start), min(key_groups.stop, owned.stop))
        if overlap:
            assigned.append((overlap, handle))
    return assigned


def check_max_parallelism(
    snapshot_max: int, new_parallelism: int, configured_max: int | None
) -> int:
    """Return the max parallelism to restore with: the snapshot's, fixed by the first run.

    Keyed state is partitioned into `snapshot_max` key groups, so a restore cannot change that
    number, and it cannot run more subtasks than there are key groups. Raises ``ValueError``
    saying what to change if `configured_max` is set and differs from `snapshot_max`, or if
    `new_parallelism` exceeds it.
    """
    if not 1 <= snapshot_max <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"the snapshot's max parallelism {snapshot_max} is outside "
            f"[1, {UPPER_BOUND_MAX_PARALLELISM}]; the snapshot metadata is corrupt"
        )
    if configured_max is not None and configured_max != snapshot_max:
        raise ValueError(
            f"the configured max parallelism {configured_max} differs from the snapshot's "
            f"{snapshot_max}; the max parallelism (the number of key groups) is fixed by a "
            f"job's first run and cannot change on restore. Set it to {snapshot_max} or remove "
            "the setting to restore from this snapshot"
        )
    _check_new_parallelism(new_parallelism)
    if new_parallelism > snapshot_max:
        raise ValueError(
            f"cannot restore with parallelism {new_parallelism}: the snapshot has "
            f"{snapshot_max} key groups (max parallelism {snapshot_max}), and each subtask "
            f"needs at least one. Use a parallelism of at most {snapshot_max}"
        )
    return snapshot_max


_REDISTRIBUTE_BY_MODE = {
    RedistributionMode.SPLIT: redistribute_list_state,
    RedistributionMode.UNION: redistribute_union_state,
    RedistributionMode.BROADCAST: redistribute_broadcast_state,
}


def redistribute_operator_state(
    old: Sequence[OperatorStateData], new_parallelism: int
) -> list[OperatorStateData]:
    """Each new subtask's operator state, from the old subtasks' snapshots (pure, DESIGN §6).

    Groups the entries by state name and applies the split, union or broadcast rule per name,
    by the mode the state was snapshotted with: split, [a0,a1,a2],[b0,b1] -> [a0,a1] | [a2,b0]
    | [b1]; union, every subtask gets all entries; broadcast, every subtask
    gets a full copy. A name snapshotted with two modes is a ValueError.
    """
    if new_parallelism < 1:
        raise ValueError(f"new_parallelism must be at least 1, got {new_parallelism}")
    modes: dict[str, RedistributionMode] = {}
    per_name: dict[str, list[list[Any]]] = {}
    for snapshot in old:
        for name, (mode, entries) in snapshot.items():
            if modes.setdefault(name, RedistributionMode(mode)) != mode:
                raise ValueError(
                    f"operator state {name!r} was snapshotted as both {modes[name]} and {mode}"
                )
            per_name.setdefault(name, []).append(entries)
    result: list[OperatorStateData] = [{} for _ in range(new_parallelism)]
    for name, lists in per_name.items():
        mode = modes[name]
        shares = _REDISTRIBUTE_BY_MODE[mode](lists, new_parallelism)
        for subtask, share in zip(result, shares, strict=True):
            subtask[name] = (mode.value, share)
    return result


def assign_operator_state(
    old: Sequence[OperatorStateData], new_parallelism: int
) -> list[OperatorStateData]:
    """The operator state each new subtask restores. At another parallelism: as
    `redistribute_operator_state`. At the same parallelism split and broadcast state stay with
    the subtask that wrote them (moving e.g. a source's splits or a sink's pending files away
    from the subtask that owns them gains nothing, and a sink's recovery could delete files
    that another subtask is to commit), and union state is still everyone's."""
    assigned = redistribute_operator_state(old, new_parallelism)
    if len(old) != new_parallelism:
        return assigned
    for own, share in zip(old, assigned, strict=True):
        for name, (mode, _) in share.items():
            if name in own and RedistributionMode(mode) is not RedistributionMode.UNION:
                share[name] = (mode, list(own[name][1]))
            elif RedistributionMode(mode) is RedistributionMode.SPLIT:
                # the subtask had none of it: another subtask's entries stay with that one
                share[name] = (mode, [])
    return assigned
