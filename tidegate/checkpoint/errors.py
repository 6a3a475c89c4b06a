"""Errors raised by checkpoint storage and metadata handling.

Every message says what was looked for (or written), where, and what to do about it, because
these errors reach users through `tidegate run --from-checkpoint` and `tidegate checkpoints`.

    CheckpointError
      CheckpointStorageError          the storage cannot be created, written or read
        FencedWriterError             a newer generation owns the job directory
      CheckpointNotFoundError         no completed checkpoint at the path
      CheckpointTriggerError          a user-triggered checkpoint or savepoint was not taken
        JobNotRunningError, NoSavepointDirectoryError
      CheckpointIntegrityError        a stored checkpoint cannot be used as it is
        CorruptCheckpointError        `_metadata` is damaged or not a tidegate checkpoint
        UnsupportedFormatVersionError `_metadata` has a format version this tidegate cannot read
        MissingCheckpointFileError    a file named in `_metadata` does not exist
        ChecksumMismatchError         a file's size or checksum differs from `_metadata`
        (CorruptStateError, in state/snapshot_format.py: a state file section is damaged)

A restore may skip a checkpoint that raises a CheckpointIntegrityError and fall back to an older
one, but only when the user allows it (docs/guide.md#integrity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class CheckpointError(Exception):
    """Base class of all checkpoint errors."""


class CheckpointStorageError(CheckpointError):
    """The checkpoint storage cannot be created, written or read."""


class StorageNotSharedError(CheckpointStorageError):
    """A slot does not see storage the driver writes to (the checkpoint directory, or a sink's
    path, is not the same storage on its host): never restarted, the next attempt would not
    see it either."""


class FencedWriterError(CheckpointStorageError):
    """This writer's generation is older than the job directory's fence: another attempt or
    driver of the job took over, so this one must neither write nor delete anything there."""


class CheckpointNotFoundError(CheckpointError):
    """No completed checkpoint exists at the given path."""


class CheckpointIntegrityError(CheckpointError):
    """A stored checkpoint cannot be used as it is: damaged, incomplete, or in a format this
    tidegate cannot read. Restoring from it would load wrong or partial state."""


class CorruptCheckpointError(CheckpointIntegrityError):
    """A `_metadata` file exists but cannot be read as a tidegate checkpoint."""


class UnsupportedFormatVersionError(CheckpointIntegrityError):
    """A `_metadata` file has a format version this tidegate cannot read."""


class _ArtifactError(CheckpointIntegrityError):
    """Files named in a checkpoint's `_metadata` are unusable; `problems` lists each one."""

    def __init__(self, message: str, problems: Sequence[Any] = ()) -> None:
        super().__init__(message)
        #: one `verification.ArtifactProblem` per unusable file
        self.problems = tuple(problems)


class MissingCheckpointFileError(_ArtifactError):
    """A file named in `_metadata` does not exist (deleted, or never fully uploaded)."""


class ChecksumMismatchError(_ArtifactError):
    """A file's size or checksum differs from what `_metadata` recorded when it was written."""


class CheckpointTriggerError(CheckpointError):
    """A checkpoint or savepoint triggered by the user was not taken: it could not be triggered,
    or it was declined by a subtask or expired (the message gives the reason)."""


class JobNotRunningError(CheckpointTriggerError):
    """The job is not RUNNING (still starting, restarting, stopping or ended), so no checkpoint
    or savepoint can be taken now."""


class NoSavepointDirectoryError(CheckpointTriggerError):
    """A savepoint was triggered without a target directory and no default is configured."""
