"""The JobMaster's side of the shared-state registry (state/shared_registry.py): deleting
the shared files it hands out, and rebuilding it when a job restores a snapshot."""

from __future__ import annotations

import logging
import posixpath

from tidegate.checkpoint.errors import CheckpointError
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.checkpoint.storage import (
    CheckpointStorage,
    checkpoint_candidates,
    read_checkpoint_metadata,
)
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common.filesystems import FileSystems
from tidegate.state.incremental_handles import shared_dir, state_references
from tidegate.state.shared_registry import CheckpointReferences, SharedStateRegistry

log = logging.getLogger("tidegate.jobmaster")


def delete_shared_files(storage: CheckpointStorage, paths: list[str]) -> None:
    """Delete shared files the registry released (missing ones are fine). A fenced storage
    deletes nothing once a newer generation took over (FencedWriterError)."""
    if not paths:
        return
    for path in paths:
        storage.delete_file(path)
    log.debug("deleted %d unused shared file(s)", len(paths))


def discard_references(
    registry: SharedStateRegistry, cp: CompletedCheckpoint | PendingCheckpoint, directory: str
) -> list[str]:
    """Files uploaded by a checkpoint that did not complete (or completed too late to be
    retained) which no retained checkpoint uses: to delete with its directory."""
    if isinstance(cp, CompletedCheckpoint):
        refs = (
            cp.metadata.references(directory)
            if cp.metadata is not None
            else CheckpointReferences(cp.checkpoint_id)
        )
    else:
        refs = state_references(cp.checkpoint_id, cp.acked_states, directory)
    return registry.discard_uncompleted(refs)


def check_references(
    registry: SharedStateRegistry, metadata: CheckpointMetadata, directory: str
) -> None:
    """Refuse to complete a checkpoint that reuses shared files no retained checkpoint has
    (they may be deleted already)."""
    unknown = registry.references_unknown(metadata.references(directory))
    if unknown:
        raise CheckpointError(
            f"checkpoint {metadata.checkpoint_id} reuses shared file(s) no retained "
            f"checkpoint references ({', '.join(unknown[:3])}); it is not completed, the "
            "next checkpoint uploads them again"
        )


def pin_retained_snapshots(
    registry: SharedStateRegistry, restored_dir: str, owned: set[str], filesystems: FileSystems
) -> None:
    """Rebuild the registry's view of snapshots beside a restored one (other `chk-<n>` of its
    job directory) that the job does not own: their shared files are never deleted. A snapshot
    whose `_metadata` cannot be read protects its whole shared directory."""
    job_dir = posixpath.dirname(restored_dir.rstrip("/"))
    try:
        candidates = checkpoint_candidates(job_dir, filesystems)
    except CheckpointError:
        return
    for directory in candidates:
        if directory in owned:
            continue
        try:
            metadata = read_checkpoint_metadata(directory, filesystems)
            registry.pin(metadata.references(directory).paths)
        except (CheckpointError, OSError, KeyError, ValueError) as e:
            log.warning("cannot read %s (%s): no file of %s is deleted", directory, e, job_dir)
            registry.protect(shared_dir(job_dir))
