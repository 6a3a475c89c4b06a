"""The exactly-once protocol the table sinks (Delta Lake, Iceberg) share; each table format
supplies how it reads and writes the marker of step 3.

1. Write: a sink subtask (writer index w) keeps its records as Arrow batches
   (table_files.DataFileWriter).
2. Pre-commit (checkpoint n): they are written into durable Parquet files in the table's
   directory, not yet in the table; the committable `TableCommittable(app id, n, files)` is
   stored in the checkpoint. The application id names the job run, the sink operator (its
   uid) and w: `tidegate/<job id>/<uid>/<w>`.
3. Commit (n completed, or its committable restored): read the highest checkpoint the table
   recorded for the app id (Delta: the application transaction of the app id; Iceberg: the
   snapshot summary properties); the committables of checkpoints above it are added in ONE
   table commit that records the highest of their checkpoint ids for the app id
   (`pending_commits`). The table format makes that commit conditional on what was read (a
   concurrent commit of the same app id, by a zombie of an earlier attempt, makes it fail), and
   the decision is taken again.
4. Recover: files a failed attempt wrote and that no committable will commit are removed
   (table_files.is_leftover).

Table formats keep the marker with the data, in the same atomic commit: a replayed commit is
recognised for as long as the table keeps its history (Delta: the app transaction is kept
while the log retention lasts, `delta.logRetentionDuration`, 30 days by default; Iceberg: while
the snapshot is not expired).
"""

from __future__ import annotations

import logging
import posixpath
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from fsspec import AbstractFileSystem

from tidegate.common.filesystems import FileSystems
from tidegate.connectors.table_files import (
    DataFile,
    DataFileName,
    DataFileWriter,
    is_leftover,
    sink_token,
)
from tidegate.formats.arrow_row import batch_writer

__all__ = [
    "TableCommittable",
    "TableSink",
    "TableSinkBuilder",
    "TableSinkWriter",
    "app_id",
    "pending_commits",
    "remove_leftovers",
]

log = logging.getLogger(__name__)


def app_id(job_id: str, sink_uid: str, writer: int) -> str:
    """The application id of writer index `writer` of a sink in a job run (step 2)."""
    return f"tidegate/{job_id}/{sink_uid}/{writer}"


@dataclass(frozen=True, slots=True)
class TableCommittable:
    """The data files writer index `writer` prepared for checkpoint `checkpoint_id`."""

    app_id: str
    writer: int
    checkpoint_id: int
    files: tuple[DataFile, ...]


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """One table commit: `files`, recording checkpoint `version` for `app_id`."""

    app_id: str
    writer: int
    version: int
    files: tuple[DataFile, ...]


#: how often a committer decides again after losing races to concurrent commits
MAX_DECISIONS = 50


def before_deciding_again(decision: int, table: str, error: Exception) -> None:
    """Step 3 after decision number `decision` (from 1) lost a race to a concurrent commit
    (`error`): waits a little, longer each time and jittered so racing subtasks spread out;
    raises a RuntimeError naming `table` after MAX_DECISIONS."""
    if decision >= MAX_DECISIONS:
        raise RuntimeError(
            f"{decision} commits to {table} in a row lost races to concurrent commits (the last: "
            f"{error}); fewer sink subtasks or a longer checkpoint interval make fewer commits"
        ) from error
    log.info("a concurrent commit to %s: deciding again (%s)", table, error)
    time.sleep(random.uniform(0, 0.01 * min(decision, 20)))


def pending_commits(
    committables: list[TableCommittable], committed: Callable[[str], int | None]
) -> list[PendingCommit]:
    """Step 3's decision: per app id, the committables above its committed checkpoint
    (`committed(app_id)`, None: none yet) as one commit at their highest checkpoint id."""
    by_app: dict[str, list[TableCommittable]] = {}
    for c in committables:
        by_app.setdefault(c.app_id, []).append(c)
    commits = []
    for app, group in by_app.items():
        done = committed(app)
        todo = sorted(
            (c for c in group if done is None or c.checkpoint_id > done),
            key=lambda c: c.checkpoint_id,
        )
        if todo:
            files = tuple(f for c in todo for f in c.files)
            commits.append(PendingCommit(app, todo[-1].writer, todo[-1].checkpoint_id, files))
    return commits


class TableSinkWriter:
    """Steps 1-2 for writer index `writer` (a SinkWriter); every method runs on the sink
    subtask's thread."""

    def __init__(self, files: DataFileWriter, app: str, writer: int) -> None:
        self._files = files
        self._app = app
        self._writer = writer

    def write_batch(self, records: list[Any]) -> None:
        """Step 1: keep the records (converted to Arrow: a record that does not fit the row
        type raises FormatError here, naming the sink, the field and the record)."""
        self._files.write(records)

    def prepare_commit(self, checkpoint_id: int) -> list[TableCommittable]:
        """Step 2, in the synchronous phase of checkpoint `checkpoint_id`: the records kept
        since the previous checkpoint are in durable data files, not yet in the table, when
        this returns their committable (none if there were no records)."""
        files = self._files.flush(checkpoint_id)
        if not files:
            return []
        return [TableCommittable(self._app, self._writer, checkpoint_id, tuple(files))]

    def close(self) -> None:
        """Records not yet written are dropped: the restore re-reads them."""


def remove_leftovers(
    fs: AbstractFileSystem,
    root: str,
    token: str,
    subtask_index: int,
    parallelism: int,
    attempt: int,
    restored: list[TableCommittable],
    committed: Callable[[int], int | None],
) -> list[str]:
    """Step 4: remove the data files under `root` that `is_leftover` says are leftovers
    (`committed(writer)`: that writer index's committed checkpoint in this job run); returns
    their paths. Directories whose names start with '_' or '.' (the table's log) are skipped."""
    if not fs.isdir(root):
        return []
    keep = {posixpath.normpath(f.path) for c in restored for f in c.files}
    removed = []
    known: dict[int, int | None] = {}
    for path in fs.find(root):
        relative = posixpath.relpath(path, root)
        if any(part[:1] in "_." for part in relative.split("/")[:-1]):
            continue
        name = DataFileName.parse(posixpath.basename(path))
        if name is None or name.token != token:
            continue
        if name.writer not in known:
            known[name.writer] = committed(name.writer)
        restored_file = posixpath.normpath(path) in keep
        if is_leftover(
            name, token, subtask_index, parallelism, attempt, known[name.writer], restored_file
        ):
            fs.rm_file(path)
            removed.append(path)
    return removed


class TableSink:
    """What the Delta and Iceberg sinks share of the sink contract (connectors/base.py: Sink,
    UsesOperatorUid, UsesJobId): a base of their frozen dataclasses, which have the fields
    annotated here and implement `data_root` and `recorded_checkpoints`."""

    row_type: Any
    partition_by: tuple[str, ...]
    target_file_size: int
    filesystems: FileSystems
    uid: str
    job_id: str
    #: whether data files hold the partition columns (Iceberg) or only their directories (Delta)
    keep_partition_columns: ClassVar[bool]
    #: the sink in messages ("a DeltaSink")
    what: ClassVar[str]

    def data_root(self) -> str:
        """The directory (path or URL) the data files are written under."""
        raise NotImplementedError

    def recorded_checkpoints(self) -> Callable[[str], int | None]:
        """Reads the table: the highest checkpoint it recorded for an application id."""
        raise NotImplementedError

    def for_uid(self, uid: str) -> Self:
        """The sink operator's uid, part of the application ids (called in each subtask)."""
        return replace(self, uid=uid)  # type: ignore[type-var]

    def for_job(self, job_id: str) -> Self:
        """The job run's id, part of the application ids (called in each subtask)."""
        return replace(self, job_id=job_id)  # type: ignore[type-var]

    def app(self, writer: int) -> str:
        return app_id(self.job_id, self.uid, writer)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> TableSinkWriter:
        """Writer index `subtask_index`, writing data files named for this job run, sink and
        attempt (table_files.py), committed under its application id."""
        if not self.job_id or self.row_type is None:
            raise RuntimeError(f"{self.what} runs inside a job, added with stream.sink_to(sink)")
        fs, root = self.filesystems.resolve(self.data_root())
        files = DataFileWriter(
            fs,
            root,
            batch_writer(self.row_type, self.what),
            self.partition_by,
            keep_partition_columns=self.keep_partition_columns,
            name=DataFileName(sink_token(self.job_id, self.uid), subtask_index, 0, attempt, 0),
            target_file_size=self.target_file_size,
        )
        return TableSinkWriter(files, self.app(subtask_index), subtask_index)

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Step 4: remove the data files of the writer indexes this subtask takes over that
        earlier attempts of this job run wrote and nothing will commit."""
        fs, root = self.filesystems.resolve(self.data_root())
        recorded = self.recorded_checkpoints()
        removed = remove_leftovers(
            fs,
            root,
            sink_token(self.job_id, self.uid),
            subtask_index,
            parallelism,
            attempt,
            restored,
            lambda writer: recorded(self.app(writer)),
        )
        if removed:
            log.info("removed %d uncommitted data files under %s", len(removed), root)


class TableSinkBuilder:
    """The builder methods the Delta and Iceberg sink builders share; `build` passes
    `self._changes` to the sink."""

    def __init__(self) -> None:
        self._changes: dict[str, Any] = {}

    def set_partition_columns(self, *columns: str) -> Self:
        """Partition a new table by these columns (string, integer, boolean or date; Iceberg:
        by identity); an existing table must be partitioned by exactly these."""
        self._changes["partition_by"] = tuple(columns)
        return self

    def set_target_file_size(self, size: int) -> Self:
        """Split a partition's data of one checkpoint into files of about `size` bytes."""
        if size <= 0:
            raise ValueError(f"the target file size must be > 0 bytes, got {size}")
        self._changes["target_file_size"] = size
        return self
