"""The versioned `_metadata` file format of a completed checkpoint or savepoint.

The file is UTF-8 JSON with a fixed envelope (format version 2)::

    {"format": "tidegate-checkpoint", "version": 2, "checksum": "crc32:...",
     "job_id": ..., "checkpoint_id": ..., "timestamp_ms": ..., "generation": ...,
     "operators": ...}

What `operators` (and any further keys) hold is decided by the JobMaster; this module owns the
envelope only: it stamps `format`, `version` and `checksum` on write and validates them on read,
so a reader never acts on a file that is damaged, written by something else, or written by a
version it does not know.

`checksum` covers the file's content: it is the checksum of the document without `checksum`,
serialised canonically (`canonical_json`), so re-indenting the file keeps it valid while any
change of a value is detected.
"""

from __future__ import annotations

import json
from typing import Any

from tidegate.checkpoint.errors import CorruptCheckpointError, UnsupportedFormatVersionError
from tidegate.state.checksums import checksum_of, is_known_checksum

FORMAT_NAME = "tidegate-checkpoint"
FORMAT_VERSION = 2
#: the version of a checkpoint with incremental keyed state (rocksdb): a version-2 reader would
#: not see that state, so it must refuse the file; full checkpoints and savepoints stay version 2
INCREMENTAL_FORMAT_VERSION = 3
READABLE_VERSIONS = (FORMAT_VERSION, INCREMENTAL_FORMAT_VERSION)
METADATA_FILE_NAME = "_metadata"

#: keys the caller must supply; `format`, `version` and `checksum` are added by `encode_metadata`
_CONTENT_KEYS: dict[str, type] = {
    "job_id": str,
    "checkpoint_id": int,
    "timestamp_ms": int,
    #: the writer generation (checkpoint/fencing.py) of the attempt that completed it
    "generation": int,
    "operators": object,
}
_ENVELOPE_KEYS = ("format", "version", "checksum")
REQUIRED_KEYS = (*_ENVELOPE_KEYS, *_CONTENT_KEYS)


def canonical_json(document: dict[str, Any]) -> bytes:
    """The canonical serialisation the `_metadata` checksum is computed over: compact JSON,
    keys sorted, ASCII only."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """Serialise `metadata` with the format envelope; raise ValueError if a required key is
    missing or has the wrong type (a bug in the caller: never write a file we could not read)."""
    if metadata.get("format", FORMAT_NAME) != FORMAT_NAME:
        raise ValueError(f"metadata 'format' must be {FORMAT_NAME!r}, got {metadata['format']!r}")
    if metadata.get("version", FORMAT_VERSION) not in READABLE_VERSIONS:
        raise ValueError(
            f"metadata 'version' must be {FORMAT_VERSION!r}, got {metadata['version']!r}"
        )
    if "checksum" in metadata:
        raise ValueError("metadata 'checksum' is computed when it is encoded; do not pass one")
    problems = _content_problems(metadata)
    if problems:
        raise ValueError(f"cannot encode checkpoint metadata: {'; '.join(problems)}")
    try:
        # the checksum is over what a reader will decode (JSON turns int keys into strings)
        document = json.loads(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint metadata is not JSON-serialisable: {exc}") from exc
    document.update(format=FORMAT_NAME, version=_version_of(document))
    document["checksum"] = checksum_of(canonical_json(document))
    return json.dumps(document, sort_keys=True, indent=1).encode("utf-8")


def decode_metadata(data: bytes, path: str) -> dict[str, Any]:
    """Parse and validate the `_metadata` bytes read from `path`; the result has no `checksum`.

    Raises CorruptCheckpointError naming `path` when the bytes are not JSON, not a tidegate
    checkpoint, damaged (the checksum does not match) or lack a required key, and
    UnsupportedFormatVersionError when the format version is not this tidegate's.
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
    _check_version(document.get("version"), path)
    recorded = document.pop("checksum", None)
    if not is_known_checksum(recorded):
        raise CorruptCheckpointError(
            f"{path} has no valid checksum (got {recorded!r}); the file is damaged: restore "
            "from another checkpoint."
        )
    actual = checksum_of(canonical_json(document))
    if actual != recorded:
        raise CorruptCheckpointError(
            f"{path} is damaged: its content does not match its checksum ({recorded} recorded, "
            f"{actual} computed). Restore from another checkpoint."
        )
    problems = _content_problems(document)
    if problems:
        raise CorruptCheckpointError(
            f"{path} is incomplete checkpoint metadata ({'; '.join(problems)}); the file is "
            "damaged: restore from another checkpoint."
        )
    return document


def _version_of(document: dict[str, Any]) -> int:
    """3 if any operator subtask's handle holds incremental keyed state, else 2."""
    operators = document.get("operators")
    if isinstance(operators, dict):
        for entry in operators.values():
            subtasks = entry.get("subtasks", {}) if isinstance(entry, dict) else {}
            if any(isinstance(h, dict) and "incremental" in h for h in subtasks.values()):
                return INCREMENTAL_FORMAT_VERSION
    return FORMAT_VERSION


def _check_version(version: Any, path: str) -> None:
    if type(version) is not int:
        raise CorruptCheckpointError(
            f"{path} has no valid format version (got {version!r}); the file is damaged: "
            "restore from another checkpoint."
        )
    if version in READABLE_VERSIONS:
        return
    if version > INCREMENTAL_FORMAT_VERSION:
        hint = "it was written by a newer tidegate: upgrade tidegate to restore it"
    elif version == 1:
        hint = (
            "version 1 was written by a pre-release tidegate without checksums and is not "
            "supported: start the job without it"
        )
    else:
        hint = "this version is not supported"
    raise UnsupportedFormatVersionError(
        f"{path} uses checkpoint format version {version}, but this tidegate reads "
        f"version {FORMAT_VERSION}; {hint} (it also reads version {INCREMENTAL_FORMAT_VERSION}: "
        "checkpoints with incremental keyed state)."
    )


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
