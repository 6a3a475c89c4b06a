"""Choosing the checkpoint a restore uses: the newest candidate that is intact, or, only when
the user allows falling back, an older one.

Candidates come newest first: the retained checkpoints of the running job (after a failure), or
the completed checkpoints of a job directory the user restores from. Each is checked in two
steps — its `_metadata` decodes (format, version, checksum), and every file the restore will
read has the recorded size and checksum — and a candidate that fails either step is unusable
(a CheckpointIntegrityError). Nothing is ever deleted here.

Falling back is opt-in because it can break exactly-once: the sources replay everything after
the older checkpoint, so output that two-phase-commit sinks already committed for a skipped
checkpoint is committed again. It is exactly-once only when the skipped checkpoint's output had
not been committed (e.g. the job failed between completing it and notifying the sinks).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tidegate.checkpoint.errors import CheckpointIntegrityError, CheckpointNotFoundError
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.storage import read_checkpoint_metadata
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.common.filesystems import NO_OPTIONS, FileSystems

log = logging.getLogger("tidegate.restore")

#: the configuration key and `tidegate run` flag that allow falling back (for messages)
FALLBACK_SETTING = (
    "the configuration key execution.checkpointing.restore-fallback=true "
    "(or `tidegate run --restore-fallback`)"
)


@dataclass(frozen=True)
class RestoreCandidate:
    #: the checkpoint (chk-<n>) or savepoint directory
    directory: str
    #: its metadata when already known (a checkpoint this driver completed); else it is read
    metadata: CheckpointMetadata | None = None


def choose_checkpoint(
    candidates: Sequence[RestoreCandidate],
    *,
    uids: Collection[str] | None,
    allow_fallback: bool,
    filesystems: FileSystems = NO_OPTIONS,
) -> tuple[CheckpointMetadata, str]:
    """The (metadata, directory) of the first usable candidate.

    Without `allow_fallback` the first candidate must be usable: its CheckpointIntegrityError
    (or CheckpointNotFoundError, if its `_metadata` vanished) is raised, with a hint naming the
    next older candidate. With it, unusable candidates are skipped with a warning saying which
    and why; if none is usable, CheckpointIntegrityError lists them all. `uids`: the operators
    of the job being restored (only their files are verified, as only they are read); None
    verifies every file.
    """
    skipped: list[tuple[str, Exception]] = []
    for i, candidate in enumerate(candidates):
        try:
            metadata = candidate.metadata or read_checkpoint_metadata(
                candidate.directory, filesystems
            )
            verify_checkpoint(
                metadata, candidate.directory, uids=uids, filesystems=filesystems
            ).raise_for_problems()
        except (CheckpointIntegrityError, CheckpointNotFoundError) as error:
            if not allow_fallback:
                _add_hint(error, _fallback_hint(candidates[i + 1 :]))
                raise
            log.warning(
                "skipping checkpoint %s (restore fallback is allowed): %s",
                candidate.directory,
                error,
            )
            skipped.append((candidate.directory, error))
            continue
        if skipped:
            log.warning(
                "restoring from the older checkpoint %s: %d newer one(s) skipped as unusable "
                "(%s). The sources replay the records since then: output a sink already "
                "committed for a skipped checkpoint is written again",
                candidate.directory,
                len(skipped),
                ", ".join(directory for directory, _ in skipped),
            )
        return metadata, candidate.directory
    reasons = "; ".join(f"{directory}: {type(e).__name__}: {e}" for directory, e in skipped)
    raise CheckpointIntegrityError(
        f"no usable checkpoint to restore: every candidate is damaged or unreadable ({reasons}). "
        "Nothing was deleted. Restore from a savepoint, or start the job without state."
    )


def _fallback_hint(older: Sequence[RestoreCandidate]) -> str:
    if older:
        return (
            f"An older checkpoint is retained ({older[0].directory}): allow falling back to it "
            f"automatically with {FALLBACK_SETTING}, or restore from it explicitly."
        )
    return (
        "There is no older checkpoint to fall back to here: restore from an older chk-<n> of "
        f"the job directory (or pass the job directory with {FALLBACK_SETTING}), or from a "
        "savepoint."
    )


def _add_hint(error: Exception, hint: str) -> None:
    """Append `hint` to `error`'s message."""
    error.args = (f"{error} {hint}", *error.args[1:])
