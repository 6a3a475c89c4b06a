"""Parquet data files that a table sink's writer prepares for one checkpoint and its committer
adds to the table (the Delta and Iceberg sinks): their names, the writer, and which files a
recovery removes.

A writer keeps the records of one checkpoint interval as Arrow batches, by partition, and at
the checkpoint writes them into Parquet files in the table's directory, durably, under names
that say who wrote them for which checkpoint:

    <partition dirs>/part-<token>-<writer>-<checkpoint>-<attempt>-<seq>.parquet

`token` stands for the job and the sink (readers of the table see only the files its log
lists, so files not yet committed are invisible). A recovery removes the files a failed
attempt wrote and will never commit (`is_leftover`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from tidegate.connectors.base import writer_subtask
from tidegate.connectors.file_sink import close_durably, open_binary

__all__ = [
    "DataFile",
    "DataFileName",
    "DataFileWriter",
    "check_partition_columns",
    "is_leftover",
    "sink_token",
]

#: split a partition's data of one checkpoint into files of about this many bytes (in memory)
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024

_NAME = re.compile(
    r"part-(?P<token>[0-9a-f]{12})-(?P<writer>\d+)-(?P<checkpoint>\d+)-(?P<attempt>\d+)"
    r"-(?P<seq>\d+)\.parquet"
)
#: what a partition value in a directory name keeps as is (Hive escapes the rest as %XX)
_SAFE = "-_.~ "
#: the partition column types: values with an exact text form
_PARTITION_TYPES = (pa.types.is_string, pa.types.is_integer, pa.types.is_boolean, pa.types.is_date)


def sink_token(job_id: str, sink_uid: str) -> str:
    """The part of the file names that stands for one sink of one job run."""
    return hashlib.sha1(f"{job_id}/{sink_uid}".encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class DataFileName:
    token: str
    writer: int
    checkpoint_id: int
    attempt: int
    seq: int

    def __str__(self) -> str:
        return (
            f"part-{self.token}-{self.writer}-{self.checkpoint_id}-{self.attempt}-{self.seq}"
            ".parquet"
        )

    @staticmethod
    def parse(basename: str) -> DataFileName | None:
        m = _NAME.fullmatch(basename)
        if m is None:
            return None
        return DataFileName(
            m["token"], int(m["writer"]), int(m["checkpoint"]), int(m["attempt"]), int(m["seq"])
        )


@dataclass(frozen=True, slots=True)
class DataFile:
    """A durable Parquet data file not yet in the table (part of a committable)."""

    #: the path on the table's filesystem
    path: str
    #: '/'-separated, relative to the table's data root, as on disk
    relative_path: str
    size: int
    record_count: int
    #: (column, value as text or None) of each partition column
    partition: tuple[tuple[str, str | None], ...]


def is_leftover(
    name: DataFileName,
    token: str,
    subtask_index: int,
    parallelism: int,
    attempt: int,
    committed_checkpoint: int | None,
    restored: bool,
) -> bool:
    """Whether a recovery of subtask `subtask_index` removes the data file `name`: a file of
    this sink and job run (`token`), of a writer index this subtask takes over, written by an
    earlier attempt for a checkpoint after the last one that writer committed
    (`committed_checkpoint`, None: none), and not among the restored committables (`restored`:
    the runtime commits those next). Files of checkpoints up to the committed one are kept: they
    are in the table, or were in it and were replaced by a compaction (older table versions
    read them)."""
    return (
        name.token == token
        and writer_subtask(name.writer, parallelism) == subtask_index
        and name.attempt < attempt
        and (committed_checkpoint is None or name.checkpoint_id > committed_checkpoint)
        and not restored
    )


def check_partition_columns(schema: pa.Schema, partition_by: tuple[str, ...]) -> None:
    """A ValueError unless every partition column is a field of `schema` of a type with an
    exact text form (string, integer, boolean, date) and not every field is one."""
    for column in partition_by:
        if column not in schema.names:
            raise ValueError(
                f"partition column {column!r} is not a field of the rows ({schema.names})"
            )
        t = schema.field(column).type
        if not any(is_type(t) for is_type in _PARTITION_TYPES):
            raise ValueError(
                f"partition column {column!r} has type {t}: partition by a string, integer, "
                "boolean or date column"
            )
    if len(set(partition_by)) != len(partition_by) or len(partition_by) >= len(schema):
        raise ValueError(
            f"partition columns {list(partition_by)}: each once, and not all of the columns"
        )


def partition_text(value: Any) -> str | None:
    """A partition value as Delta's and Hive's text: booleans lower case, dates ISO."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def partition_dirs(partition: tuple[tuple[str, str | None], ...]) -> str:
    """`col=value/...` as Hive names partition directories (null: __HIVE_DEFAULT_PARTITION__)."""
    return "/".join(
        f"{col}={'__HIVE_DEFAULT_PARTITION__' if v is None else quote(v, safe=_SAFE)}"
        for col, v in partition
    )


class DataFileWriter:
    """Keeps a writer's records as Arrow batches by partition and writes them as Parquet data
    files under `root` on `fs` at each checkpoint (`flush`). `to_batch`: a list of records ->
    one record batch of the table's schema (formats/arrow_row.py `batch_writer`: FormatError
    for a record that does not fit); `keep_partition_columns`: whether the files hold the
    partition columns (Iceberg) or only their directories do (Delta)."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        root: str,
        to_batch: Callable[[list[Any]], pa.RecordBatch],
        partition_by: tuple[str, ...],
        keep_partition_columns: bool,
        name: DataFileName,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> None:
        self._fs = fs
        self._root = root.rstrip("/")
        self._to_batch = to_batch
        self._partition_by = partition_by
        self._keep = keep_partition_columns
        self._name = name
        self._target = target_file_size
        self._buffer: list[pa.RecordBatch] = []
        self._dirs: set[str] = set()
        self._seq = 0

    def write(self, records: list[Any]) -> None:
        if records:
            self._buffer.append(self._to_batch(records))

    def flush(self, checkpoint_id: int) -> list[DataFile]:
        """Write every buffered record into durable Parquet files named for `checkpoint_id`,
        one or more per partition; returns them (empty if nothing was written since the last
        flush)."""
        if not self._buffer:
            return []
        table = pa.Table.from_batches(self._buffer)
        self._buffer = []
        files: list[DataFile] = []
        for partition, part in self._partitions(table):
            if not self._keep and self._partition_by:
                part = part.drop_columns(list(self._partition_by))
            rows_per_file = max(1, part.num_rows * self._target // max(1, part.nbytes))
            for start in range(0, part.num_rows, rows_per_file):
                piece = part.slice(start, rows_per_file)
                files.append(self._write_file(piece, partition, checkpoint_id))
        return files

    def _partitions(
        self, table: pa.Table
    ) -> list[tuple[tuple[tuple[str, str | None], ...], pa.Table]]:
        """`table` split by the values of the partition columns, each part in its rows' order
        (a stable sort, then the runs of equal values)."""
        columns = list(self._partition_by)
        if not columns:
            return [((), table)]
        table = table.sort_by([(c, "ascending") for c in columns])
        runs = table.group_by(columns, use_threads=False).aggregate([([], "count_all")])
        parts, start = [], 0
        for run in runs.to_pylist():
            partition = tuple((c, partition_text(run[c])) for c in columns)
            parts.append((partition, table.slice(start, run["count_all"])))
            start += run["count_all"]
        return parts

    def _write_file(
        self, table: pa.Table, partition: tuple[tuple[str, str | None], ...], checkpoint_id: int
    ) -> DataFile:
        name = DataFileName(
            self._name.token, self._name.writer, checkpoint_id, self._name.attempt, self._seq
        )
        self._seq += 1
        directory = partition_dirs(partition)
        relative = posixpath.join(directory, str(name)) if directory else str(name)
        path = f"{self._root}/{relative}"
        parent = posixpath.dirname(path)
        if parent not in self._dirs:
            self._fs.makedirs(parent, exist_ok=True)
            self._dirs.add(parent)
        stream = open_binary(self._fs, path, "wb")
        try:
            pq.write_table(table, stream)
        finally:
            close_durably(stream)
        return DataFile(path, relative, self._fs.size(path), table.num_rows, partition)
