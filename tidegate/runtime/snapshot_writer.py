"""The asynchronous phase of a subtask's snapshot: write what the synchronous phase captured
(one state file per stateful operator, the new files of incremental checkpoints, the channel
state of an unaligned checkpoint) and return the handles the acknowledgement carries. Runs on the
slot's snapshot executor while the task keeps processing records."""

from __future__ import annotations

from typing import Any

from tidegate.runtime import faults
from tidegate.runtime.operators import OperatorSnapshot
from tidegate.runtime.restore import CHANNEL_STATE_KEY
from tidegate.runtime.task_environment import TaskEnvironment
from tidegate.state.channel_state import write_channel_state
from tidegate.state.handles import ChannelStateHandle, StateHandle, file_safe
from tidegate.state.rocksdb_incremental import upload_snapshot
from tidegate.state.snapshot_format import write_state_file


def write_snapshot(
    env: TaskEnvironment,
    subtask: int,
    checkpoint_id: int,
    snapshots: list[tuple[str, OperatorSnapshot | None]],
    key_group_ranges: dict[str, range],
    frames: list[bytes] | None,
    target: str | None,
    head_uid: str,
) -> tuple[dict[str, StateHandle | ChannelStateHandle], int]:
    """(the handles by operator uid, the bytes of channel state written). `key_group_ranges`:
    the keyed operators' key groups; `target`: a savepoint's own directory (None: the
    checkpoint's); `frames`: the in-flight frames of an unaligned checkpoint."""
    faults.reach(faults.Site.ASYNC_SNAPSHOT, checkpoint_id)
    directory = target or env.storage.checkpoint_dir(checkpoint_id)
    state: dict[str, StateHandle | ChannelStateHandle] = {}
    for uid, snap in snapshots:
        if snap is not None:
            state[uid] = _write_operator_state(
                env, subtask, checkpoint_id, uid, snap, key_group_ranges.get(uid), directory, target
            )
    channel_state_bytes = 0
    if frames:
        stem = f"channels-{file_safe(head_uid)}-{subtask}"
        with env.storage.create_artifact(directory, stem, ".inflight") as f:
            channel_state_bytes = write_channel_state(f, frames)
        state[CHANNEL_STATE_KEY] = ChannelStateHandle(
            file=f.name, size=f.size, checksum=f.checksum, frames=len(frames)
        )
    return state, channel_state_bytes


def _write_operator_state(
    env: TaskEnvironment,
    subtask: int,
    checkpoint_id: int,
    uid: str,
    snap: OperatorSnapshot,
    key_groups: range | None,
    directory: str,
    target: str | None,
) -> StateHandle:
    """One operator's state file (and SST uploads); its handle for `_metadata`."""
    stem = f"{file_safe(uid)}-{subtask}"
    # incremental checkpoints (not savepoints): the state file holds no keyed state
    incremental = target is None and getattr(snap.keyed, "tracker", None) is not None
    with env.storage.create_artifact(directory, stem, ".state") as f:
        if env.local_state is not None and target is None:
            _mirror_locally(env, f, checkpoint_id)
        index = write_state_file(f, None if incremental else snap.keyed, snap.operator)
    uploaded = None
    if incremental and hasattr(snap.keyed, "upload"):  # a chain (heap_incremental)
        uploaded = snap.keyed.upload(env.storage, directory, stem, checkpoint_id)
    elif incremental:  # SST files to shared/ (last: a failure deletes its uploads)
        uploaded = upload_snapshot(
            snap.keyed, env.storage, directory, stem, checkpoint_id, env.local_state
        )
    return StateHandle(
        file=f.name,
        size=f.size,
        checksum=f.checksum,
        index=index,
        key_group_range=key_groups,
        incremental=uploaded,
    )


def _mirror_locally(env: TaskEnvironment, artifact: Any, checkpoint_id: int) -> None:
    """Task-local recovery: the state file goes to the worker's local disk too."""
    local, name = env.local_state, artifact.name
    copy = local.open_copy(checkpoint_id, name)
    if copy is not None:
        artifact.mirror_to(copy, lambda: local.discard(checkpoint_id, name))
