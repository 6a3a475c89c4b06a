"""Pending part files of the FileSink, as lingering transactions (no option: the paths come
from the committables). The id is the hidden in-progress file's path.

Covered: a committable of a completed checkpoint whose in-progress file still exists (the
checkpoint completed, the rename did not happen); `commit` renames it with the sink's own
FileSinkCommitter (idempotent). Uncovered: any other hidden in-progress file named like the
sink's part files in the bucket directories the committables name (written after the last
completed checkpoint, or pre-committed in one that did not complete); `abort` deletes it. A
bucket directory that no completed checkpoint's committable names is not looked into.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Iterable

from tidegate.cli.errors import CliError
from tidegate.cli.transactions.model import Covered, JobCommittables, LingeringTransaction
from tidegate.connectors.file_sink import FileSinkCommittable, FileSinkCommitter

__all__ = ["FileTransactions", "UnsupportedFilesystem", "in_progress_pattern", "lingering_files"]

KIND = "files"
#: a part file's name: `<prefix>-<subtask>-<attempt>-<counter><suffix>` (file_sink.py)
_PART = re.compile(r"(?P<prefix>.+)-(?P<subtask>\d+)-(?P<attempt>\d+)-\d+(?P<suffix>(?!\d).*)")


def in_progress_pattern(committables: Iterable[FileSinkCommittable]) -> re.Pattern[str]:
    """Matches the in-progress file names of the sinks whose committables these are (their
    part prefixes and suffixes); groups `subtask` and `attempt`."""
    names = set()
    for c in committables:
        match = _PART.fullmatch(posixpath.basename(c.final_path))
        if match:
            names.add((re.escape(match["prefix"]), re.escape(match["suffix"])))
    alternatives = "|".join(
        rf"{prefix}-(?P<subtask{i}>\d+)-(?P<attempt{i}>\d+)-\d+{suffix}"
        for i, (prefix, suffix) in enumerate(sorted(names))
    )
    return re.compile(rf"\.(?:{alternatives or '(?!)'})\.inprogress")


def _writer_attempt(pattern: re.Pattern[str], path: str) -> tuple[int, int] | None:
    match = pattern.fullmatch(posixpath.basename(path))
    if match is None:
        return None
    found = [int(v) for v in match.groups() if v is not None]
    return found[0], found[1]


def lingering_files(
    covered: list[Covered], in_progress: dict[str, float], now: float
) -> list[LingeringTransaction]:
    """The pending part files: `covered`, the FileSink committables of the completed
    checkpoints; `in_progress`, the in-progress files found in their bucket directories (path
    -> modification time, epoch seconds)."""
    pattern = in_progress_pattern(c.committable for c in covered)
    found: dict[str, LingeringTransaction] = {}
    for c in covered:
        path = posixpath.normpath(c.committable.in_progress_path)
        if path in in_progress and path not in found:
            _writer, attempt = _writer_attempt(pattern, path) or (c.writer, None)
            found[path] = LingeringTransaction(
                KIND,
                path,
                c.writer,
                c.checkpoint_id,
                attempt,
                round(now - in_progress[path], 1),
                c.covered_by,
                "pending",
            )
    for path, mtime in sorted(in_progress.items()):
        parsed = _writer_attempt(pattern, path)
        if path not in found and parsed is not None:
            writer, attempt = parsed
            found[path] = LingeringTransaction(
                KIND, path, writer, None, attempt, round(now - mtime, 1), None, "in progress"
            )
    return list(found.values())


class UnsupportedFilesystem(CliError):
    """The job's FileSink writes to an object store: its files are not looked at."""


class FileTransactions:
    """The pending part files of the job's FileSinks (on the local filesystem)."""

    kind = KIND

    def __init__(self, job: JobCommittables) -> None:
        self._covered = job.of_type(FileSinkCommittable)
        self._committables = {
            posixpath.normpath(c.committable.in_progress_path): c.committable for c in self._covered
        }
        remote = [p for p in self._committables if not os.path.isabs(p)]
        if remote:
            raise UnsupportedFilesystem(
                f"the job's FileSink writes to a filesystem other than the local one "
                f"({remote[0]}): its pending files are not listed (`tidegate transactions` "
                "resolves pending files on the local filesystem only; by hand: a covered file is "
                "committed by renaming it without the leading '.' and the '.inprogress' suffix)"
            )
        self._committer = FileSinkCommitter("/")

    def lingering(self) -> list[LingeringTransaction]:
        pattern = in_progress_pattern(self._committables.values())
        in_progress = {}
        for directory in sorted({posixpath.dirname(p) for p in self._committables}):
            if not os.path.isdir(directory):
                continue
            for entry in os.scandir(directory):
                if pattern.fullmatch(entry.name) and entry.is_file():
                    path = posixpath.join(directory, entry.name)
                    in_progress[path] = entry.stat().st_mtime
        return lingering_files(self._covered, in_progress, time.time())

    def commit(self, t: LingeringTransaction) -> bool:
        committable = self._committables[t.id]
        if not os.path.exists(committable.in_progress_path):
            return False
        self._committer.commit([committable])
        return True

    def abort(self, t: LingeringTransaction) -> bool:
        try:
            os.remove(t.id)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        pass
