"""Verifying a checkpoint's files against the sizes and checksums its `_metadata` recorded.

A restore runs this on the driver before any slot starts (reading the files on a thread pool),
so a damaged checkpoint is refused as a whole, with the damaged files named, instead of failing
later in some slot or, worse, loading wrong state. `tidegate checkpoints DIR --verify` runs it
from the command line.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tidegate.checkpoint.errors import (
    CheckpointStorageError,
    ChecksumMismatchError,
    MissingCheckpointFileError,
)
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.state.checksums import is_known_checksum, read_checksum
from tidegate.state.handles import HEAP_CHANGELOG, StateHandle

#: files read at the same time when a checkpoint is verified
VERIFY_THREADS = 8
#: problems spelled out in an error message (all of them are in the error's `problems`)
_PROBLEMS_SHOWN = 5
_REMEDY = (
    "Nothing was changed or deleted. Restore from another (older) retained checkpoint or a "
    "savepoint; `tidegate checkpoints <checkpoint dir> --verify` checks every file of a "
    "checkpoint."
)


@dataclass(frozen=True)
class Artifact:
    """One file of a checkpoint, as its `_metadata` describes it."""

    #: "state file" or "channel-state file"
    kind: str
    #: the operator's uid (for channel state: the uid of the vertex's first operator)
    uid: str
    subtask: int
    #: the file's name, relative to the checkpoint directory
    file: str
    size: int | None
    checksum: str | None

    def describe(self) -> str:
        return f"{self.kind} {self.file} (operator {self.uid!r}, subtask {self.subtask})"


@dataclass(frozen=True)
class ArtifactProblem:
    artifact: Artifact
    #: the file's full path or URI
    path: str
    missing: bool
    #: what is wrong, e.g. "does not match its checksum (crc32:... recorded, crc32:... read)"
    detail: str

    def describe(self) -> str:
        return f"{self.artifact.describe()} {self.detail}"


@dataclass(frozen=True)
class VerificationReport:
    directory: str
    checkpoint_id: int
    #: files verified and their total size
    files: int
    bytes: int
    problems: tuple[ArtifactProblem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise MissingCheckpointFileError if a file is missing, else ChecksumMismatchError
        if one does not match; the message names every problem (up to a few)."""
        if not self.problems:
            return
        shown = "; ".join(p.describe() for p in self.problems[:_PROBLEMS_SHOWN])
        more = len(self.problems) - _PROBLEMS_SHOWN
        if more > 0:
            shown += f"; and {more} more"
        message = (
            f"checkpoint {self.checkpoint_id} in {self.directory} cannot be restored: {shown}. "
            f"{_REMEDY}"
        )
        error = (
            MissingCheckpointFileError
            if any(p.missing for p in self.problems)
            else ChecksumMismatchError
        )
        raise error(message, self.problems)


def checkpoint_artifacts(
    metadata: CheckpointMetadata, uids: Collection[str] | None = None
) -> list[Artifact]:
    """Every file `metadata` names (state files, channel-state files, the RocksDB files of
    incremental handles), in a stable order; only those of operators in `uids` when it is
    given (the files a restore of that job reads)."""
    wanted = (lambda uid: True) if uids is None else (lambda uid: uid in uids)
    found = []
    for uid, subtask, handle in metadata.state_handles():
        if wanted(uid):
            found.append(
                Artifact("state file", uid, subtask, handle.file, handle.size, handle.checksum)
            )
            found += _incremental_artifacts(uid, subtask, handle)
    for uid, entry in sorted(metadata.channel_state.items()):
        if wanted(uid):
            found += [
                Artifact("channel-state file", uid, subtask, h.file, h.size, h.checksum)
                for subtask, h in sorted(entry.subtasks.items())
            ]
    return found


def _incremental_artifacts(uid: str, subtask: int, handle: StateHandle) -> list[Artifact]:
    """The files of an incremental keyed-state handle (shared ones are in `shared/`): RocksDB
    files, or the state files of a hashmap chain."""
    inc = handle.incremental
    if inc is None:
        return []
    shared = "shared state file" if inc.backend == HEAP_CHANGELOG else "shared RocksDB file"
    return [
        Artifact(kind, uid, subtask, f.file, f.size, f.checksum)
        for kind, files in ((shared, inc.shared), ("RocksDB file", inc.private))
        for f in files
    ]


def verify_checkpoint(
    metadata: CheckpointMetadata,
    directory: str,
    *,
    uids: Collection[str] | None = None,
    filesystems: FileSystems = NO_OPTIONS,
    threads: int = VERIFY_THREADS,
) -> VerificationReport:
    """Read every file of the checkpoint in `directory` (of operators in `uids`, if given) and
    compare its size and checksum with `metadata`. Files that cannot be read for another reason
    than not existing (permissions, network) raise CheckpointStorageError."""
    fs, root = filesystems.resolve(directory)
    artifacts = checkpoint_artifacts(metadata, uids)

    def check(artifact: Artifact) -> tuple[int, ArtifactProblem | None]:
        path = f"{directory.rstrip('/')}/{artifact.file}"
        if not is_known_checksum(artifact.checksum) or type(artifact.size) is not int:
            return 0, ArtifactProblem(
                artifact, path, False, "has no valid size and checksum in _metadata (damaged)"
            )
        try:
            with fs.open(posixpath.normpath(posixpath.join(root, artifact.file)), "rb") as f:
                size, checksum = read_checksum(f)
        except FileNotFoundError:
            return 0, ArtifactProblem(artifact, path, True, "does not exist")
        except OSError as exc:
            raise CheckpointStorageError(
                f"cannot read {path} to verify it: {type(exc).__name__}: {exc}"
            ) from exc
        if size != artifact.size:
            detail = f"has {size} bytes, but {artifact.size} were written (truncated or damaged)"
            return size, ArtifactProblem(artifact, path, False, detail)
        if checksum != artifact.checksum:
            detail = (
                f"does not match its checksum ({artifact.checksum} recorded, {checksum} read): "
                "the file is damaged"
            )
            return size, ArtifactProblem(artifact, path, False, detail)
        return size, None

    workers = max(1, min(threads, len(artifacts)))
    with ThreadPoolExecutor(workers, thread_name_prefix="tidegate-verify") as pool:
        results = list(pool.map(check, artifacts))
    return VerificationReport(
        directory=directory,
        checkpoint_id=metadata.checkpoint_id,
        files=len(artifacts),
        bytes=sum(size for size, _ in results),
        problems=tuple(problem for _, problem in results if problem is not None),
    )
