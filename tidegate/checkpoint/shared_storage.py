"""Proof that the driver and the slots see the same storage: the job's checkpoint directory,
and every path a sink declares shared (connectors/base.py `SharedPathSink`).

1. At each attempt the driver writes a check file holding a fresh token,
   `<directory>/.storage-check-<token>`, into each such directory (hidden: the readers of a
   sink's output ignore names starting with '.'), and sends the checks with the deployment.
2. Every slot reads the check files of the directories it uses (the checkpoint directory; a
   sink's paths if it hosts a subtask of that sink) before it writes anything. One it does not
   find means another disk at the same path: StorageNotSharedError names the directory and the
   slot's host, and the job fails at once (a restart would meet the same storage).
3. The driver deletes an attempt's check files when the next attempt has written its own, and
   when the job ends. Each attempt's files have names of their own, so a driver never deletes
   another's (a later driver of the same job id, a job writing into the same sink path).
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from dataclasses import dataclass

from tidegate.checkpoint.errors import StorageNotSharedError
from tidegate.common.filesystems import FileSystems

CHECK_FILE_PREFIX = ".storage-check-"


@dataclass(frozen=True)
class StorageCheck:
    """One check file the driver wrote."""

    #: what the directory is, for messages: "the checkpoint directory s3://b/chk"
    what: str
    directory: str
    token: str
    #: the vertex whose subtasks use the directory (None: every slot)
    vertex_id: int | None = None

    @property
    def file(self) -> str:
        return f"{self.directory.rstrip('/')}/{CHECK_FILE_PREFIX}{self.token}"


def write_check(
    filesystems: FileSystems, what: str, directory: str, vertex_id: int | None = None
) -> StorageCheck:
    """Step 1: write a new check file into `directory` (created if missing)."""
    check = StorageCheck(what, directory, uuid.uuid4().hex, vertex_id)
    fs, path = filesystems.resolve(check.file)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    fs.pipe_file(path, check.token.encode())
    return check


def verify_check(check: StorageCheck, filesystems: FileSystems, host: str) -> None:
    """Step 2, in a slot on `host`: the driver's check file is there; StorageNotSharedError
    naming the directory, the host and what to do otherwise."""
    fs, path = filesystems.resolve(check.file)
    try:
        found: bytes | None = fs.cat_file(path)
    except FileNotFoundError:
        found = None
    problem = check_problem(check.token, found)
    if problem is not None:
        raise StorageNotSharedError(
            f"{check.what} is not the same storage on host {host} as on the driver: the "
            f"driver's check file {check.file} {problem} here. Use a location every host reads "
            "and writes at the same path (a shared filesystem such as NFS or HDFS, or object "
            "storage such as s3://...)"
        )


def check_problem(token: str, found: bytes | None) -> str | None:
    """What is wrong with a check file holding `found` (None: missing), or None if nothing."""
    if found is None:
        return "is missing"
    if found.decode(errors="replace") != token:
        return "holds something else"
    return None


def remove_check(check: StorageCheck, filesystems: FileSystems) -> None:
    """Step 3: delete the check file (a missing one is fine)."""
    fs, path = filesystems.resolve(check.file)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)
