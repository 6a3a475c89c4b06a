"""Savepoints: user-owned snapshots, each in a directory of its own.

A savepoint is taken like an aligned checkpoint, but its subtasks write their state files into
`<savepoint-dir>/savepoint-<first 6 of the job id>-<12 hex>/` (the barrier's
`options.target_location`) instead of the job's `chk-<n>`, and `_metadata` goes there too. File
names in `_metadata` are relative, so the directory is self-contained and can be moved. The job
never subsumes or deletes a completed savepoint; only a failed one's directory is removed.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid

from tidegate.checkpoint.metadata import METADATA_FILE_NAME
from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.checkpoint.storage import CHECKPOINT_DIR
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common.filesystems import NO_OPTIONS, FileSystems

SAVEPOINT_DIR_PREFIX = "savepoint-"


def savepoint_location(base_dir: str, job_id: str) -> str:
    """A new, unique directory for a savepoint of `job_id` under `base_dir` (not created yet).

    A local `base_dir` is made absolute (slots may run in another working directory); a URI is
    kept as given.
    """
    if not base_dir:
        raise ValueError("the savepoint directory must not be empty")
    base = base_dir if "://" in base_dir else os.path.abspath(os.path.expanduser(base_dir))
    name = f"{SAVEPOINT_DIR_PREFIX}{job_id[:6]}-{uuid.uuid4().hex[:12]}"
    return f"{base.rstrip('/')}/{name}"


def discard_snapshot_dir(path: str, filesystems: FileSystems = NO_OPTIONS) -> None:
    """Delete a savepoint directory (a failed savepoint's files) or a snapshot directory the job
    claimed on restore, with everything in it; a missing one is fine.

    Refuses anything that is not a `savepoint-*` or `chk-<n>` directory or a directory holding
    `_metadata`: this is a recursive delete of a path that came from outside the job.
    """
    fs, fs_path = filesystems.resolve(path)
    fs_path = fs_path.rstrip("/")
    name = posixpath.basename(fs_path)
    looks_like_snapshot = (
        name.startswith(SAVEPOINT_DIR_PREFIX)
        or CHECKPOINT_DIR.fullmatch(name) is not None
        or fs.isfile(posixpath.join(fs_path, METADATA_FILE_NAME))
    )
    if not looks_like_snapshot:
        raise ValueError(f"refusing to delete {path}: not a savepoint or checkpoint directory")
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        fs.rm(fs_path, recursive=True)


def newest_snapshot(*candidates: CompletedCheckpoint | None) -> CompletedCheckpoint | None:
    """The candidate with the highest checkpoint id (checkpoints and savepoints of one job share
    the id sequence), or None if there is none. A failover restores from it: after a savepoint
    completed, its sinks committed, so restoring an older checkpoint would commit output twice."""
    present = [c for c in candidates if c is not None]
    return max(present, key=lambda c: c.checkpoint_id) if present else None


def savepoint_options(location: str | None, *, final: bool) -> CheckpointOptions:
    """The options of a savepoint into `location`; `final` for stop-with-savepoint (the tasks
    end after it). Savepoints are always aligned: no in-flight data, so any topology can
    restore them."""
    return CheckpointOptions(
        checkpoint_type=CheckpointType.SAVEPOINT, is_final=final, target_location=location
    )
