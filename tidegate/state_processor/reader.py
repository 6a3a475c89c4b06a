"""Reading the state of a checkpoint or savepoint as Spark DataFrames (Flink's SavepointReader).

The driver reads only `_metadata` (and, for operator state, the small operator sections): it
turns each state file's index into read tasks of a few key groups each and hands Spark the
paths and index entries, never state. Each Spark task opens its file through fsspec, seeks to
its key groups' sections, checks their CRCs and turns the entries into rows (rows.py), so a
large keyed state is read in parallel by as many tasks as there are cores, and no task reads a
section another one reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.errors import MissingCheckpointFileError
from tidegate.common.filesystems import FileSystems
from tidegate.state.snapshot_format import (
    CorruptStateError,
    KeyGroupData,
    StateFileIndex,
    read_key_groups,
)
from tidegate.state_processor.incremental import IncrementalSource
from tidegate.state_processor.rows import (
    TIMER_STATE,
    columns_for,
    keyed_rows,
    make_verifier,
    pickle_data_columns,
    raw_schema,
    resolve_schema,
)
from tidegate.state_processor.snapshot import (
    SnapshotView,
    StateInfo,
    StateNotFoundError,
    state_file_path,
)

__all__ = [
    "SavepointReader",
    "list_state",
    "read_broadcast_state",
    "read_keyed_state",
    "read_operator_state",
    "read_timers",
]

#: rows the schema is inferred from (the first rows Spark finds, i.e. a few key groups)
INFER_SAMPLE_ROWS = 1000
#: read tasks per core of the Spark application (several, so a skewed key group does not
#: hold the whole read back)
TASKS_PER_CORE = 2


@dataclass(frozen=True)
class _ReadTask:
    """Some key groups of one state file: what one Spark task reads."""

    subtask: int
    path: str
    max_parallelism: int
    #: [key group, offset, length] of each section to read, ascending
    sections: tuple[tuple[int, int, int], ...]
    #: an incremental RocksDB handle: all its key groups are read from its files instead
    source: IncrementalSource | None = None


class SavepointReader:
    """The state of one completed checkpoint or savepoint, as DataFrames.

    `SavepointReader.read(spark, path)` accepts a savepoint or `chk-<n>` directory, its
    `_metadata` file, or a job directory (its latest completed checkpoint).
    """

    def __init__(self, spark: Any, snapshot: SnapshotView) -> None:
        self.spark = spark
        self.snapshot = snapshot

    @classmethod
    def read(
        cls, spark: Any, path: str, storage_options: Mapping[str, Any] | None = None
    ) -> SavepointReader:
        return cls(spark, SnapshotView.open(path, storage_options))

    @property
    def directory(self) -> str:
        """The checkpoint or savepoint directory read (a job directory resolved)."""
        return self.snapshot.directory

    @property
    def max_parallelism(self) -> int:
        return self.snapshot.max_parallelism

    def list_state(self) -> list[StateInfo]:
        """Every state of every operator: uid, scope (keyed/operator), kind, sizes."""
        return self.snapshot.list_state()

    def read_keyed_state(
        self,
        uid: str,
        state_name: str,
        *,
        schema: Any = None,
        raw: bool = False,
        include_key_group: bool = False,
    ) -> Any:
        """Keyed state `state_name` of operator `uid` as a DataFrame (rows.py has the row
        shape of each kind). `schema`: a StructType or DDL string for all the columns,
        instead of inferring it; `raw`: pickled binary key/value columns; `include_key_group`:
        add `key_group` and `subtask` columns."""
        kind = self.snapshot.require_keyed_state(uid, state_name)
        what = f"{kind} state {state_name!r} of operator {uid!r}"
        return self._read_keyed(uid, state_name, kind, what, schema, raw, include_key_group)

    def read_timers(
        self,
        uid: str,
        *,
        schema: Any = None,
        raw: bool = False,
        include_key_group: bool = False,
    ) -> Any:
        """The timers of keyed operator `uid` that had not fired yet: one row per timer,
        `key, time_domain, timestamp` (the timer service keeps them in the keyed map state
        `__timers__`)."""
        if TIMER_STATE not in self.snapshot.keyed_kinds(uid):
            raise StateNotFoundError(
                f"operator {uid!r} in {self.directory} has no timers: no timer was pending "
                "when the snapshot was taken, or the operator never registered one"
            )
        what = f"the timers of operator {uid!r}"
        return self._read_keyed(uid, TIMER_STATE, "timers", what, schema, raw, include_key_group)

    def read_operator_state(
        self, uid: str, state_name: str, *, schema: Any = None, raw: bool = False
    ) -> Any:
        """Split or union operator (list) state `state_name` of operator `uid`: one row per
        entry, `subtask, position, value`, as each subtask held it in the snapshot (union
        state: every subtask's own list, which a restore gives every new subtask in full)."""
        mode = self.snapshot.require_operator_state(uid, state_name)
        if mode == "broadcast":
            raise StateNotFoundError(
                f"operator state {state_name!r} of {uid!r} is broadcast state: read it with "
                "read_broadcast_state"
            )
        rows = [
            (subtask, position, value)
            for subtask, states in self.snapshot.operator_state(uid)
            if state_name in states
            for position, value in enumerate(states[state_name][1])
        ]
        what = f"{mode} operator state {state_name!r} of operator {uid!r}"
        return self._local_data_frame(rows, columns_for(mode), schema, raw, what)

    def read_broadcast_state(
        self, uid: str, state_name: str, *, schema: Any = None, raw: bool = False
    ) -> Any:
        """Broadcast state `state_name` of operator `uid`: one row per entry, `key, value`
        (every subtask holds the same copy; the first subtask's is read)."""
        mode = self.snapshot.require_operator_state(uid, state_name)
        if mode != "broadcast":
            raise StateNotFoundError(
                f"operator state {state_name!r} of {uid!r} is {mode} list state, not broadcast "
                "state: read it with read_operator_state"
            )
        _subtask, states = next(
            (s, st) for s, st in self.snapshot.operator_state(uid) if state_name in st
        )
        entries = states[state_name][1]
        pairs = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
        what = f"broadcast state {state_name!r} of operator {uid!r}"
        return self._local_data_frame(pairs, columns_for("broadcast"), schema, raw, what)

    # internals --------------------------------------------------------------------------------
    def _read_keyed(
        self,
        uid: str,
        state_name: str,
        kind: str,
        what: str,
        schema: Any,
        raw: bool,
        include_key_group: bool,
    ) -> Any:
        """A DataFrame of the rows of keyed state `state_name`, read by Spark tasks."""
        columns = columns_for(kind, include_key_group)
        read = functools.partial(
            _read_keyed_rows,
            state_name=state_name,
            kind=kind,
            columns=columns,
            raw=raw,
            include_key_group=include_key_group,
            filesystems=self.snapshot.filesystems,
        )
        rdd = self._rdd(self._keyed_tasks(uid)).flatMap(read)
        return self._data_frame(rdd, columns, schema, raw, what)

    def _keyed_tasks(self, uid: str) -> list[_ReadTask]:
        """The operator's non-empty key-group sections, cut into about TASKS_PER_CORE tasks
        per core (never mixing two files in one task), and one task per incremental handle
        (its key groups are in one RocksDB checkpoint, downloaded once)."""
        tasks = [
            _ReadTask(s.subtask, self.directory, self.max_parallelism, (), s)
            for s in self.snapshot.incremental_sources(uid)
        ]
        files = [
            (subtask, state_file_path(self.directory, h), h.index)
            for subtask, h in self.snapshot.handles(uid)
            if h.incremental is None
        ]
        total = sum(len(index.key_group_offsets) for _, _, index in files)
        target = max(1, self.spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
        per_task = max(1, -(-total // target))
        for subtask, path, index in files:
            sections = [(kg, off, n) for kg, (off, n) in sorted(index.key_group_offsets.items())]
            for start in range(0, len(sections), per_task):
                chunk = tuple(sections[start : start + per_task])
                tasks.append(_ReadTask(subtask, path, self.max_parallelism, chunk))  # type: ignore[arg-type]
        return sorted(tasks, key=lambda t: t.subtask)

    def _rdd(self, tasks: list[_ReadTask]) -> Any:
        sc = self.spark.sparkContext
        return sc.parallelize(tasks, max(1, len(tasks)))

    def _data_frame(
        self, rdd: Any, columns: tuple[str, ...], schema: Any, raw: bool, what: str
    ) -> Any:
        if raw:
            struct = raw_schema(columns)
        else:
            sample = [] if schema is not None else rdd.take(INFER_SAMPLE_ROWS)
            struct = resolve_schema(self.spark, schema, columns, sample, what)
        return self.spark.createDataFrame(
            rdd.map(make_verifier(struct, what)), struct, verifySchema=False
        )

    def _local_data_frame(
        self,
        rows: list[tuple[Any, ...]],
        columns: tuple[str, ...],
        schema: Any,
        raw: bool,
        what: str,
    ) -> Any:
        """A DataFrame of rows read on the driver (operator state is small)."""
        if raw:
            rows = [pickle_data_columns(columns, row) for row in rows]
        rdd = self.spark.sparkContext.parallelize(rows, 1)
        return self._data_frame(rdd, columns, schema, raw, what)


def _read_keyed_rows(
    task: _ReadTask,
    *,
    state_name: str,
    kind: str,
    columns: tuple[str, ...],
    raw: bool,
    include_key_group: bool,
    filesystems: FileSystems,
) -> Iterator[tuple[Any, ...]]:
    """The rows of `state_name` in the task's key groups (runs in a Spark task)."""
    try:
        for kg, data in _task_key_groups(task, filesystems):
            stored = data.get(state_name)
            if stored is None:
                continue
            for row in keyed_rows(kind, stored[1]):
                if include_key_group:
                    row = (*row, kg, task.subtask)
                yield pickle_data_columns(columns, row) if raw else row
    except FileNotFoundError as e:
        what = f"state file {task.path}"
        if task.source is not None:
            what = f"file {e.filename} of the incremental rocksdb state of subtask {task.subtask}"
        raise MissingCheckpointFileError(
            f"{what} is missing: the checkpoint was deleted while it was read "
            "(a running job deletes the checkpoints newer ones subsume: copy its chk-<n> "
            "directory and read the copy, or read a savepoint), or the snapshot is incomplete."
        ) from None
    except CorruptStateError as e:
        if task.path not in str(e):
            raise CorruptStateError(f"state file {task.path}", e.problem, e.remedy) from e
        raise


def _task_key_groups(
    task: _ReadTask, filesystems: FileSystems
) -> Iterator[tuple[int, KeyGroupData]]:
    """(key group, data) of the task: its sections of a canonical state file, or every key
    group of its incremental handle (whose files are downloaded into a temporary directory)."""
    if task.source is not None:
        yield from task.source.key_groups()
        return
    index = StateFileIndex(
        key_group_offsets={kg: (offset, length) for kg, offset, length in task.sections},
        operator_offset=None,
        size=0,
        max_parallelism=task.max_parallelism,
    )
    key_groups = range(task.sections[0][0], task.sections[-1][0] + 1)
    with filesystems.open(task.path) as f:
        yield from read_key_groups(f, index, key_groups)


def list_state(path: str, storage_options: Mapping[str, Any] | None = None) -> list[StateInfo]:
    """Every state of every operator in the checkpoint or savepoint at `path` (no Spark)."""
    return SnapshotView.open(path, storage_options).list_state()


def read_keyed_state(spark: Any, path: str, uid: str, state_name: str, **options: Any) -> Any:
    """`SavepointReader.read(spark, path).read_keyed_state(uid, state_name, **options)`."""
    storage_options = options.pop("storage_options", None)
    return SavepointReader.read(spark, path, storage_options).read_keyed_state(
        uid, state_name, **options
    )


def read_operator_state(spark: Any, path: str, uid: str, state_name: str, **options: Any) -> Any:
    """`SavepointReader.read(spark, path).read_operator_state(uid, state_name, **options)`."""
    storage_options = options.pop("storage_options", None)
    return SavepointReader.read(spark, path, storage_options).read_operator_state(
        uid, state_name, **options
    )


def read_broadcast_state(spark: Any, path: str, uid: str, state_name: str, **options: Any) -> Any:
    """`SavepointReader.read(spark, path).read_broadcast_state(uid, state_name, **options)`."""
    storage_options = options.pop("storage_options", None)
    return SavepointReader.read(spark, path, storage_options).read_broadcast_state(
        uid, state_name, **options
    )


def read_timers(spark: Any, path: str, uid: str, **options: Any) -> Any:
    """`SavepointReader.read(spark, path).read_timers(uid, **options)`."""
    storage_options = options.pop("storage_options", None)
    return SavepointReader.read(spark, path, storage_options).read_timers(uid, **options)
