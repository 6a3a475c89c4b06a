"""Errors raised by checkpoint storage and metadata handling.

Every message says what was looked for (or written), where, and what to do about it, because
these errors reach users through `tidegate run --from-checkpoint` and `tidegate checkpoints`.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class of all checkpoint errors."""


class CheckpointStorageError(CheckpointError):
    """The checkpoint storage cannot be created, written or read."""


class CheckpointNotFoundError(CheckpointError):
    """No completed checkpoint exists at the given path."""


class CorruptCheckpointError(CheckpointError):
    """A `_metadata` file exists but cannot be read as a tidegate checkpoint."""


class CheckpointTriggerError(CheckpointError):
    """A checkpoint or savepoint triggered by the user was not taken: it could not be triggered,
    or it was declined by a subtask or expired (the message gives the reason)."""


class JobNotRunningError(CheckpointTriggerError):
    """The job is not RUNNING (still starting, restarting, stopping or ended), so no checkpoint
    or savepoint can be taken now."""


class NoSavepointDirectoryError(CheckpointTriggerError):
    """A savepoint was triggered without a target directory and no default is configured."""
