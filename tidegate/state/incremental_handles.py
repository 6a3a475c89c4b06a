"""Incremental keyed-state handles in `_metadata`: paths of their files and the shared-file
references the SharedStateRegistry counts (the format is in docs/checkpoint-format.md).

An operator subtask's handle keeps its usual `file` (the state file, holding the operator state
only) and adds `incremental`::

    {"version": 1, "backend_id": "<uuid>", "base_checkpoint_id": 4 | null,
     "key_group_range": [0, 64], "max_parallelism": 128, "state_kinds": {"count": "value"},
     "shared":  [{"name": "000011.sst", "file": "../shared/<uid>-0-000011-g1-<hex>.sst",
                  "size": 13241, "checksum": "crc32:...", "uploaded": true}, ...],
     "private": [{"name": "MANIFEST-000005", "file": "<uid>-0-MANIFEST-000005-g1-<hex>",
                  "size": 312, "checksum": "crc32:..."}, ...]}

`name` is the file's name inside the RocksDB checkpoint; `file` is where it is stored, relative
to the checkpoint directory (`..` leads to the job directory's `shared/`), or absolute.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

from tidegate.state.shared_registry import CheckpointReferences, SharedReference

HANDLE_KEY = "incremental"
HANDLE_VERSION = 1
SHARED_DIR_NAME = "shared"


def resolve(directory: str, file: str) -> str:
    """The absolute path or URI of `file`, stored relative to `directory` (or absolute)."""
    if "://" in file or file.startswith("/"):
        return file
    scheme, sep, rest = directory.rstrip("/").partition("://")
    if not sep:
        return posixpath.normpath(posixpath.join(directory, file))
    return f"{scheme}://{posixpath.normpath(posixpath.join('/' + rest, file)).lstrip('/')}"


def relative_to(directory: str, path: str) -> str:
    """`path` relative to `directory` when both are on one filesystem (else `path` itself)."""
    d_scheme, d_sep, d_rest = directory.rstrip("/").partition("://")
    p_scheme, p_sep, p_rest = path.partition("://")
    if d_sep != p_sep or (d_sep and d_scheme != p_scheme):
        return path
    if not d_sep:
        return posixpath.relpath(path, directory)
    if d_rest.split("/", 1)[0] != p_rest.split("/", 1)[0]:  # another bucket
        return path
    return posixpath.relpath("/" + p_rest, "/" + d_rest)


def uploaded_bytes(handle: Mapping[str, Any]) -> int:
    """Bytes a subtask handle's incremental part wrote in its checkpoint (new shared files and
    private files; reused files are not counted): the checkpoint's incremental size."""
    inc = handle.get(HANDLE_KEY) or {}
    shared = sum(int(f["size"]) for f in inc.get("shared", ()) if f.get("uploaded"))
    return shared + sum(int(f["size"]) for f in inc.get("private", ()))


def shared_dir(job_dir: str) -> str:
    return f"{job_dir.rstrip('/')}/{SHARED_DIR_NAME}"


def incremental_handles(metadata: Mapping[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(uid, subtask, incremental handle) of every incremental subtask handle."""
    for uid, entry in sorted(metadata.get("operators", {}).items()):
        for subtask, handle in sorted(entry["subtasks"].items(), key=lambda kv: int(kv[0])):
            inc = handle.get(HANDLE_KEY)
            if inc is not None:
                yield uid, int(subtask), inc


def checkpoint_references(metadata: Mapping[str, Any], directory: str) -> CheckpointReferences:
    """The shared files a checkpoint's `_metadata` references (empty for full snapshots and
    savepoints), resolved against its `directory`."""
    refs: list[SharedReference] = []
    bases: dict[str, int | None] = {}
    for _uid, _subtask, inc in incremental_handles(metadata):
        backend_id = str(inc["backend_id"])
        bases[backend_id] = inc.get("base_checkpoint_id")
        for f in inc.get("shared", ()):
            path = resolve(directory, f["file"])
            refs.append(SharedReference(path, backend_id, bool(f.get("uploaded"))))
    return CheckpointReferences(int(metadata["checkpoint_id"]), tuple(refs), bases)


def state_references(checkpoint_id: int, acked_states: Mapping[Any, Any], directory: str):
    """The references of a pending checkpoint's acks (`PendingCheckpoint.acked_states`)."""
    operators: dict[str, Any] = {}
    for (_vertex, subtask), state in acked_states.items():
        for uid, handle in state.items():
            if isinstance(handle, dict) and HANDLE_KEY in handle:
                entry = operators.setdefault(uid, {"subtasks": {}})
                entry["subtasks"][str(subtask)] = handle
    return checkpoint_references(
        {"checkpoint_id": checkpoint_id, "operators": operators}, directory
    )
