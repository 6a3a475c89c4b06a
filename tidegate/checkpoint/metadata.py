"""The versioned `_metadata` file format of a completed checkpoint or savepoint.

The file is UTF-8 JSON with a fixed envelope::

    {"format": "tidegate-checkpoint", "version": 1, "job_id": ..., "checkpoint_id": ...,
     "timestamp_ms": ..., "operators": ...}

What `operators` (and any further keys) hold is decided by the JobMaster; this module owns the
envelope only: it stamps `format`/`version` on write and validates the envelope on read, so a
reader never acts on a file written by something else or by a newer, incompatible version.
"""

from __future__ import annotations

import json
from typing import Any

from tidegate.checkpoint.errors import CorruptCheckpointError

FORMAT_NAME = "tidegate-checkpoint"
FORMAT_VERSION = 1
METADATA_FILE_NAME = "_metadata"

#: keys the caller must supply; `format` and `version` are added by `encode_metadata`
_CONTENT_KEYS: dict[str, type] = {
    "job_id": str,
    "checkpoint_id": int,
    "timestamp_ms": int,
    "operators": object,
}
REQUIRED_KEYS = ("format", "version", *_CONTENT_KEYS)


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """Serialise `metadata` with the format envelope; raise ValueError if a required key is
    missing or has the wrong type (a bug in the caller: never write a file we could not read)."""
    for key in ("format", "version"):
        expected = FORMAT_NAME if key == "format" else FORMAT_VERSION
        if key in metadata and metadata[key] != expected:
            raise ValueError(f"metadata {key!r} must be {expected!r}, got {metadata[key]!r}")
    problems = _content_problems(metadata)
    if problems:
        raise ValueError(f"cannot encode checkpoint metadata: {'; '.join(problems)}")
    document = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **metadata}
    try:
        text = json.dumps(document, sort_keys=True, indent=1, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint metadata is not JSON-serialisable: {exc}") from exc
    return text.encode("utf-8")


def decode_metadata(data: bytes, path: str) -> dict[str, Any]:
    """Parse and validate the `_metadata` bytes read from `path`.

    Raises CorruptCheckpointError naming `path` when the bytes are not JSON, not a tidegate
    checkpoint, of an unknown version, or lack a required key.
    """
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(
            f"{path} is not valid checkpoint metadata (not UTF-8 JSON: {exc}). The file is "
            "damaged or was not written by tidegate; restore from another checkpoint."
        ) from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise CorruptCheckpointError(
            f'{path} is not a tidegate checkpoint (expected "format": "{FORMAT_NAME}"). '
            "Point the restore at the chk-<n> directory or _metadata file of a tidegate job."
        )
    version = document.get("version")
    if type(version) is not int:
        raise CorruptCheckpointError(
            f"{path} has no valid format version (got {version!r}); the file is damaged: "
            "restore from another checkpoint."
        )
    if version != FORMAT_VERSION:
        hint = (
            "it was written by a newer tidegate: upgrade tidegate to restore it"
            if version > FORMAT_VERSION
            else "this version is not supported"
        )
        raise CorruptCheckpointError(
            f"{path} uses checkpoint format version {version}, but this tidegate reads "
            f"version {FORMAT_VERSION}; {hint}."
        )
    problems = _content_problems(document)
    if problems:
        raise CorruptCheckpointError(
            f"{path} is incomplete checkpoint metadata ({'; '.join(problems)}); the file is "
            "damaged: restore from another checkpoint."
        )
    return document


def _content_problems(metadata: dict[str, Any]) -> list[str]:
    problems = []
    for key, expected in _CONTENT_KEYS.items():
        if key not in metadata:
            problems.append(f"missing key {key!r}")
        elif expected is not object and (
            not isinstance(metadata[key], expected) or isinstance(metadata[key], bool)
        ):
            problems.append(f"{key!r} must be {expected.__name__}, got {metadata[key]!r}")
    return problems
