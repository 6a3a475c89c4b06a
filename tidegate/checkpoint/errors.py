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
