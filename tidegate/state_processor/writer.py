"""Writing savepoints from DataFrames (Flink's SavepointWriter, on Spark).

    (SavepointWriter.new_savepoint(spark, max_parallelism=128)
        .with_keyed_state("count", df, "key", "count")          # value state from key, value
        .with_operator_state("numbers", "offsets", [0, 0], mode="split")
        .write("/savepoints/bootstrapped"))

`from_existing_savepoint(spark, path)` starts from a snapshot instead: its operators are kept
(their files copied, checksums checked) unless `remove_operator(uid)` drops one or a `with_*`
call bootstraps it anew (which replaces the operator's whole state).

`write(path)` runs in these steps:

1. refuse a `path` that holds `_metadata` or any other file (a completed snapshot is never
   overwritten, and a savepoint holds only its own files);
2. per bootstrapped operator, one Spark job: the rows are keyed by the subtask owning their key
   group (`partitionBy(parallelism)`), and task i writes subtask i's state file (bootstrap.py);
3. the files of kept operators are copied from the existing snapshot (subtasks of an
   incremental RocksDB checkpoint: rewritten as canonical state files by Spark tasks);
4. the driver writes `_metadata` atomically (CheckpointStorage.write_metadata): only now is the
   savepoint complete. A failure before removes the directory if `write` created it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.assignment import redistribute_list_state
from tidegate.checkpoint.errors import ChecksumMismatchError
from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata, OperatorMetadata
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common.filesystems import FileSystems
from tidegate.state.checksums import ChecksummingWriter
from tidegate.state.handles import StateHandle, file_safe
from tidegate.state.keygroups import UPPER_BOUND_MAX_PARALLELISM
from tidegate.state_processor.bootstrap import (
    KEYED_KINDS,
    KeyedSpec,
    SubtaskFiles,
    keyed_records,
    write_subtask_file,
)
from tidegate.state_processor.incremental import (
    IncrementalSource,
    rewrite_canonical,
)
from tidegate.state_processor.snapshot import SnapshotView, UnsupportedSnapshotError

__all__ = ["SavepointWriter"]

OPERATOR_MODES = ("split", "union", "broadcast")


@dataclass
class _Operator:
    """The new state of one operator uid."""

    parallelism: int
    keyed: list[tuple[KeyedSpec, Any]] = field(default_factory=list)
    #: name -> (mode, entries)
    operator_state: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)


class SavepointWriter:
    """Builds a savepoint from DataFrames; see the module docstring."""

    def __init__(
        self,
        spark: Any,
        max_parallelism: int,
        base: SnapshotView | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise ValueError(
                f"max_parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got "
                f"{max_parallelism}"
            )
        self.spark = spark
        self.max_parallelism = max_parallelism
        self._base = base
        self._storage_options = dict(storage_options or {})
        self._new: dict[str, _Operator] = {}
        self._removed: set[str] = set()

    @classmethod
    def new_savepoint(
        cls,
        spark: Any,
        max_parallelism: int = 128,
        storage_options: Mapping[str, Any] | None = None,
    ) -> SavepointWriter:
        """An empty savepoint with `max_parallelism` key groups (the job restoring it must
        use the same max parallelism: 128 is the default of jobs up to parallelism 85)."""
        return cls(spark, max_parallelism, storage_options=storage_options)

    @classmethod
    def from_existing_savepoint(
        cls, spark: Any, path: str, storage_options: Mapping[str, Any] | None = None
    ) -> SavepointWriter:
        """A savepoint holding the state of the snapshot at `path` (a savepoint, a `chk-<n>`,
        or a job directory), to add, replace or remove operators' state."""
        base = SnapshotView.open(path, storage_options)
        if base.metadata.channel_state:
            raise UnsupportedSnapshotError(
                f"{base.directory} is an unaligned checkpoint with in-flight records, which a "
                "savepoint cannot hold: take a savepoint of the job and start from that"
            )
        return cls(spark, base.max_parallelism, base, storage_options)

    def with_keyed_state(
        self,
        uid: str,
        df: Any,
        key_column: str,
        state_name: str,
        kind: str = "value",
        *,
        value_column: str = "value",
        user_key_column: str = "user_key",
        position_column: str | None = None,
        parallelism: int | None = None,
        raw: bool = False,
    ) -> SavepointWriter:
        """Keyed state `state_name` of operator `uid`, from `df`: one row per key (value,
        reducing, aggregating), per element (list: ordered by `position_column`, default
        `position` if `df` has it, else the rows' order) or per entry (map: `user_key_column`).
        `raw`: the key/user-key/value columns hold pickled objects (what the reader's
        `raw=True` gives). Call it again for more states of the same operator."""
        if kind not in KEYED_KINDS:
            raise ValueError(f"kind must be one of {', '.join(KEYED_KINDS)}; got {kind!r}")
        if kind == "list" and position_column is None and "position" in df.columns:
            position_column = "position"
        spec = KeyedSpec(
            state_name,
            kind,
            key_column,
            value_column,
            user_key_column if kind == "map" else None,
            position_column if kind == "list" else None,
            raw,
        )
        missing = [c for c in spec.columns() if c not in df.columns]
        if missing:
            raise ValueError(
                f"the DataFrame for {kind} state {state_name!r} of {uid!r} has no column(s) "
                f"{missing}; it has {df.columns}. Name them with key_column=, value_column=, "
                "user_key_column= (map) or position_column= (list)"
            )
        op = self._operator(uid, parallelism)
        if any(s.state_name == state_name for s, _ in op.keyed) or state_name in op.operator_state:
            raise ValueError(f"state {state_name!r} of {uid!r} is given twice")
        op.keyed.append((spec, df.select(*spec.columns())))
        return self

    def with_operator_state(
        self,
        uid: str,
        state_name: str,
        entries: Sequence[Any] | Any,
        *,
        mode: str = "split",
        parallelism: int | None = None,
    ) -> SavepointWriter:
        """Operator list state `state_name` of operator `uid`: `entries` (a list, or a
        DataFrame collected by the driver: operator state is small; a DataFrame of one column
        gives its values, otherwise Rows). `split`: the entries are dealt out in order over the
        subtasks, as a restore redistributes them; `union`: every subtask restores them all;
        `broadcast`: broadcast (map) state, `entries` a dict, (key, value) pairs or a
        DataFrame of two columns, copied to every subtask."""
        if mode not in OPERATOR_MODES:
            raise ValueError(f"mode must be one of {', '.join(OPERATOR_MODES)}; got {mode!r}")
        if hasattr(entries, "collect"):
            rows = entries.collect()
            entries = [r[0] for r in rows] if len(entries.columns) == 1 else rows
        if mode == "broadcast":
            entries = _broadcast_pairs(entries, f"broadcast state {state_name!r} of {uid!r}")
        op = self._operator(uid, parallelism)
        if state_name in op.operator_state or any(s.state_name == state_name for s, _ in op.keyed):
            raise ValueError(f"state {state_name!r} of {uid!r} is given twice")
        op.operator_state[state_name] = (mode, list(entries))
        return self

    def remove_operator(self, uid: str) -> SavepointWriter:
        """Drop the state of operator `uid` of the existing snapshot."""
        if self._base is None or uid not in self._base.operators:
            raise ValueError(f"there is no operator {uid!r} to remove: {self._known_uids()}")
        self._removed.add(uid)
        return self

    def write(self, path: str) -> str:
        """Write the savepoint into directory `path` (a path or fsspec URI); returns it."""
        directory = path if "://" in path else os.path.abspath(os.path.expanduser(path))
        target = FileSystems.for_urls(self._storage_options, directory)
        fs, fs_dir = target.resolve(directory)
        # Step 1: never over a completed snapshot
        if fs.exists(f"{fs_dir.rstrip('/')}/{METADATA_FILE_NAME}"):
            raise FileExistsError(
                f"{directory} holds a completed checkpoint or savepoint already; write the new "
                "savepoint into a new directory"
            )
        created = not fs.exists(fs_dir)
        if not created and fs.ls(fs_dir):
            raise FileExistsError(
                f"{directory} is not empty; write the new savepoint into a new (or empty) "
                "directory, so that it holds nothing but its own files"
            )
        fs.makedirs(fs_dir, exist_ok=True)
        try:
            operators: dict[str, OperatorMetadata] = {}
            # Step 2: the bootstrapped operators, written by Spark tasks
            for uid, op in self._new.items():
                operators[uid] = self._write_operator(uid, op, directory, target)
            # Step 3: the kept operators of the existing snapshot
            for uid, entry in self._kept().items():
                operators[uid] = self._copy_operator(uid, entry, directory, target)
            # Step 4: `_metadata`, atomically
            storage = CheckpointStorage(directory, "state-processor", target)
            storage.write_metadata(directory, self._metadata(operators))
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    fs.rm(fs_dir, recursive=True)
            raise
        return directory

    # internals --------------------------------------------------------------------------------
    def _operator(self, uid: str, parallelism: int | None) -> _Operator:
        op = self._new.get(uid)
        if op is None:
            p = parallelism or self._default_parallelism(uid)
            if not 1 <= p <= self.max_parallelism:
                raise ValueError(
                    f"parallelism {p} of {uid!r} must be in [1, {self.max_parallelism}] (the "
                    "max parallelism: each subtask needs at least one key group)"
                )
            op = self._new[uid] = _Operator(p)
        elif parallelism is not None and parallelism != op.parallelism:
            raise ValueError(
                f"operator {uid!r} is given parallelism {parallelism} and {op.parallelism}; "
                "all states of an operator have one parallelism"
            )
        return op

    def _default_parallelism(self, uid: str) -> int:
        """The operator's parallelism in the existing snapshot, else a job's default."""
        if self._base is not None and uid in self._base.operators:
            return self._base.operators[uid].parallelism
        return min(os.cpu_count() or 1, 4, self.max_parallelism)

    def _write_operator(
        self, uid: str, op: _Operator, directory: str, target: FileSystems
    ) -> OperatorMetadata:
        p, m = op.parallelism, self.max_parallelism
        shares: list[dict[str, tuple[str, list[Any]]]] = [{} for _ in range(p)]
        for name, (mode, entries) in op.operator_state.items():
            if mode == "split":
                parts = redistribute_list_state([entries], p)
            else:  # union: once (a restore gives every subtask all); broadcast: a copy each
                parts = [entries] * (p if mode == "broadcast" else 1)
            for subtask in range(p):
                shares[subtask][name] = (mode, parts[subtask] if subtask < len(parts) else [])
        files = SubtaskFiles(
            uid,
            directory,
            p,
            m,
            {spec.state_name: spec.kind for spec, _ in op.keyed},
            tuple(shares),
            target,
        )
        sc = self.spark.sparkContext
        records = [
            df.rdd.mapPartitions(functools.partial(keyed_records, s, p, m)) for s, df in op.keyed
        ]
        rdd = sc.union(records) if records else sc.parallelize([], 1)
        handles = (
            rdd.partitionBy(p, _identity)
            .mapPartitionsWithIndex(functools.partial(write_subtask_file, files))
            .collect()
        )
        return OperatorMetadata(self._operator_name(uid), p, dict(handles))

    def _kept(self) -> dict[str, OperatorMetadata]:
        if self._base is None:
            return {}
        return {
            uid: entry
            for uid, entry in self._base.operators.items()
            if uid not in self._removed and uid not in self._new
        }

    def _copy_operator(
        self, uid: str, entry: OperatorMetadata, directory: str, target: FileSystems
    ) -> OperatorMetadata:
        """Copy the operator's files from the existing snapshot, checking each one's size and
        checksum on the way (the copy is the only read). Subtasks of an incremental checkpoint
        are rewritten canonically instead (a savepoint must not reference the checkpoint's
        shared RocksDB files, which its job deletes): one Spark task per subtask reads its
        RocksDB files and operator state and writes one state file."""
        assert self._base is not None
        subtasks = dict(entry.subtasks)
        for _subtask, handle in self._base.handles(uid):
            if handle.incremental is None:
                self._copy_file(uid, handle, directory, target)
        sources = self._base.incremental_sources(uid)
        if sources:
            rewrite = functools.partial(
                _rewrite_subtask, uid=uid, directory=directory, target=target
            )
            rdd = self.spark.sparkContext.parallelize(sources, len(sources))
            subtasks.update(rdd.map(rewrite).collect())
        return OperatorMetadata(entry.name, entry.parallelism, subtasks)

    def _copy_file(
        self, uid: str, handle: StateHandle, directory: str, target: FileSystems
    ) -> None:
        assert self._base is not None
        source = f"{self._base.directory.rstrip('/')}/{handle.file}"
        copy = f"{directory.rstrip('/')}/{handle.file}"
        with (
            self._base.filesystems.open(source) as src,
            target.open(copy, "wb") as raw,
        ):
            out = ChecksummingWriter(raw, handle.file)
            while chunk := src.read(1 << 20):
                out.write(chunk)
        if (out.size, out.checksum) != (handle.size, handle.checksum):
            raise ChecksumMismatchError(
                f"state file {source} of operator {uid!r} has {out.size} bytes and checksum "
                f"{out.checksum}, but {handle.size} bytes and "
                f"{handle.checksum} were written: the file is damaged. Start from "
                "another snapshot."
            )

    def _operator_name(self, uid: str) -> str:
        if self._base is not None and uid in self._base.operators:
            return self._base.operators[uid].name
        return f"Bootstrapped: {uid}"

    def _known_uids(self) -> str:
        if self._base is None:
            return "a new savepoint has none"
        return f"the snapshot has {', '.join(sorted(map(repr, self._base.operators))) or 'none'}"

    def _metadata(self, operators: dict[str, OperatorMetadata]) -> CheckpointMetadata:
        now = int(time.time() * 1000)
        base = self._base.metadata if self._base is not None else None
        base_name = base.job_name if base is not None and base.job_name else None
        metadata = CheckpointMetadata(
            job_id=uuid.uuid4().hex,
            job_name=f"state processor: {base_name or 'bootstrapped savepoint'}",
            checkpoint_id=base.checkpoint_id if base is not None else 0,
            timestamp_ms=now,
            completed_ms=now,
            duration_ms=0,
            is_savepoint=True,
            attempt=0,
            generation=0,
            max_parallelism=self.max_parallelism,
            operators=operators,
        )
        return metadata.replace(size_bytes=metadata.written_bytes())


def _rewrite_subtask(
    source: IncrementalSource, *, uid: str, directory: str, target: FileSystems
) -> tuple[int, StateHandle]:
    """One incremental subtask of a kept operator, as a canonical state file (a Spark task)."""
    return rewrite_canonical(source, f"{file_safe(uid)}-{source.subtask}", directory, target)


def _identity(subtask: int) -> int:
    return subtask


def _broadcast_pairs(entries: Any, what: str) -> list[tuple[Any, Any]]:
    """Broadcast state as stored: the map's (key, value) pairs; keys must be unique."""
    pairs = list(entries.items()) if isinstance(entries, Mapping) else [tuple(e) for e in entries]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"{what} needs (key, value) pairs, a dict or a two-column DataFrame")
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what} has a key more than once; a map holds one value per key")
    return pairs
