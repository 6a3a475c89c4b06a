"""PostgresSource: change data capture from PostgreSQL, as Flink CDC's postgres-cdc source
does it: an initial snapshot of the chosen tables, then their changes from a logical
replication slot (`pgoutput`), as `Row`s with their RowKind (+I, -U, +U, -D), exactly once
through failures, restarts and rescaling.

    source = (
        PostgresSource.builder()
        .hostname("db.example.com").port(5432).database("shop")
        .table_list("public.orders")
        .username("cdc").password("...")
        .slot_name("orders_cdc")
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "orders changes")

One split holds all the state (split.py): which chunks of which tables the snapshot read,
with each chunk's MVCC snapshot, and the stream's position (the end LSN of the last
transaction emitted, plus how many changes of the current one). A single subtask reads it, as
Flink CDC's stream phase (one slot has one reader); after a rescale whichever subtask the
split lands on resumes it. The slot moves only when a checkpoint completed (reader.py), so a
restore finds every change after the checkpoint's position still in the slot.

The server needs wal_level=logical, a role with REPLICATION (or superuser) that may SELECT the
tables, and each table needs a primary key and REPLICA IDENTITY FULL (docs/connectors.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.common.typeinfo import RowTypeInfo, Types
from tidegate.common.types import Row
from tidegate.connectors.base import Boundedness
from tidegate.connectors.postgres_cdc.handoff import NO_SNAPSHOT
from tidegate.connectors.postgres_cdc.reader import PostgresCdcReader
from tidegate.connectors.postgres_cdc.server import PostgresCdcError, check_server, read_table
from tidegate.connectors.postgres_cdc.split import PostgresCdcSplit
from tidegate.connectors.postgres_cdc.values import SESSION_OPTIONS, type_info

__all__ = ["PostgresSource", "PostgresSourceBuilder", "StartupOptions", "row_only"]

#: Flink CDC's default chunk size of the incremental snapshot
DEFAULT_SPLIT_SIZE = 8096


@dataclass(frozen=True)
class StartupOptions:
    """Where a new job starts (Flink CDC's `scan.startup.mode`): `initial()` (the default) a
    snapshot of the tables, then their changes; `latest()` only the changes after the slot's
    position (the slot created now, or where an existing slot was confirmed); `snapshot()`
    only the snapshot, a bounded read (its chunks are each consistent, read one after the
    other, not one point in time; no slot or publication is used)."""

    mode: str

    @staticmethod
    def initial() -> StartupOptions:
        return StartupOptions("initial")

    @staticmethod
    def latest() -> StartupOptions:
        return StartupOptions("latest-offset")

    @staticmethod
    def snapshot() -> StartupOptions:
        return StartupOptions("snapshot")


def row_only(table: str, row: Row) -> Any:
    """The default deserializer: a change is its Row."""
    return row


@dataclass(frozen=True)
class PostgresSource:
    hostname: str
    port: int
    database: str
    username: str
    password: str | None
    tables: tuple[str, ...]
    slot_name: str
    publication_name: str = "dbz_publication"
    split_size: int = DEFAULT_SPLIT_SIZE
    deserializer: Callable[[str, Row], Any] = row_only
    startup_options: StartupOptions = StartupOptions("initial")
    connect_timeout_s: int = 10

    @property
    def boundedness(self) -> Boundedness:  # type: ignore[override]
        if self.startup_options.mode == "snapshot":
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    @staticmethod
    def builder() -> PostgresSourceBuilder:
        return PostgresSourceBuilder()

    @property
    def conninfo(self) -> str:
        """The libpq connection string of every connection the source opens."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.hostname,
            port=self.port,
            dbname=self.database,
            user=self.username,
            password=self.password,
            connect_timeout=self.connect_timeout_s,
            options=SESSION_OPTIONS,
        )

    def connect(self) -> Any:
        """An autocommit psycopg connection; a clear error if the server is not reachable."""
        try:
            import psycopg
        except ImportError:
            raise ImportError(
                "the PostgreSQL CDC source needs psycopg 3: pip install 'tidegate[postgres]'"
            ) from None

        try:
            return psycopg.connect(self.conninfo, autocommit=True)
        except psycopg.OperationalError as e:
            raise PostgresCdcError(
                f"cannot connect to PostgreSQL database {self.database!r} at "
                f"{self.hostname}:{self.port} as {self.username!r}: {str(e).strip()}"
            ) from None

    def get_produced_type(self) -> RowTypeInfo | None:
        """Called by `from_source` on the driver: checks the server and the tables (so a
        misconfiguration fails the job before it starts) and, for one table read without a
        deserializer, declares its rows' type (`Types.ROW_NAMED` of its columns)."""
        with self.connect() as conn:
            check_server(conn)
            tables = [read_table(conn, t) for t in self.tables]
        if len(tables) != 1 or self.deserializer is not row_only:
            return None
        columns = tables[0].columns
        return Types.ROW_NAMED([c.name for c in columns], [type_info(c.type_oid) for c in columns])

    def create_splits(self, parallelism: int) -> list[PostgresCdcSplit]:
        """The one split, without a stream position: the reader that gets it finds or creates
        the slot (so it is not created by every subtask at once). Starting from the latest
        offset, its tables are not snapshotted."""
        if self.startup_options.mode == "latest-offset":
            return [PostgresCdcSplit(self.tables, (NO_SNAPSHOT,) * len(self.tables))]
        return [PostgresCdcSplit(self.tables)]

    def create_reader(
        self, splits: list[PostgresCdcSplit], subtask_index: int, parallelism: int
    ) -> PostgresCdcReader:
        return PostgresCdcReader(self, splits)


class PostgresSourceBuilder:
    """Flink CDC's PostgresSourceBuilder with PyFlink's snake_case names."""

    def __init__(self) -> None:
        self._options: dict[str, Any] = {"port": 5432, "password": None}
        self._schemas: tuple[str, ...] = ()

    def _set(self, **options: Any) -> PostgresSourceBuilder:
        self._options.update(options)
        return self

    def hostname(self, hostname: str) -> PostgresSourceBuilder:
        return self._set(hostname=hostname)

    def port(self, port: int) -> PostgresSourceBuilder:
        return self._set(port=int(port))

    def database(self, database: str) -> PostgresSourceBuilder:
        return self._set(database=database)

    def schema_list(self, *schemas: str) -> PostgresSourceBuilder:
        """The schema of the table names given without one (one schema; default `public`)."""
        self._schemas = tuple(schemas)
        return self

    def table_list(self, *tables: str) -> PostgresSourceBuilder:
        """The captured tables, `schema.table` (or `table` in the schema_list's schema), in
        the order their snapshots are read. Names are exact (not regular expressions)."""
        return self._set(tables=tuple(tables))

    def username(self, username: str) -> PostgresSourceBuilder:
        return self._set(username=username)

    def password(self, password: str) -> PostgresSourceBuilder:
        return self._set(password=password)

    def slot_name(self, slot_name: str) -> PostgresSourceBuilder:
        """The logical replication slot (created if missing); one per job."""
        return self._set(slot_name=slot_name)

    def publication_name(self, publication_name: str) -> PostgresSourceBuilder:
        """The publication the slot decodes (created FOR TABLE the captured tables if missing;
        default `dbz_publication`, Debezium's)."""
        return self._set(publication_name=publication_name)

    def decoding_plugin_name(self, name: str) -> PostgresSourceBuilder:
        if name != "pgoutput":
            raise ValueError(f"decoding plugin {name!r} is not supported: use 'pgoutput'")
        return self

    def split_size(self, rows: int) -> PostgresSourceBuilder:
        """Rows per snapshot chunk: read in one query, emitted over several polls (default
        8096)."""
        if rows < 1:
            raise ValueError(f"split_size must be at least 1, got {rows}")
        return self._set(split_size=rows)

    def startup_options(self, options: StartupOptions) -> PostgresSourceBuilder:
        """Where a new job starts: StartupOptions.initial() (default), latest() or snapshot()."""
        if not isinstance(options, StartupOptions):
            raise TypeError(f"startup_options takes a StartupOptions, got {options!r}")
        return self._set(startup_options=options)

    def deserializer(self, deserializer: Callable[[str, Row], Any]) -> PostgresSourceBuilder:
        """`deserializer(table, row)` makes the record of a change (`table` is
        `schema.table`; `row` carries the RowKind); default: the Row itself."""
        return self._set(deserializer=deserializer)

    def build(self) -> PostgresSource:
        options = dict(self._options)
        missing = [
            k
            for k in ("hostname", "database", "username", "tables", "slot_name")
            if not options.get(k)
        ]
        if missing:
            raise ValueError(
                f"a PostgresSource needs {missing}: call "
                + ", ".join(f"{k if k != 'tables' else 'table_list'}(...)" for k in missing)
            )
        if len(self._schemas) > 1:
            raise ValueError(
                f"schema_list names {len(self._schemas)} schemas: name each table as "
                "'schema.table' in table_list instead"
            )
        schema = self._schemas[0] if self._schemas else "public"
        tables = tuple(t if "." in t else f"{schema}.{t}" for t in options["tables"])
        if len(set(tables)) != len(tables):
            raise ValueError(f"table_list names a table twice: {list(tables)}")
        options["tables"] = tables
        return PostgresSource(**options)
