"""The `_metadata` of a completed checkpoint or savepoint, from its subtasks' acknowledgements
and the job graph (the coordinator's `finalize` hook writes it)."""

from __future__ import annotations

from typing import Any

from tidegate.checkpoint.metadata import (
    ChannelStateMetadata,
    CheckpointMetadata,
    OperatorMetadata,
)
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.restore import CHANNEL_STATE_KEY
from tidegate.state.handles import ChannelStateHandle, StateHandle


def build_metadata(
    graph: JobGraph, job_id: str, pending: Any, completed_ms: int, attempt: int, generation: int
) -> CheckpointMetadata:
    """The `_metadata` of a fully acknowledged checkpoint. File names are relative to the
    checkpoint directory, so a checkpoint directory can be moved; every file's handle carries
    the size and checksum it was written with (verified on restore)."""
    operators: dict[str, dict[int, StateHandle]] = {}
    channels: dict[int, dict[int, ChannelStateHandle]] = {}
    for (vertex_id, subtask), state in sorted(pending.acked_states.items()):
        for uid, handle in state.items():
            if uid == CHANNEL_STATE_KEY:  # in-flight records of an unaligned checkpoint
                channels.setdefault(vertex_id, {})[subtask] = handle
            else:
                operators.setdefault(uid, {})[subtask] = handle
    metadata = CheckpointMetadata(
        job_id=job_id,
        job_name=graph.job_name,
        checkpoint_id=pending.checkpoint_id,
        timestamp_ms=pending.timestamp_ms,
        completed_ms=completed_ms,
        duration_ms=max(completed_ms - pending.timestamp_ms, 0),
        is_savepoint=pending.is_savepoint,
        attempt=attempt,
        generation=generation,
        max_parallelism=graph.max_parallelism,
        operators={
            uid: OperatorMetadata(op.name, vertex.parallelism, handles)
            for uid, handles in operators.items()
            for vertex, op in [graph.operator(uid)]
        },
        channel_state={
            # by the vertex's head operator
            graph.vertices[v].operators[0].uid: ChannelStateMetadata(
                graph.vertices[v].parallelism, tuple(graph.input_channels(v, 0)), handles
            )
            for v, handles in channels.items()
        },
    )
    return metadata.replace(size_bytes=metadata.written_bytes())
