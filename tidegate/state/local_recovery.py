"""Task-local recovery: a copy of each subtask's latest checkpoint on the worker's own disk.

Flink's task-local state (seeds 001, "prioritised alternatives"): while a state file is written
to the checkpoint storage, the same bytes go to a file under the worker's local directory. A
restore on the same host reads the local copy when it is present and intact (its size and
checksum match what the checkpoint's `_metadata` recorded for the remote file) and falls back to
the checkpoint storage otherwise. The remote file stays the truth and the local copy is only a
faster alternative, so failing to write or read a local copy never fails a checkpoint or a
restore: it is logged and the remote file is used.

Layout: `<root>/<job-id>/chk-<n>/<file name>`, where `<root>` is one of the configured local
directories (a comma-separated list spreads the files over several disks; a file's directory is
chosen by its name, so every process finds it in the same one). File names are unique within a
checkpoint (storage.create_artifact), so every slot of a host can share one root: any subtask
may find the copy another slot of the same host wrote. Savepoints get no local copy (they are
the user's, and a job does not restart from one unless asked to).
Incremental rocksdb checkpoints keep a directory there instead of files,
`chk-<n>/rocksdb-<backend id>/` (local_incremental), pruned and removed the same way.

Retention: when checkpoint n completes, the local copies of every checkpoint older than n are
deleted; copies of checkpoints that never complete are deleted by the next completion too. When
the job finishes, its local directory is removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import shutil
import tempfile
import zlib
from typing import BinaryIO

from tidegate.state.checksums import read_checksum

log = logging.getLogger("tidegate.local_recovery")

_CHK_DIR = re.compile(r"chk-(\d+)")


def default_local_root() -> str:
    """Where local copies go unless configured: a directory in the system's temp dir."""
    return os.path.join(tempfile.gettempdir(), "tidegate-local-state")


class LocalStateStore:
    """The local copies of one job's checkpoints on this host. Thread-safe (no shared state
    but the directory tree; every method tolerates concurrent writers of other files)."""

    def __init__(self, roots: str, job_id: str) -> None:
        """`roots`: one local directory, or several separated by commas."""
        self.job_dirs = [os.path.join(r.strip(), job_id) for r in roots.split(",") if r.strip()]
        if not self.job_dirs:
            raise ValueError(f"no local recovery directory in {roots!r}")

    def path_of(self, checkpoint_id: int, name: str) -> str:
        """Where the local copy of file `name` of checkpoint `checkpoint_id` is (or would be)."""
        job_dir = self.job_dirs[zlib.crc32(name.encode()) % len(self.job_dirs)]
        return os.path.join(job_dir, f"chk-{checkpoint_id}", name)

    def open_copy(self, checkpoint_id: int, name: str) -> BinaryIO | None:
        """A new local file to mirror artifact `name` of checkpoint `checkpoint_id` into, or
        None (logged) if the local directory is not writable."""
        path = self.path_of(checkpoint_id, name)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return open(path, "wb")
        except OSError as e:
            log.warning("task-local recovery: cannot write the local copy %s: %s", path, e)
            return None

    def discard(self, checkpoint_id: int, name: str) -> None:
        """Delete a local copy that could not be completed (a failed mirror write)."""
        with contextlib.suppress(OSError):
            os.remove(self.path_of(checkpoint_id, name))

    def confirm(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: delete the local copies of older ones."""
        for job_dir in self.job_dirs:
            try:
                entries = os.listdir(job_dir)
            except OSError:
                continue
            for entry in entries:
                match = _CHK_DIR.fullmatch(entry)
                if match and int(match.group(1)) < checkpoint_id:
                    shutil.rmtree(os.path.join(job_dir, entry), ignore_errors=True)

    def remove_job(self) -> None:
        """The job finished: delete all its local copies (a job that fails or is cancelled
        keeps them, as its restart may need them)."""
        for job_dir in self.job_dirs:
            shutil.rmtree(job_dir, ignore_errors=True)

    def find(self, remote_path: str, size: int | None, checksum: str | None) -> str | None:
        """The intact local copy of the checkpoint file at `remote_path`, or None.

        A copy is used only if its size and checksum equal the ones recorded for the remote file
        (a copy without a recorded checksum to compare with is never trusted). A damaged copy is
        deleted, so the next restore does not check it again.
        """
        if checksum is None:
            return None
        chk_dir = posixpath.basename(posixpath.dirname(remote_path))
        match = _CHK_DIR.fullmatch(chk_dir)
        if match is None:
            return None  # a savepoint's file: savepoints have no local copies
        path = self.path_of(int(match.group(1)), posixpath.basename(remote_path))
        try:
            if size is not None and os.path.getsize(path) != size:
                raise ValueError(f"size {os.path.getsize(path)}, expected {size}")
            with open(path, "rb") as f:
                _, actual = read_checksum(f)
            if actual != checksum:
                raise ValueError(f"checksum {actual}, expected {checksum}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning(
                "task-local recovery: the local copy %s is damaged (%s); reading %s instead",
                path,
                e,
                remote_path,
            )
            with contextlib.suppress(OSError):
                os.remove(path)
            return None
        return path
