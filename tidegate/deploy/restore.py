"""The state assignment for a restore: a function from (metadata, job graph) to what each
subtask loads (DESIGN §7), with the checks that refuse a snapshot this job cannot restore."""

from __future__ import annotations

import logging
from typing import Any

from tidegate.checkpoint.assignment import (
    assign_operator_state,
    check_max_parallelism,
    keyed_handles_for_subtask,
)
from tidegate.checkpoint.errors import CheckpointError, MissingCheckpointFileError
from tidegate.checkpoint.metadata import (
    CheckpointMetadata,
)
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.restore import (
    CHANNEL_STATE_KEY,
    KeyedStateHandle,
    RestoredChannelState,
    RestoredOperatorState,
)
from tidegate.state.handles import StateHandle
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle
from tidegate.state.snapshot_format import read_operator_state

log = logging.getLogger("tidegate.restore")

#: what each subtask (vertex id, subtask index) restores, by operator uid (and CHANNEL_STATE_KEY)
RestorePlan = dict[tuple[int, int], dict[str, RestoredOperatorState | RestoredChannelState]]


class IncompatibleCheckpointError(CheckpointError):
    pass


class MaxParallelismError(IncompatibleCheckpointError, ValueError):
    """The job's max parallelism or parallelism does not fit the snapshot's key groups."""


def plan_restore(
    graph: JobGraph,
    metadata: CheckpointMetadata,
    directory: str,
    allow_non_restored_state: bool = False,
    *,
    reuse_shared_files: bool = False,
    filesystems: FileSystems = NO_OPTIONS,
) -> tuple[RestorePlan, int]:
    """Assign the snapshot's state to the subtasks of `graph` (any parallelism); also
    returns the max parallelism to run with (the snapshot's: key groups are fixed). Operator
    state is read here, with the job's `filesystems` options.

    State is matched by operator uid. State of a uid the job does not have fails the restore,
    unless `allow_non_restored_state`: then it is dropped with a warning. Incremental keyed
    state may be reused by the restored backends only with `reuse_shared_files` (the job owns
    the snapshot: its own checkpoint, or one restored with RestoreMode.CLAIM).

    The snapshot's files are not verified here: the JobMaster restores only a snapshot whose
    files `checkpoint.selection.choose_checkpoint` verified."""
    max_p = _restore_max_parallelism(graph, metadata, directory)
    metadata = _matched_state(graph, metadata, directory, allow_non_restored_state)
    _check_readable(metadata, directory)
    channel_plan = _plan_channel_state(graph, metadata, directory)
    plan: RestorePlan = {}
    for uid, entry in metadata.operators.items():
        vertex, _op = graph.operator(uid)
        keyed = [
            (h.key_group_range, (f"{directory}/{h.file}", h))
            for h in entry.handles()
            if h.key_group_range is not None
        ]
        operator_states: list[dict[str, Any]] = [{} for _ in range(entry.parallelism)]
        for index, h in entry.subtasks.items():
            operator_states[index] = _read_operator_state(directory, h, filesystems)
        per_subtask = assign_operator_state(operator_states, vertex.parallelism)
        for i in range(vertex.parallelism):
            handles = tuple(
                keyed_restore_handle(
                    path, h, r, directory, metadata.checkpoint_id, reuse_shared_files
                )
                for r, (path, h) in keyed_handles_for_subtask(keyed, i, vertex.parallelism, max_p)
            )
            plan.setdefault((vertex.vertex_id, i), {})[uid] = RestoredOperatorState(
                handles, per_subtask[i]
            )
    for subtask_id, restored in channel_plan.items():
        plan.setdefault(subtask_id, {})[CHANNEL_STATE_KEY] = restored
    return plan, max_p


def _check_readable(metadata: CheckpointMetadata, directory: str) -> None:
    """Refuse a snapshot with a state handle this version cannot read (no state-file index:
    written by another tidegate version or tool) before any subtask starts."""
    for uid, entry in metadata.operators.items():
        for subtask, h in sorted(entry.subtasks.items()):
            if h.index is None:
                what = f"a handle of type {h.kind!r}" if h.kind else "a handle without an index"
                raise IncompatibleCheckpointError(
                    f"cannot restore {directory}: the state of operator {uid!r} subtask {subtask} "
                    f"({h.file}) is {what}, not a state file this tidegate version can read. "
                    "Restore it with the tidegate version that wrote it and take a savepoint "
                    "there (`tidegate savepoint JOB DIR`), or restore from another snapshot."
                )


def _restore_max_parallelism(graph: JobGraph, metadata: CheckpointMetadata, directory: str) -> int:
    """The snapshot's max parallelism, if the job's (configured) max parallelism and the
    parallelism of every operator fit it; else a MaxParallelismError naming the operator."""
    widest = max(graph.vertices.values(), key=lambda v: v.parallelism)
    if metadata.max_parallelism is None:
        raise IncompatibleCheckpointError(
            f"cannot restore {directory}: its _metadata records no max parallelism (it was not "
            "written by a complete tidegate job); restore from another checkpoint or savepoint."
        )
    try:
        return check_max_parallelism(
            metadata.max_parallelism,
            widest.parallelism,
            graph.max_parallelism if graph.max_parallelism_configured else None,
        )
    except ValueError as e:
        raise MaxParallelismError(
            f"cannot restore {directory} (operator {widest.name!r} has parallelism "
            f"{widest.parallelism}): {e}"
        ) from None


def keyed_restore_handle(
    path: str, h: StateHandle, r: range, directory: str, checkpoint_id: int, reusable: bool
) -> KeyedStateHandle | IncrementalKeyedStateHandle:
    """What a new subtask reads from an old subtask's handle `h` for key groups `r`."""
    if h.incremental is not None:
        return IncrementalKeyedStateHandle(directory, checkpoint_id, h.incremental, r, reusable)
    return KeyedStateHandle(path, h.index, r, h.size, h.checksum)


def _matched_state(
    graph: JobGraph, metadata: CheckpointMetadata, directory: str, allow_non_restored_state: bool
) -> CheckpointMetadata:
    """`metadata` without the state of operators `graph` does not have (which is an error
    unless non-restored state is allowed)."""
    known = {op.uid for v in graph.vertices.values() for op in v.operators}
    unmatched = {uid: e.name for uid, e in metadata.operators.items() if uid not in known}
    unmatched |= {uid: uid for uid in metadata.channel_state if uid not in known}
    if not unmatched:
        return metadata
    listing = ", ".join(f"uid {uid!r} ({name})" for uid, name in sorted(unmatched.items()))
    if not allow_non_restored_state:
        raise IncompatibleCheckpointError(
            f"cannot restore {directory}: it holds state of {len(unmatched)} operator(s) that "
            f"this job does not have: {listing}. Operators are matched by uid: if you changed "
            "an operator's uid, give it its old one again with .uid(...); if you removed the "
            "operator on purpose, allow dropping its state with `tidegate run "
            "--allow-non-restored-state` or the configuration key "
            "execution.state-recovery.ignore-unclaimed-state=true."
        )
    log.warning(
        "restoring %s without the state of %d operator(s) this job does not have "
        "(non-restored state is allowed, so it is dropped): %s",
        directory,
        len(unmatched),
        listing,
    )
    return metadata.replace(
        operators={u: e for u, e in metadata.operators.items() if u in known},
        channel_state={u: e for u, e in metadata.channel_state.items() if u in known},
    )


def warn_generated_uids(graph: JobGraph, stateful_uids: Any, action: str) -> None:
    """Warn that operators whose state is in a snapshot have no explicit uid: their generated
    uid (`<kind>-<n>`) changes when the job is edited, and then the state no longer maps."""
    generated = [
        f"{op.name} ({op.uid})"
        for v in graph.vertices.values()
        for op in v.operators
        if op.uid_generated and op.uid in stateful_uids
    ]
    if generated:
        log.warning(
            "%s: the stateful operator(s) %s have no explicit uid; their state is matched by a "
            "uid generated from the job's shape, which changes when you edit the job. Set "
            ".uid(...) on every stateful operator so savepoints survive upgrades.",
            action,
            ", ".join(generated),
        )


def _plan_channel_state(
    graph: JobGraph, metadata: CheckpointMetadata, directory: str
) -> dict[tuple[int, int], RestoredChannelState]:
    """Each subtask gets back its own in-flight records (channel indices name the upstream
    subtasks, so the vertex and its inputs must keep their parallelism)."""
    plan = {}
    for uid, entry in metadata.channel_state.items():
        vertex, _op = graph.operator(uid)
        if (
            vertex.operators[0].uid != uid
            or entry.parallelism != vertex.parallelism
            or entry.inputs != tuple(graph.input_channels(vertex.vertex_id, 0))
        ):
            raise IncompatibleCheckpointError(
                f"the checkpoint in {directory} is unaligned and holds in-flight records for "
                f"operator {uid!r}, whose parallelism or inputs changed. In-flight records can "
                "only be restored into the same topology: restore at the old parallelism, or "
                "take a savepoint (always aligned) and rescale from that."
            )
        for subtask, handle in entry.subtasks.items():
            plan[(vertex.vertex_id, subtask)] = RestoredChannelState(f"{directory}/{handle.file}")
    return plan


def _read_operator_state(
    directory: str, handle: StateHandle, filesystems: FileSystems
) -> dict[str, Any]:
    if handle.index.operator_offset is None:
        return {}
    path = f"{directory}/{handle.file}"
    try:
        with filesystems.open(path) as f:
            return read_operator_state(f, handle.index)
    except FileNotFoundError:
        raise MissingCheckpointFileError(
            f"state file {path} of the checkpoint is missing; the checkpoint is incomplete. "
            "Restore from another (older) checkpoint or savepoint."
        ) from None
