"""A completed checkpoint's or savepoint's `_metadata`: its typed model and its versioned file
format. No other module reads or writes the JSON document; they use `CheckpointMetadata`.

The file is UTF-8 JSON with a fixed envelope (format version 2)::

    {"format": "tidegate-checkpoint", "version": 2, "checksum": "crc32:...",
     "job_id": ..., "checkpoint_id": ..., "timestamp_ms": ..., "generation": ...,
     "operators": ...}

and the content of docs/checkpoint-format.md: per operator uid its name, parallelism and the
state handle of each subtask (`state/handles.py`), the channel state of unaligned checkpoints,
and the checkpoint's facts (job, times, attempt, max parallelism, size). `encode_metadata`
stamps `format`, `version` and `checksum`; `decode_metadata` validates them and the content,
so a reader never acts on a file that is damaged, written by something else, or written by a
version it does not know.

`checksum` covers the file's content: it is the checksum of the document without `checksum`,
serialised canonically (`canonical_json`), so re-indenting the file keeps it valid while any
change of a value is detected.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.errors import (
    CheckpointIntegrityError,
    CorruptCheckpointError,
    UnsupportedFormatVersionError,
)
from tidegate.state.checksums import checksum_of, is_known_checksum
from tidegate.state.handles import (
    HEAP_CHANGELOG,
    ChannelStateHandle,
    IncrementalHandle,
    StateHandle,
)
from tidegate.state.heap_changelog import CHANGELOG
from tidegate.state.incremental_handles import checkpoint_references
from tidegate.state.shared_registry import CheckpointReferences

FORMAT_NAME = "tidegate-checkpoint"
FORMAT_VERSION = 2
#: the version of a checkpoint with incremental keyed state (rocksdb): a version-2 reader would
#: not see that state, so it must refuse the file; full checkpoints and savepoints stay version 2
INCREMENTAL_FORMAT_VERSION = 3
#: the version of a checkpoint with incremental hashmap state (a changelog chain): a version-3
#: reader would take its files for RocksDB files, so it must refuse the file
CHANGELOG_FORMAT_VERSION = 4
#: the version of a checkpoint whose rocksdb state has changelogs (state/rocksdb_changelog): a
#: version-4 reader would restore the RocksDB files without them, so it must refuse the file
ROCKSDB_CHANGELOG_FORMAT_VERSION = 5
READABLE_VERSIONS = (
    FORMAT_VERSION,
    INCREMENTAL_FORMAT_VERSION,
    CHANGELOG_FORMAT_VERSION,
    ROCKSDB_CHANGELOG_FORMAT_VERSION,
)
METADATA_FILE_NAME = "_metadata"

#: keys every document has besides the envelope, with their JSON types (checked when decoding,
#: so that a damaged file is named as such before its content is interpreted)
_CONTENT_KEYS: dict[str, type] = {
    "job_id": str,
    "checkpoint_id": int,
    "timestamp_ms": int,
    #: the writer generation (checkpoint/fencing.py) of the attempt that completed it
    "generation": int,
    "operators": object,
}


@dataclass(frozen=True)
class OperatorMetadata:
    """The state of one operator (by uid) in a checkpoint."""

    name: str
    #: the operator's parallelism when the checkpoint was taken
    parallelism: int
    #: subtask index -> its state file; subtasks without state have no entry
    subtasks: Mapping[int, StateHandle] = field(default_factory=dict)

    def handles(self) -> list[StateHandle]:
        """The subtasks' handles in subtask order."""
        return [h for _, h in sorted(self.subtasks.items())]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parallelism": self.parallelism,
            "subtasks": {str(i): h.to_json() for i, h in sorted(self.subtasks.items())},
        }

    @classmethod
    def from_json(cls, uid: str, data: Mapping[str, Any]) -> OperatorMetadata:
        parallelism = int(data["parallelism"])
        return cls(
            name=str(data.get("name", uid)),
            parallelism=parallelism,
            subtasks={
                _subtask(i, parallelism): StateHandle.from_json(h)
                for i, h in data["subtasks"].items()
            },
        )


def _subtask(index: str, parallelism: int) -> int:
    """The subtask index `index` (a JSON key) of an operator of `parallelism` subtasks."""
    subtask = int(index)
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {index!r} of an operator of parallelism {parallelism}")
    return subtask


@dataclass(frozen=True)
class ChannelStateMetadata:
    """The in-flight records of one vertex (by its head operator's uid) in an unaligned
    checkpoint: they restore only into the same parallelism and inputs."""

    parallelism: int
    #: subtask 0's input channels as (edge id, upstream subtask)
    inputs: tuple[tuple[int, int], ...]
    subtasks: Mapping[int, ChannelStateHandle] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "parallelism": self.parallelism,
            "inputs": [list(c) for c in self.inputs],
            "subtasks": {str(i): h.to_json() for i, h in sorted(self.subtasks.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelStateMetadata:
        parallelism = int(data["parallelism"])
        return cls(
            parallelism=parallelism,
            inputs=tuple((int(e), int(s)) for e, s in data.get("inputs", ())),
            subtasks={
                _subtask(i, parallelism): ChannelStateHandle.from_json(h)
                for i, h in data["subtasks"].items()
            },
        )


@dataclass(frozen=True)
class RewrittenFrom:
    """A savepoint written by `tidegate rewrite-savepoint`: the snapshot it was made from."""

    path: str
    checkpoint_id: int
    max_parallelism: int | None
    rewrite_id: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewrittenFrom:
        return cls(
            path=str(data["path"]),
            checkpoint_id=int(data["checkpoint_id"]),
            max_parallelism=None
            if data.get("max_parallelism") is None
            else int(data["max_parallelism"]),
            rewrite_id=str(data["rewrite_id"]),
        )


@dataclass(frozen=True)
class CheckpointMetadata:
    """Everything `_metadata` records about a completed checkpoint or savepoint."""

    job_id: str
    checkpoint_id: int
    #: wall-clock ms when the checkpoint was triggered
    timestamp_ms: int
    #: the writer generation (checkpoint/fencing.py) of the attempt that completed it
    generation: int
    #: operator uid -> its state; operators without state are absent
    operators: Mapping[str, OperatorMetadata] = field(default_factory=dict)
    job_name: str | None = None
    #: wall-clock ms when `_metadata` was written (None: not recorded)
    completed_ms: int | None = None
    duration_ms: int | None = None
    is_savepoint: bool = False
    #: the job attempt that took it (0 before the first restart)
    attempt: int | None = None
    #: the number of key groups, fixed for every later restore (None: not recorded)
    max_parallelism: int | None = None
    #: the bytes the checkpoint's files hold (None: not recorded)
    size_bytes: int | None = None
    #: head operator uid -> in-flight records (unaligned checkpoints)
    channel_state: Mapping[str, ChannelStateMetadata] = field(default_factory=dict)
    rewritten_from: RewrittenFrom | None = None

    @property
    def is_incremental(self) -> bool:
        """Holds incremental keyed state (format version 3, 4 with hashmap changelog chains, 5
        with rocksdb changelogs): shares files with others."""
        return any(self.incremental_handles())

    @property
    def format_version(self) -> int:
        handles = [inc for _, _, inc in self.incremental_handles()]
        if any(
            inc.backend != HEAP_CHANGELOG and any(f.name.startswith(CHANGELOG) for f in inc.shared)
            for inc in handles
        ):
            return ROCKSDB_CHANGELOG_FORMAT_VERSION
        backends = {inc.backend for inc in handles}
        if HEAP_CHANGELOG in backends:
            return CHANGELOG_FORMAT_VERSION
        return INCREMENTAL_FORMAT_VERSION if backends else FORMAT_VERSION

    @property
    def completed_or_triggered_ms(self) -> int:
        return self.timestamp_ms if self.completed_ms is None else self.completed_ms

    def state_handles(self) -> Iterator[tuple[str, int, StateHandle]]:
        """(uid, subtask, handle) of every operator subtask's state, by uid and subtask."""
        for uid, entry in sorted(self.operators.items()):
            for subtask, handle in sorted(entry.subtasks.items()):
                yield uid, subtask, handle

    def incremental_handles(self) -> Iterator[tuple[str, int, IncrementalHandle]]:
        """(uid, subtask, incremental part) of every incremental subtask handle."""
        for uid, subtask, handle in self.state_handles():
            if handle.incremental is not None:
                yield uid, subtask, handle.incremental

    def references(self, directory: str) -> CheckpointReferences:
        """The shared files this checkpoint (in `directory`) references."""
        handles = (h for _, _, h in self.state_handles())
        return checkpoint_references(self.checkpoint_id, handles, directory)

    def written_bytes(self) -> int:
        """The bytes of the files this checkpoint wrote (its state files, new RocksDB files,
        channel state): what `size_bytes` records."""
        state = sum(h.written_bytes for _, _, h in self.state_handles())
        channels = sum(
            h.size or 0 for entry in self.channel_state.values() for h in entry.subtasks.values()
        )
        return state + channels

    def replace(self, **changes: Any) -> CheckpointMetadata:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The document without the envelope (`format`, `version`, `checksum`)."""
        document: dict[str, Any] = {
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "timestamp_ms": self.timestamp_ms,
            "generation": self.generation,
            "is_savepoint": self.is_savepoint,
            "operators": {uid: op.to_json() for uid, op in sorted(self.operators.items())},
            "channel_state": {
                uid: entry.to_json() for uid, entry in sorted(self.channel_state.items())
            },
        }
        for key in _OPTIONAL_KEYS:
            if getattr(self, key) is not None:
                document[key] = getattr(self, key)
        if self.rewritten_from is not None:
            document["rewritten_from"] = self.rewritten_from.to_json()
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> CheckpointMetadata:
        """The model of a decoded document; raises KeyError, TypeError or ValueError when it
        is malformed (`decode_metadata` reports those as a damaged file)."""
        rewritten = document.get("rewritten_from")
        return cls(
            job_id=str(document["job_id"]),
            checkpoint_id=int(document["checkpoint_id"]),
            timestamp_ms=int(document["timestamp_ms"]),
            generation=int(document["generation"]),
            operators={
                uid: OperatorMetadata.from_json(uid, entry)
                for uid, entry in document["operators"].items()
            },
            is_savepoint=bool(document.get("is_savepoint", False)),
            channel_state={
                uid: ChannelStateMetadata.from_json(entry)
                for uid, entry in (document.get("channel_state") or {}).items()
            },
            rewritten_from=None if rewritten is None else RewrittenFrom.from_json(rewritten),
            **{key: _optional(document, key) for key in _OPTIONAL_KEYS},
        )


#: optional scalar keys, written when known
_OPTIONAL_KEYS = (
    "job_name",
    "completed_ms",
    "duration_ms",
    "attempt",
    "max_parallelism",
    "size_bytes",
)


def _optional(document: Mapping[str, Any], key: str) -> Any:
    value = document.get(key)
    if value is None or key == "job_name":
        return value
    return int(value)


def canonical_json(document: dict[str, Any]) -> bytes:
    """The canonical serialisation the `_metadata` checksum is computed over: compact JSON,
    keys sorted, ASCII only."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def encode_metadata(metadata: CheckpointMetadata) -> bytes:
    """Serialise `metadata` with the format envelope."""
    try:
        # the checksum is over what a reader will decode (JSON turns int keys into strings)
        document = json.loads(json.dumps(metadata.to_json(), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint metadata is not JSON-serialisable: {exc}") from exc
    document.update(format=FORMAT_NAME, version=metadata.format_version)
    document["checksum"] = checksum_of(canonical_json(document))
    return json.dumps(document, sort_keys=True, indent=1).encode("utf-8")


def decode_metadata(data: bytes, path: str) -> CheckpointMetadata:
    """Parse and validate the `_metadata` bytes read from `path`.

    Raises CorruptCheckpointError naming `path` when the bytes are not JSON, not a tidegate
    checkpoint, damaged (the checksum does not match) or lack a required key, and
    UnsupportedFormatVersionError when the format version is not this tidegate's.
    """
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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
    try:
        return CheckpointMetadata.from_json(document)
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,  # int(1e999): JSON allows it
        RecursionError,
        CheckpointIntegrityError,
    ) as exc:
        raise CorruptCheckpointError(
            f"{path} holds malformed checkpoint metadata ({type(exc).__name__}: {exc}); the "
            "file is damaged or was not written by this tidegate: restore from another "
            "checkpoint."
        ) from exc


def _check_version(version: Any, path: str) -> None:
    if type(version) is not int:
        raise CorruptCheckpointError(
            f"{path} has no valid format version (got {version!r}); the file is damaged: "
            "restore from another checkpoint."
        )
    if version in READABLE_VERSIONS:
        return
    if version > max(READABLE_VERSIONS):
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
        f"version {FORMAT_VERSION}; {hint} (it also reads versions {INCREMENTAL_FORMAT_VERSION} "
        f"and {CHANGELOG_FORMAT_VERSION}: checkpoints with incremental keyed state)."
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
