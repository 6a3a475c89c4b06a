"""The exactly-once sink's prepared transactions and commit markers in PostgreSQL (I/O; the
decisions are in gids.py): list, commit and roll back prepared transactions by gid, and the
marker table that proves a transaction committed.

Every transaction the sink prepares also inserts its gid into the table `MARKER_TABLE` (in
the connection's search path); the row is visible if and only if the transaction committed.
So when `COMMIT PREPARED` finds no such gid, the marker tells "committed already" from
"rolled back or lost". Markers older than `MARKER_TTL` are deleted (by the committer of each
writer index, and at recovery), so restoring a snapshot older than that cannot tell those two
apart any more and reports the transaction as lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidegate.connectors.jdbc.gids import GID_PREFIX, Gid, parse_gid

__all__ = [
    "MARKER_TABLE",
    "PreparedTransaction",
    "commit_prepared",
    "create_marker_table",
    "delete_old_markers",
    "insert_marker",
    "list_prepared",
    "marker_exists",
    "prepare",
    "rollback_prepared",
]

MARKER_TABLE = "tidegate_jdbc_commits"
#: how long a commit marker is kept
MARKER_TTL = "7 days"


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A row of `pg_prepared_xacts` that the sink prepared (its gid parsed)."""

    gid: Gid
    prepared: datetime
    owner: str
    database: str


def _sql(template: str, *literals: str) -> Any:
    """A utility statement with string literals in it (they take no bound parameters)."""
    from psycopg import sql

    return sql.SQL(template).format(*map(sql.Literal, literals))


def list_prepared(conn: Any) -> list[PreparedTransaction]:
    """The sink's prepared transactions in the connection's database, oldest first."""
    rows = conn.execute(
        "SELECT gid, prepared, owner, database FROM pg_prepared_xacts "
        "WHERE database = current_database() AND gid LIKE %s ORDER BY prepared, gid",
        (f"{GID_PREFIX}:%",),
    ).fetchall()
    found = []
    for text, prepared, owner, database in rows:
        gid = parse_gid(text)
        if gid is not None:
            found.append(PreparedTransaction(gid, prepared, owner, database))
    return found


def prepare(conn: Any, gid: str) -> None:
    """PREPARE TRANSACTION: the open transaction is on disk, invisible until committed."""
    conn.execute(_sql("PREPARE TRANSACTION {}", gid))


def commit_prepared(conn: Any, gid: str) -> bool:
    """COMMIT PREPARED on an autocommit connection; False if no such prepared transaction."""
    from psycopg import errors

    try:
        conn.execute(_sql("COMMIT PREPARED {}", gid))
    except errors.UndefinedObject:
        return False
    return True


def rollback_prepared(conn: Any, gid: str) -> bool:
    """ROLLBACK PREPARED on an autocommit connection; False if no such prepared transaction
    (another process resolved it meanwhile)."""
    from psycopg import errors

    try:
        conn.execute(_sql("ROLLBACK PREPARED {}", gid))
    except errors.UndefinedObject:
        return False
    return True


def create_marker_table(conn: Any) -> None:
    """Create the marker table if missing (autocommit connection). An existing table is not
    touched: even `CREATE INDEX IF NOT EXISTS` would wait for the table lock that every
    prepared transaction holds (it inserted its marker). A session advisory lock keeps
    concurrent subtasks from racing on the creation; the check after it runs in a new
    transaction, which sees a table another subtask has just created."""
    if _exists(conn):
        return
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (MARKER_TABLE,))
    try:
        if _exists(conn):
            return
        with conn.transaction():
            conn.execute(
                f"CREATE TABLE {MARKER_TABLE} ("
                " gid text PRIMARY KEY,"
                " job_id text NOT NULL,"
                " writer integer NOT NULL,"
                " checkpoint_id bigint NOT NULL,"
                " prepared_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(
                f"CREATE INDEX {MARKER_TABLE}_by_writer "
                f"ON {MARKER_TABLE} (job_id, writer, prepared_at)"
            )
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (MARKER_TABLE,))


def _exists(conn: Any) -> bool:
    return conn.execute("SELECT to_regclass(%s)", (MARKER_TABLE,)).fetchone()[0] is not None


def insert_marker(conn: Any, gid: Gid) -> None:
    """In the transaction being prepared: its marker."""
    conn.execute(
        f"INSERT INTO {MARKER_TABLE} (gid, job_id, writer, checkpoint_id) VALUES (%s, %s, %s, %s)",
        (str(gid), gid.job_id, gid.writer, gid.checkpoint_id),
    )


def marker_exists(conn: Any, gid: str) -> bool:
    row = conn.execute(f"SELECT 1 FROM {MARKER_TABLE} WHERE gid = %s", (gid,)).fetchone()
    return row is not None


def delete_old_markers(conn: Any, job_id: str | None = None, writer: int | None = None) -> None:
    """Delete markers older than MARKER_TTL: of one job's writer index, or all."""
    where = f"prepared_at < now() - interval '{MARKER_TTL}'"
    params: tuple[Any, ...] = ()
    if job_id is not None:
        where += " AND job_id = %s AND writer = %s"
        params = (job_id, writer)
    conn.execute(f"DELETE FROM {MARKER_TABLE} WHERE {where}", params)
