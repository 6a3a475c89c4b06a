"""State handles: what a checkpoint's `_metadata` records about one subtask's state, typed.

A subtask of a stateful operator writes one state file (`StateHandle`: its name relative to
the checkpoint directory, size, checksum, the file's index and, for keyed operators, the key
groups); with incremental RocksDB checkpoints the handle also lists the RocksDB files
(`IncrementalHandle`); an unaligned checkpoint adds the subtask's in-flight records
(`ChannelStateHandle`). The JSON layout is in docs/checkpoint-format.md; `to_json` and
`from_json` are the only code that knows it (`checkpoint/metadata.py` composes them).
`from_json` raises KeyError, TypeError or ValueError on malformed input; the metadata decoder
turns those into a CorruptCheckpointError naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.state.snapshot_format import StateFileIndex

INCREMENTAL_HANDLE_VERSION = 1
#: `IncrementalHandle.backend`: RocksDB files (SST files shared, the rest private)
ROCKSDB_FILES = "rocksdb"
#: `IncrementalHandle.backend`: the hashmap backend's chain of state files (state/heap_changelog)
HEAP_CHANGELOG = "hashmap"


def file_safe(name: str) -> str:
    """`name` (an operator uid, a job id) as part of a file name: characters other than
    letters, digits, `-`, `_` and `.` become `_`, at most 80 (docs/checkpoint-format.md)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


def _range_json(r: range) -> list[int]:
    return [r.start, r.stop]


def _range(value: Any) -> range:
    """A key-group range `[start, stop]` (stop exclusive), non-empty, from 0 up."""
    start, stop = value
    if not 0 <= int(start) < int(stop):
        raise ValueError(f"{value!r} is not a key-group range [first, last + 1]")
    return range(int(start), int(stop))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, kw_only=True)
class StoredFile:
    """A file of a checkpoint: where it is (relative to the checkpoint directory, or
    absolute), and the size and checksum it was written with (None: not recorded)."""

    file: str
    size: int | None = None
    checksum: str | None = None

    def file_json(self) -> dict[str, Any]:
        return {"file": self.file, "size": self.size, "checksum": self.checksum}

    @staticmethod
    def fields_from(data: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "file": str(data["file"]),
            "size": _optional_int(data.get("size")),
            "checksum": data.get("checksum"),
        }


@dataclass(frozen=True, kw_only=True)
class IncrementalFile(StoredFile):
    """A file of a RocksDB checkpoint: `name` inside the RocksDB checkpoint directory. A shared
    (SST) file has `uploaded`: True if this checkpoint uploaded it, False if it reuses one an
    earlier checkpoint uploaded; a private file has None."""

    name: str
    uploaded: bool | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, **self.file_json()}
        if self.uploaded is not None:
            data["uploaded"] = self.uploaded
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IncrementalFile:
        uploaded = data.get("uploaded")
        return cls(
            **cls.fields_from(data),
            name=str(data["name"]),
            uploaded=None if uploaded is None else bool(uploaded),
        )


@dataclass(frozen=True)
class IncrementalHandle:
    """The files of one subtask's incremental checkpoint: RocksDB files
    (state/rocksdb_incremental) or the hashmap backend's materialized state file and changelog
    files (state/heap_changelog), as `backend` says."""

    #: the RocksDB instance the files belong to (its uploads are shared by its checkpoints)
    backend_id: str
    #: the completed checkpoint whose files this one reuses (None: the first)
    base_checkpoint_id: int | None
    key_group_range: range
    max_parallelism: int
    state_kinds: Mapping[str, str]
    shared: tuple[IncrementalFile, ...]
    private: tuple[IncrementalFile, ...]
    version: int = INCREMENTAL_HANDLE_VERSION
    #: what the files are: ROCKSDB_FILES or HEAP_CHANGELOG
    backend: str = ROCKSDB_FILES

    @property
    def files(self) -> tuple[IncrementalFile, ...]:
        return (*self.shared, *self.private)

    @property
    def uploaded_bytes(self) -> int:
        """Bytes this checkpoint wrote (new shared files and private files; reused files are
        not counted): the checkpoint's incremental size."""
        new = [f for f in self.shared if f.uploaded]
        return sum(f.size or 0 for f in (*new, *self.private))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "backend_id": self.backend_id,
            "base_checkpoint_id": self.base_checkpoint_id,
            "key_group_range": _range_json(self.key_group_range),
            "max_parallelism": self.max_parallelism,
            "state_kinds": dict(self.state_kinds),
            "shared": [f.to_json() for f in self.shared],
            "private": [f.to_json() for f in self.private],
            **({} if self.backend == ROCKSDB_FILES else {"backend": self.backend}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IncrementalHandle:
        backend = str(data.get("backend", ROCKSDB_FILES))
        if backend not in (ROCKSDB_FILES, HEAP_CHANGELOG):
            raise ValueError(f"unknown incremental state {backend!r} (a newer tidegate wrote it)")
        return cls(
            backend_id=str(data["backend_id"]),
            base_checkpoint_id=_optional_int(data.get("base_checkpoint_id")),
            key_group_range=_range(data["key_group_range"]),
            max_parallelism=int(data["max_parallelism"]),
            state_kinds=dict(data.get("state_kinds") or {}),
            shared=tuple(IncrementalFile.from_json(f) for f in data.get("shared", ())),
            private=tuple(IncrementalFile.from_json(f) for f in data.get("private", ())),
            version=int(data.get("version", INCREMENTAL_HANDLE_VERSION)),
            backend=backend,
        )


@dataclass(frozen=True, kw_only=True)
class StateHandle(StoredFile):
    """One operator subtask's state file in a checkpoint."""

    #: where the sections of the state file are; None: the handle is not a canonical state
    #: file (written by another tidegate version or tool), which nothing here can read
    index: StateFileIndex | None
    #: the subtask's key groups (keyed operators only)
    key_group_range: range | None = None
    #: incremental RocksDB state: its files (the state file then holds operator state only)
    incremental: IncrementalHandle | None = None
    #: a handle of another kind than a canonical state file (written by a future tidegate);
    #: None for every handle this version writes
    kind: str | None = None

    @property
    def written_bytes(self) -> int:
        """Bytes this subtask wrote in its checkpoint: the state file and new RocksDB files."""
        return (self.size or 0) + (self.incremental.uploaded_bytes if self.incremental else 0)

    @property
    def state_kinds(self) -> Mapping[str, str]:
        """Keyed state name -> kind, from the state file or the incremental handle."""
        if self.index is not None and self.index.state_kinds:
            return self.index.state_kinds
        return self.incremental.state_kinds if self.incremental is not None else {}

    def to_json(self) -> dict[str, Any]:
        data = self.file_json()
        if self.index is not None:
            data["index"] = self.index.to_json()
        if self.key_group_range is not None:
            data["key_group_range"] = _range_json(self.key_group_range)
        if self.incremental is not None:
            data["incremental"] = self.incremental.to_json()
        if self.kind is not None:
            data["type"] = self.kind
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateHandle:
        kg = data.get("key_group_range")
        inc = data.get("incremental")
        return cls(
            **cls.fields_from(data),
            index=StateFileIndex.from_json(data["index"]) if "index" in data else None,
            key_group_range=None if not kg else _range(kg),
            incremental=None if inc is None else IncrementalHandle.from_json(inc),
            kind=data.get("type"),
        )


@dataclass(frozen=True, kw_only=True)
class ChannelStateHandle(StoredFile):
    """The in-flight records one subtask persisted in an unaligned checkpoint."""

    frames: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**self.file_json(), "frames": self.frames}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelStateHandle:
        return cls(**cls.fields_from(data), frames=int(data.get("frames", 0)))
