"""Exactly-once Apache Iceberg sink on pyiceberg, by the protocol of table_commit.py:

    sink = (
        IcebergSink.builder()
        .set_catalog("lake", {"type": "sql", "uri": "sqlite:////data/catalog.db",
                              "warehouse": "file:///data/warehouse"})
        .set_table("analytics.totals")
        .build()
    )
    rows.sink_to(sink)   # rows declared with Types.ROW_NAMED(...)

Each sink subtask writes its records of a checkpoint interval as Parquet data files under the
table's `data/` directory at the checkpoint; when the checkpoint completes they are added to
the table in one snapshot (`add_files`) whose summary carries the writer's app id and the
checkpoint id, so a commit replayed after a failure is skipped. A commit is made conditional
on the table's current snapshot being the one the decision read (pyiceberg's own commit
retries are switched off for it): a concurrent commit fails it and the decision is taken
again. The namespace and table are created from the rows' type when the job is submitted, if
they do not exist (partitioned by identity on the partition columns).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

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

__all__ = ["IcebergCommitter", "IcebergSink", "IcebergSinkBuilder", "IcebergTableError"]

log = logging.getLogger(__name__)

#: the snapshot summary properties of a commit (table_commit.py step 3)
APP_ID = "tidegate.app-id"
CHECKPOINT_ID = "tidegate.checkpoint-id"


class IcebergTableError(RuntimeError):
    """The Iceberg catalog or table cannot be used as the sink needs."""


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the Iceberg sink needs pyiceberg: pip install 'tidegate[lakehouse]'"
        ) from e
    return pyiceberg


def committed_checkpoint(table: Any, app: str) -> int | None:
    """The highest checkpoint id a snapshot of `table` recorded for `app` (None: none)."""
    found = [
        int(s.summary[CHECKPOINT_ID])
        for s in table.metadata.snapshots
        if s.summary is not None and s.summary.get(APP_ID) == app
    ]
    return max(found, default=None)


@dataclass(frozen=True)
class IcebergSink(TableSink):
    """A two-phase-commit sink (connectors/base.py) appending rows to an Iceberg table."""

    keep_partition_columns = True
    what = "an IcebergSink"

    catalog_name: str
    catalog_properties: tuple[tuple[str, str], ...]
    table: str
    partition_by: tuple[str, ...] = ()
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    row_type: TypeInformation | None = None
    schema: pa.Schema | None = None
    #: the table's location (a URL), found when the job is submitted
    location: str = ""
    filesystems: FileSystems = NO_OPTIONS
    uid: str = ""
    job_id: str = ""

    @staticmethod
    def builder() -> IcebergSinkBuilder:
        return IcebergSinkBuilder()

    # binding (connectors/base.py) --------------------------------------------------------------
    def for_input_type(self, type_info: TypeInformation | None) -> IcebergSink:
        """The table's schema from the stream's declared Types.ROW_NAMED type."""
        schema = arrow_schema(type_info, self.what)
        check_partition_columns(schema, self.partition_by)
        return replace(self, row_type=type_info, schema=schema)

    def with_filesystems(self, filesystems: FileSystems) -> IcebergSink:
        """Called on the driver when the job is submitted: creates the namespace and table if
        missing, checks an existing table's schema and partitioning (IcebergTableError naming
        the difference: the job does not start), and learns the table's location. Data files are
        written there with the job's `filesystems` options."""
        table = replace(self, filesystems=filesystems).ensure_table()
        return replace(self, filesystems=filesystems, location=table.location().rstrip("/"))

    def shared_paths(self) -> tuple[str, ...]:
        """The table's data directory: every slot writes data files into it."""
        return (self.data_root(),)

    # the table -------------------------------------------------------------------------------
    def catalog(self) -> Any:
        pyiceberg = _pyiceberg()
        try:
            return pyiceberg.catalog.load_catalog(
                self.catalog_name, **dict(self.catalog_properties)
            )
        except Exception as e:  # pyiceberg raises many kinds for a bad configuration
            raise IcebergTableError(
                f"cannot open the Iceberg catalog {self.catalog_name!r} "
                f"({sorted(dict(self.catalog_properties))}): {e}"
            ) from e

    def load_table(self, catalog: Any = None) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        catalog = catalog or self.catalog()
        try:
            return catalog.load_table(self.table)
        except NoSuchTableError as e:
            raise IcebergTableError(
                f"no Iceberg table {self.table} in catalog {self.catalog_name!r}"
            ) from e

    def ensure_table(self) -> Any:
        """The table, created if missing; its schema and partitioning checked."""
        from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible
        from pyiceberg.transforms import IdentityTransform

        if self.schema is None:
            raise TypeError("an IcebergSink is added with stream.sink_to(sink), which types it")
        catalog = self.catalog()
        namespace = self.table.rpartition(".")[0]
        if not namespace:
            raise IcebergTableError(f"name the table as <namespace>.<table>, got {self.table!r}")
        try:
            catalog.create_namespace_if_not_exists(namespace)
            if not catalog.table_exists(self.table):
                create = catalog.create_table_transaction(self.table, schema=self.schema)
                with create.update_spec() as spec:
                    for column in self.partition_by:
                        spec.add_identity(column)
                create.commit_transaction()
            table = catalog.load_table(self.table)
        except IcebergTableError:
            raise
        except Exception as e:
            raise IcebergTableError(
                f"cannot create or open the Iceberg table {self.table} in catalog "
                f"{self.catalog_name!r}: {e}"
            ) from e
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # it also prints its diff table
                _check_pyarrow_schema_compatible(table.schema(), self.schema)
        except ValueError as e:
            raise IcebergTableError(
                f"the Iceberg table {self.table} does not have the rows' schema: write to "
                f"another table, or declare the stream's type to match. {e}"
            ) from None
        schema = table.schema()
        partitions = tuple(
            schema.find_field(f.source_id).name
            for f in table.spec().fields
            if isinstance(f.transform, IdentityTransform)
        )
        if partitions != self.partition_by or len(partitions) != len(table.spec().fields):
            raise IcebergTableError(
                f"the Iceberg table {self.table} is partitioned by {table.spec()}, the sink by "
                f"identity on {list(self.partition_by)}: set_partition_columns to match"
            )
        return table

    def data_root(self) -> str:
        if not self.location:
            raise RuntimeError(f"{self.what} runs inside a job, added with stream.sink_to(sink)")
        return f"{self.location}/data"

    def recorded_checkpoints(self) -> Callable[[str], int | None]:
        return functools.partial(committed_checkpoint, self.load_table())

    # the sink --------------------------------------------------------------------------------
    def create_committer(self) -> IcebergCommitter:
        """Commits the committables of any writer index of this sink (each under its own
        application id); opens the catalog when it first commits."""
        return IcebergCommitter(self)


class IcebergCommitter:
    """Step 3 of table_commit.py on an Iceberg table (a Committer)."""

    def __init__(self, sink: IcebergSink) -> None:
        self._sink = sink
        self._catalog: Any = None

    def commit(self, committables: list[TableCommittable]) -> None:
        if not committables:
            return
        from pyiceberg.exceptions import CommitFailedException

        if self._catalog is None:
            self._catalog = self._sink.catalog()
        for decision in itertools.count(1):
            table = self._sink.load_table(self._catalog)
            commits = pending_commits(committables, functools.partial(committed_checkpoint, table))
            if not commits:
                return
            try:
                for pending in commits:
                    self._commit_one(table, pending)
            except CommitFailedException as e:
                before_deciding_again(decision, self._sink.table, e)
                continue
            return

    def _commit_one(self, table: Any, pending: PendingCommit) -> None:
        """One snapshot adding `pending`'s files, committed only if the table's current
        snapshot is still the one read: pyiceberg would otherwise retry the commit on a newer
        snapshot without our decision, so its retries are switched off for this commit (in the
        table object's copy of the properties only; the catalog keeps the table's own)."""
        metadata = table.metadata
        table.metadata = metadata.model_copy(
            update={"properties": {**metadata.properties, "commit.retry.num-retries": "0"}}
        )
        root = self._sink.data_root()
        table.add_files(
            [f"{root}/{f.relative_path}" for f in pending.files],
            snapshot_properties={APP_ID: pending.app_id, CHECKPOINT_ID: str(pending.version)},
            check_duplicate_files=False,
        )


class IcebergSinkBuilder(TableSinkBuilder):
    """`IcebergSink.builder().set_catalog(name, properties).set_table("ns.table")...build()`."""

    def __init__(self) -> None:
        super().__init__()
        self._catalog: tuple[str, tuple[tuple[str, str], ...]] | None = None
        self._table: str | None = None

    def set_catalog(self, name: str, properties: dict[str, str]) -> IcebergSinkBuilder:
        """The catalog as pyiceberg's `load_catalog(name, **properties)` opens it (e.g. a SQL
        catalog: type=sql, uri=sqlite:///... or postgresql+psycopg2://..., warehouse=...)."""
        self._catalog = (name, tuple(sorted(properties.items())))
        return self

    def set_table(self, identifier: str) -> IcebergSinkBuilder:
        """`<namespace>.<table>`; created (with its namespace) if missing."""
        self._table = identifier
        return self

    def build(self) -> IcebergSink:
        if self._catalog is None:
            raise ValueError("an IcebergSink needs a catalog: call set_catalog(name, properties)")
        if not self._table:
            raise ValueError("an IcebergSink needs a table: call set_table('namespace.table')")
        return IcebergSink(self._catalog[0], self._catalog[1], self._table, **self._changes)
