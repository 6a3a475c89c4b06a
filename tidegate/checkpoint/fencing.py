"""Writer fencing: every attempt of a job writes as a *generation*, and a writer of an older
generation (a slot that outlived its attempt, or a second driver of the same job id) can never
replace, corrupt or delete what a newer generation wrote.

The fence of a job directory is a set of files `<job-dir>/_fence/generation-<n>`, each created
exclusively (it fails if it exists), so two writers can never take the same generation; the
current generation is the highest n present. A JobMaster takes a new generation before each
attempt (and before it picks the checkpoint to restore), so generations strictly increase
across attempts and across drivers that use the same job id and checkpoint directory.

Writers check the fence before they write or delete (`check`), and the JobMaster checks it again
after publishing `_metadata`; unique, generation-stamped file names and `_metadata` that is
never overwritten cover the rest (docs/checkpoint-format.md#writer-fencing).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import socket
import time

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from tidegate.checkpoint.errors import FencedWriterError

FENCE_DIR_NAME = "_fence"
#: generation files kept when older ones are pruned. A writer that read the fence and then
#: creates the next file must never find a slot free only because newer writers pruned it
#: (it would hand out a generation twice): that would take this many registrations between
#: its read and its create, which are milliseconds apart.
KEPT_GENERATIONS = 16
_GENERATION_FILE = re.compile(r"generation-(\d+)")


class WriterFence:
    """The generation fence of one job directory."""

    def __init__(self, fs: AbstractFileSystem, fs_job_dir: str, job_dir: str) -> None:
        self.fs = fs
        self._fs_dir = posixpath.join(fs_job_dir, FENCE_DIR_NAME)
        #: the job directory as users see it (for messages)
        self.job_dir = job_dir

    def current(self) -> int:
        """The newest generation registered; 0 if none was."""
        return max(self._generations(), default=0)

    def advance(self, expected: int | None = None) -> int:
        """Register the next generation and return it.

        `expected`: the generation the caller writes as now (None for a driver starting up). If
        another writer registered a newer one meanwhile, the caller has been superseded and
        FencedWriterError is raised instead: it must stop, not take over again.
        """
        self.fs.makedirs(self._fs_dir, exist_ok=True)
        while True:
            current = self.current()
            if expected is not None and current != expected:
                raise self._fenced(expected, current, "start a new attempt")
            new = current + 1
            info = {"generation": new, "host": socket.gethostname(), "pid": os.getpid()}
            info["registered_ms"] = int(time.time() * 1000)
            try:
                create_new_file(self.fs, self._path(new), json.dumps(info).encode())
            except FileExistsError:
                continue  # another writer took `new` at the same moment: re-read the fence
            self._prune(below=new - KEPT_GENERATIONS + 1)
            return new

    def check(self, generation: int, action: str) -> None:
        """Raise FencedWriterError if a generation newer than `generation` is registered."""
        current = self.current()
        if current > generation:
            raise self._fenced(generation, current, action)

    def _fenced(self, mine: int, current: int, action: str) -> FencedWriterError:
        return FencedWriterError(
            f"refusing to {action}: the job directory {self.job_dir} now belongs to generation "
            f"{current}{self._holder(current)}, and this writer is generation {mine}. A newer "
            "attempt of the job, or another driver started with the same job id, took over; "
            "this writer stops without touching its files. Run one driver per job id."
        )

    def _holder(self, generation: int) -> str:
        try:
            with self.fs.open(self._path(generation), "rb") as f:
                info = json.loads(f.read())
            return f" (registered by pid {info['pid']} on {info['host']})"
        except Exception:  # only decoration of the message; the fence itself is the file name
            return ""

    def _generations(self) -> list[int]:
        with contextlib.suppress(Exception):  # listing caches (object stores) must not lie
            self.fs.invalidate_cache(self._fs_dir)
        try:
            names = self.fs.ls(self._fs_dir, detail=False)
        except FileNotFoundError:
            return []
        found = (_GENERATION_FILE.fullmatch(posixpath.basename(n.rstrip("/"))) for n in names)
        return [int(m.group(1)) for m in found if m]

    def _prune(self, below: int) -> None:
        """Delete generation files older than `below` (the newest KEPT_GENERATIONS stay, so
        readers never see the fence go back)."""
        for generation in self._generations():
            if generation < below:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(self._path(generation))

    def _path(self, generation: int) -> str:
        return posixpath.join(self._fs_dir, f"generation-{generation}")


def create_new_file(fs: AbstractFileSystem, fs_path: str, data: bytes) -> None:
    """Create `fs_path` holding `data`, or raise FileExistsError if it exists.

    Atomic on local filesystems (O_EXCL) and on stores whose fsspec implementation creates
    conditionally (`pipe_file(mode="create")`, e.g. S3's conditional writes); elsewhere fsspec
    checks for the file first, which leaves a tiny window between two simultaneous creators.
    """
    if isinstance(fs, LocalFileSystem):
        fd = os.open(fs_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return
    fs.pipe_file(fs_path, data, mode="create")
