"""Incremental keyed-state handles (`state/handles.py: IncrementalHandle`): where their files
are, and the shared-file references the SharedStateRegistry counts (the format is in
docs/checkpoint-format.md).

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
from collections.abc import Iterable, Mapping
from typing import Any

from tidegate.state.handles import StateHandle
from tidegate.state.shared_registry import CheckpointReferences, SharedReference

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


def shared_dir(job_dir: str) -> str:
    return f"{job_dir.rstrip('/')}/{SHARED_DIR_NAME}"


def checkpoint_references(
    checkpoint_id: int, handles: Iterable[StateHandle], directory: str
) -> CheckpointReferences:
    """The shared files the state `handles` of checkpoint `checkpoint_id` reference (none for
    full snapshots and savepoints), resolved against its `directory`."""
    refs: list[SharedReference] = []
    bases: dict[str, int | None] = {}
    for handle in handles:
        inc = handle.incremental
        if inc is None:
            continue
        bases[inc.backend_id] = inc.base_checkpoint_id
        for f in inc.shared:
            refs.append(
                SharedReference(resolve(directory, f.file), inc.backend_id, bool(f.uploaded))
            )
    return CheckpointReferences(checkpoint_id, tuple(refs), bases)


def state_references(
    checkpoint_id: int, acked_states: Mapping[Any, Mapping[str, Any]], directory: str
) -> CheckpointReferences:
    """The references of a pending checkpoint's acks (`PendingCheckpoint.acked_states`)."""
    handles = [
        h for state in acked_states.values() for h in state.values() if isinstance(h, StateHandle)
    ]
    return checkpoint_references(checkpoint_id, handles, directory)
