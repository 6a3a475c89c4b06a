"""Exactly-once Delta Lake sink on delta-rs (the `deltalake` package), by the protocol of
table_commit.py:

    sink = (
        DeltaSink.builder()
        .set_table_path("/data/tables/totals")
        .set_partition_columns("day")
        .build()
    )
    rows.sink_to(sink)   # rows declared with Types.ROW_NAMED(...)

Each sink subtask writes its records of a checkpoint interval as Parquet data files into the
table's directory at the checkpoint; when the checkpoint completes they are added to the table
in one Delta commit carrying the application transaction (app id of the writer, version =
checkpoint id), so a commit replayed after a failure is skipped. The table is created from
the rows' type when the job is submitted, if it does not exist.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.common.typeinfo import TypeInformation
from tidegate.connectors.table_commit import (
    PendingCommit,
    TableCommittable,
    TableSink,
    TableSinkBuilder,
    before_deciding_again,
    pending_commits,
)
from tidegate.connectors.table_files import DEFAULT_TARGET_FILE_SIZE, check_partition_columns
from tidegate.formats.arrow_row import arrow_schema

__all__ = ["DeltaCommitter", "DeltaSink", "DeltaSinkBuilder", "DeltaTableError"]

log = logging.getLogger(__name__)


class DeltaTableError(RuntimeError):
    """The Delta table cannot be opened, created or written as the sink needs."""


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the Delta Lake sink needs the deltalake package: pip install 'tidegate[lakehouse]'"
        ) from e
    return deltalake


def _columns(schema: Any) -> list[tuple[str, Any]]:
    """(name, type) of a delta-rs schema's fields, nullability left out."""
    return [(f["name"], f["type"]) for f in json.loads(schema.to_json())["fields"]]


@dataclass(frozen=True)
class Compaction:
    """Small-file compaction: after every `every_checkpoints`-th checkpoint that writer index 0
    committed, its committer rewrites the table's small files into files of about
    `target_file_size` bytes (delta-rs `optimize.compact`)."""

    every_checkpoints: int
    target_file_size: int


@dataclass(frozen=True)
class DeltaSink(TableSink):
    """A two-phase-commit sink (connectors/base.py) appending rows to a Delta table."""

    keep_partition_columns = False
    what = "a DeltaSink"

    table_path: str
    partition_by: tuple[str, ...] = ()
    storage_options: tuple[tuple[str, str], ...] = ()
    configuration: tuple[tuple[str, str], ...] = ()
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    compaction: Compaction | None = None
    row_type: TypeInformation | None = None
    schema: pa.Schema | None = None
    filesystems: FileSystems = NO_OPTIONS
    uid: str = ""
    job_id: str = ""

    @staticmethod
    def builder() -> DeltaSinkBuilder:
        return DeltaSinkBuilder()

    # binding (connectors/base.py) --------------------------------------------------------------
    def for_input_type(self, type_info: TypeInformation | None) -> DeltaSink:
        """The table's schema from the stream's declared Types.ROW_NAMED type."""
        schema = arrow_schema(type_info, self.what)
        if any(pa.types.is_time(f.type) for f in schema):
            raise TypeError("Delta tables have no TIME type: declare SQL_TIME fields as STRING")
        check_partition_columns(schema, self.partition_by)
        return replace(self, row_type=type_info, schema=schema)

    def with_filesystems(self, filesystems: FileSystems) -> DeltaSink:
        """Called on the driver when the job is submitted: opens the table, creating it from the
        rows' schema if it does not exist, and checks that an existing table has that schema
        and partitioning (DeltaTableError naming the difference otherwise: the job does not
        start). Data files are written with the job's `filesystems` options; delta-rs opens the
        table with the storage options (`set_storage_options`)."""
        sink = replace(self, filesystems=filesystems)
        sink.ensure_table()
        return sink

    def shared_paths(self) -> tuple[str, ...]:
        """The table's directory: every slot writes data files into it."""
        return (self.table_path,)

    # the table -------------------------------------------------------------------------------
    def open_table(self) -> Any:
        """The table as delta-rs opens it; DeltaTableError if it does not exist or cannot be
        reached."""
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.table_path, storage_options=self._options())
        except deltalake.exceptions.TableNotFoundError as e:
            raise DeltaTableError(f"no Delta table at {self.table_path}: {e}") from e
        except (deltalake.exceptions.DeltaError, OSError) as e:
            raise DeltaTableError(
                f"cannot open the Delta table at {self.table_path}: {e}; check the path and "
                "the storage options (set_storage_options)"
            ) from e

    def ensure_table(self) -> None:
        """Create the table if missing; check an existing one's schema and partitioning."""
        if self.schema is None:
            raise TypeError("a DeltaSink is added with stream.sink_to(sink), which types it")
        deltalake = _deltalake()
        try:
            deltalake.DeltaTable.create(
                self.table_path,
                self.schema,
                partition_by=list(self.partition_by) or None,
                mode="ignore",
                configuration=dict(self.configuration) or None,
                storage_options=self._options(),
            )
        except (deltalake.exceptions.DeltaError, OSError) as e:
            raise DeltaTableError(
                f"cannot create or open the Delta table at {self.table_path}: {e}; check the "
                "path, its permissions and the storage options (set_storage_options)"
            ) from e
        table = self.open_table()
        want = _columns(deltalake.Schema.from_arrow(self.schema))
        have = _columns(table.schema())
        if want != have:
            raise DeltaTableError(
                f"the Delta table at {self.table_path} has the columns {have}, the rows have "
                f"{want}: write to another table, or declare the stream's type to match"
            )
        partitions = tuple(table.metadata().partition_columns)
        if partitions != self.partition_by:
            raise DeltaTableError(
                f"the Delta table at {self.table_path} is partitioned by {list(partitions)}, "
                f"the sink by {list(self.partition_by)}: set_partition_columns to match"
            )

    def _options(self) -> dict[str, str] | None:
        return dict(self.storage_options) or None

    def data_root(self) -> str:
        return self.table_path

    def recorded_checkpoints(self) -> Callable[[str], int | None]:
        return self.open_table().transaction_version

    # the sink --------------------------------------------------------------------------------
    def create_committer(self) -> DeltaCommitter:
        """Commits the committables of any writer index of this sink (each under its own
        application id); opens the table when it first commits."""
        return DeltaCommitter(self)


class DeltaCommitter:
    """Step 3 of table_commit.py on a Delta table (a Committer)."""

    def __init__(self, sink: DeltaSink) -> None:
        self._sink = sink
        self._table: Any = None
        self._fs, _ = sink.filesystems.resolve(sink.table_path)

    def commit(self, committables: list[TableCommittable]) -> None:
        if not committables:
            return
        deltalake = _deltalake()
        for decision in itertools.count(1):
            table = self._fresh_table()
            commits = pending_commits(committables, table.transaction_version)
            if not commits:
                return
            try:
                for pending in commits:
                    self._commit_one(table, pending)
                    table.update_incremental()
            except deltalake.exceptions.CommitFailedError as e:
                # delta-rs retries appends that only raced other appends by itself; it gives
                # up with "Concurrent transaction" when a winner recorded the same app id
                if "Concurrent transaction" not in str(e):
                    raise
                before_deciding_again(decision, self._sink.table_path, e)
                continue
            self._compact(table, commits)
            return

    def _fresh_table(self) -> Any:
        if self._table is None:
            self._table = self._sink.open_table()
        else:
            self._table.update_incremental()
        return self._table

    def _commit_one(self, table: Any, pending: PendingCommit) -> None:
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        now_ms = int(time.time() * 1000)
        actions = []
        for f in pending.files:
            if not self._fs.exists(f.path):
                raise DeltaTableError(
                    f"cannot commit {f.path} to {self._sink.table_path}: the data file is gone "
                    "(removed by hand or by a VACUUM with a retention shorter than a restore); "
                    "its records are lost"
                )
            stats = json.dumps({"numRecords": f.record_count})
            path = quote(f.relative_path, safe="/=")
            actions.append(AddAction(path, f.size, dict(f.partition), now_ms, True, stats))
        table.create_write_transaction(
            actions,
            "append",
            table.schema(),
            partition_by=list(self._sink.partition_by) or None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(pending.app_id, pending.version)],
                custom_metadata={"tidegate.checkpoint-id": pending.version},
            ),
        )

    def _compact(self, table: Any, commits: list[PendingCommit]) -> None:
        compaction = self._sink.compaction
        if compaction is None or not any(
            c.writer == 0 and c.version % compaction.every_checkpoints == 0 for c in commits
        ):
            return
        deltalake = _deltalake()
        try:
            metrics = table.optimize.compact(target_size=compaction.target_file_size)
        except deltalake.exceptions.CommitFailedError as e:
            # a concurrent rewrite of the same files: the next compaction takes them
            log.warning("compaction of %s skipped: %s", self._sink.table_path, e)
            return
        log.info("compacted %s: %s", self._sink.table_path, metrics)


class DeltaSinkBuilder(TableSinkBuilder):
    """`DeltaSink.builder().set_table_path(path)...build()`."""

    def __init__(self) -> None:
        super().__init__()
        self._path: str | None = None

    def set_table_path(self, path: str) -> DeltaSinkBuilder:
        """The table's directory or URL (created with the table if missing)."""
        self._path = str(path)
        return self

    def set_storage_options(self, options: dict[str, str]) -> DeltaSinkBuilder:
        """delta-rs storage options (object_store keys: AWS_ENDPOINT_URL, ...) for the table's
        log; data files are written with the job's filesystem options."""
        self._changes["storage_options"] = tuple(sorted(options.items()))
        return self

    def set_table_properties(self, properties: dict[str, str]) -> DeltaSinkBuilder:
        """Table properties of a table the sink creates (`delta.logRetentionDuration`, ...)."""
        self._changes["configuration"] = tuple(sorted(properties.items()))
        return self

    def set_compaction(
        self, every_checkpoints: int = 10, target_file_size: int = 128 * 1024 * 1024
    ) -> DeltaSinkBuilder:
        """Compact small files every `every_checkpoints` checkpoints (Compaction)."""
        if every_checkpoints <= 0 or target_file_size <= 0:
            raise ValueError(
                f"compaction needs every_checkpoints > 0 and target_file_size > 0, got "
                f"{every_checkpoints}, {target_file_size}"
            )
        self._changes["compaction"] = Compaction(every_checkpoints, target_file_size)
        return self

    def build(self) -> DeltaSink:
        if not self._path:
            raise ValueError("a DeltaSink needs a table: call set_table_path(path)")
        return DeltaSink(self._path, **self._changes)
