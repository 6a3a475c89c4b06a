"""A checkpoint or savepoint as the state processor sees it: its operators, their states and
where each state's bytes are, read from `_metadata` (and the small operator-state sections).

Everything here runs on the driver and reads no keyed state: the keyed sections are read by
Spark tasks (reader.py), which get only file paths and index entries from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.errors import CheckpointError
from tidegate.checkpoint.metadata import CheckpointMetadata, OperatorMetadata
from tidegate.checkpoint.storage import read_checkpoint_metadata, resolve_checkpoint_path
from tidegate.common.filesystems import FileSystems
from tidegate.state.handles import StateHandle
from tidegate.state.snapshot_format import read_operator_state
from tidegate.state_processor.incremental import IncrementalSource, stored_bytes

__all__ = [
    "KEYED",
    "OPERATOR",
    "SnapshotView",
    "StateInfo",
    "StateNotFoundError",
    "UnsupportedSnapshotError",
    "state_file_path",
]

KEYED = "keyed"
OPERATOR = "operator"


class StateNotFoundError(CheckpointError, LookupError):
    """The snapshot has no operator with that uid, or the operator has no such state."""


class UnsupportedSnapshotError(CheckpointError):
    """The snapshot holds state in a form the state processor cannot read or copy."""


@dataclass(frozen=True)
class StateInfo:
    """One state of one operator in a snapshot (a row of `list_state`)."""

    uid: str
    #: the operator's name in the job that wrote the snapshot
    operator_name: str
    state_name: str
    #: "keyed" or "operator"
    scope: str
    #: keyed: value, list, map, reducing, aggregating; operator: split, union, broadcast
    kind: str
    #: the operator's parallelism when the snapshot was taken
    parallelism: int
    #: keyed: non-empty key groups of the operator (all its keyed states together; see
    #: `incremental`)
    key_groups: int
    #: keyed: bytes of the operator's key-group sections (all its keyed states together)
    size_bytes: int
    #: operator state: entries of this state over all subtasks (broadcast: of one copy)
    entries: int | None = None
    #: keyed: [start, stop) key groups of each subtask holding keyed state of the operator
    key_group_ranges: tuple[tuple[int, int], ...] = ()
    #: keyed: some subtask keeps it in incremental RocksDB files (then `key_groups` counts the
    #: key groups of those subtasks' ranges and `size_bytes` their files, shared ones included)
    incremental: bool = False


def state_file_path(directory: str, handle: StateHandle) -> str:
    """The full path or URI of the state file a handle names (names are relative)."""
    return f"{directory.rstrip('/')}/{handle.file}"


@dataclass(frozen=True)
class SnapshotView:
    """The `_metadata` of one completed checkpoint or savepoint, and its directory."""

    directory: str
    metadata: CheckpointMetadata
    #: `storage_options` for the snapshot's filesystem
    filesystems: FileSystems

    @classmethod
    def open(cls, path: str, storage_options: Mapping[str, Any] | None = None) -> SnapshotView:
        """A checkpoint (`chk-<n>`) or savepoint directory, its `_metadata` file, or a job
        directory (its latest completed checkpoint), validated as a restore validates it;
        read with fsspec's `storage_options`."""
        filesystems = FileSystems.for_urls(storage_options, path)
        directory = resolve_checkpoint_path(path, filesystems)
        return cls(directory, read_checkpoint_metadata(directory, filesystems), filesystems)

    @property
    def max_parallelism(self) -> int:
        if self.metadata.max_parallelism is None:
            raise UnsupportedSnapshotError(
                f"{self._what()} records no max parallelism in its _metadata, so its key "
                "groups cannot be interpreted; read a checkpoint or savepoint a job wrote"
            )
        return self.metadata.max_parallelism

    @property
    def operators(self) -> Mapping[str, OperatorMetadata]:
        return self.metadata.operators

    def operator(self, uid: str) -> OperatorMetadata:
        """The metadata entry of operator `uid`; StateNotFoundError lists the uids there are."""
        entry = self.operators.get(uid)
        if entry is None:
            raise StateNotFoundError(
                f"{self._what()} has no state of an operator with uid {uid!r}; it has state of "
                f"{self._describe_operators()}. Pass one of these uids (operators are matched "
                "by the uid set with .uid(...) in the job)."
            )
        return entry

    def handles(self, uid: str) -> list[tuple[int, StateHandle]]:
        """(subtask, state handle) of operator `uid`, by subtask. Incremental RocksDB handles
        are included (their keyed state is read from their RocksDB files, incremental.py);
        a handle without the index of a canonical state file is refused."""
        handles = sorted(self.operator(uid).subtasks.items())
        for subtask, handle in handles:
            if handle.index is None:
                raise UnsupportedSnapshotError(
                    f"{self._what()} holds the state of operator {uid!r} (subtask {subtask}) as "
                    f"{handle.kind or 'non-canonical'} state-backend files without the "
                    "index of a canonical state file, which the state processor cannot read. "
                    "Take a savepoint of the job (`tidegate savepoint`, or stop it with a "
                    "savepoint) and read that instead: savepoints are always canonical."
                )
        return handles

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    def incremental_sources(self, uid: str) -> list[IncrementalSource]:
        """The incremental RocksDB handles of operator `uid` (empty for canonical snapshots)."""
        return [
            IncrementalSource(subtask, self.directory, self.checkpoint_id, handle, self.filesystems)
            for subtask, handle in self.handles(uid)
            if handle.incremental is not None
        ]

    def keyed_kinds(self, uid: str) -> dict[str, str]:
        """Keyed state name -> kind, for operator `uid` (from the indexes in `_metadata`, and
        from the incremental handles' `state_kinds`)."""
        kinds: dict[str, str] = {}
        for _, handle in self.handles(uid):
            kinds.update(handle.state_kinds)
        return kinds

    def operator_state(self, uid: str) -> list[tuple[int, dict[str, tuple[str, list[Any]]]]]:
        """(subtask, {name: (mode, entries)}) of operator `uid` (operator state is small: one
        section per subtask, read here on the driver)."""
        found = []
        for subtask, handle in self.handles(uid):
            if handle.index is None or handle.index.operator_offset is None:
                continue
            path = state_file_path(self.directory, handle)
            with self.filesystems.open(path) as f:
                found.append((subtask, read_operator_state(f, handle.index)))
        return found

    def operator_modes(self, uid: str) -> dict[str, str]:
        """Operator state name -> mode (split, union, broadcast), for operator `uid`."""
        return {
            name: str(mode)
            for _, states in self.operator_state(uid)
            for name, (mode, _entries) in states.items()
        }

    def list_state(self) -> list[StateInfo]:
        """Every state of every operator, by uid then scope then name."""
        found = []
        for uid in sorted(self.operators):
            entry = self.operators[uid]
            key_groups, size, ranges, incremental = self._keyed_extent(uid)
            for name, kind in sorted(self.keyed_kinds(uid).items()):
                found.append(
                    StateInfo(
                        uid,
                        entry.name,
                        name,
                        KEYED,
                        kind,
                        entry.parallelism,
                        key_groups=key_groups,
                        size_bytes=size,
                        key_group_ranges=ranges,
                        incremental=incremental,
                    )
                )
            entries: dict[str, tuple[str, int]] = {}
            for _, states in self.operator_state(uid):
                for name, (mode, values) in states.items():
                    _mode, count = entries.get(name, (mode, 0))
                    if mode == "broadcast" and name in entries:
                        continue  # every subtask holds the same copy: count one
                    entries[name] = (str(mode), count + len(values))
            for name, (mode, count) in sorted(entries.items()):
                found.append(
                    StateInfo(
                        uid,
                        entry.name,
                        name,
                        OPERATOR,
                        mode,
                        entry.parallelism,
                        key_groups=0,
                        size_bytes=0,
                        entries=count,
                    )
                )
        return found

    def _keyed_extent(self, uid: str) -> tuple[int, int, tuple[tuple[int, int], ...], bool]:
        """(key groups, bytes, key-group ranges, any incremental) of operator `uid`'s keyed
        state. An incremental handle counts every key group of its range and the bytes of its
        RocksDB files: which groups are empty is only known by reading those files."""
        key_groups = size = 0
        ranges: list[tuple[int, int]] = []
        incremental = False
        for _, handle in self.handles(uid):
            if handle.incremental is not None:
                r = handle.incremental.key_group_range
                incremental = True
                key_groups += len(r)
                size += stored_bytes(handle)
                ranges.append((r.start, r.stop))
                continue
            sections = handle.index.key_group_offsets
            key_groups += len(sections)
            size += sum(length for _off, length in sections.values())
            if sections and handle.key_group_range is not None:
                ranges.append((handle.key_group_range.start, handle.key_group_range.stop))
        return key_groups, size, tuple(ranges), incremental

    def require_keyed_state(self, uid: str, state_name: str) -> str:
        """The kind of keyed state `state_name` of `uid`; StateNotFoundError names the
        states the operator has."""
        kinds = self.keyed_kinds(uid)
        if state_name not in kinds:
            raise StateNotFoundError(
                f"operator {uid!r} in {self._what()} has no keyed state named {state_name!r}; "
                f"it has {self._describe_states(uid)}."
            )
        return kinds[state_name]

    def require_operator_state(self, uid: str, state_name: str) -> str:
        """The mode of operator state `state_name` of `uid`, or StateNotFoundError."""
        modes = self.operator_modes(uid)
        if state_name not in modes:
            raise StateNotFoundError(
                f"operator {uid!r} in {self._what()} has no operator state named "
                f"{state_name!r}; it has {self._describe_states(uid)}."
            )
        return modes[state_name]

    def _describe_states(self, uid: str) -> str:
        states = [f"keyed {k} state {n!r}" for n, k in sorted(self.keyed_kinds(uid).items())]
        states += [f"{m} operator state {n!r}" for n, m in sorted(self.operator_modes(uid).items())]
        return ", ".join(states) if states else "no state at all"

    def _describe_operators(self) -> str:
        if not self.operators:
            return "no operator at all"
        return ", ".join(f"{uid!r} ({entry.name})" for uid, entry in sorted(self.operators.items()))

    def _what(self) -> str:
        kind = "savepoint" if self.metadata.is_savepoint else "checkpoint"
        return f"the {kind} {self.directory}"
