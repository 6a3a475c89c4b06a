"""What the source asks of and prepares on the PostgreSQL server (psycopg 3 connections):
the server settings and role privileges it needs, each table's columns and key, the
publication and the logical replication slot (created if missing), and on a restore that the
slot still holds everything after the checkpointed position.

Every misconfiguration is a `PostgresCdcError` saying what is wrong and what to run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidegate.connectors.postgres_cdc.pgoutput import Column
from tidegate.connectors.postgres_cdc.split import format_lsn, parse_lsn
from tidegate.connectors.postgres_cdc.values import CHUNKABLE_KEY_TYPES

__all__ = [
    "PostgresCdcError",
    "TableInfo",
    "check_role",
    "check_slot_holds",
    "check_wal_level",
    "ensure_publication",
    "ensure_slot",
    "read_table",
]

PLUGIN = "pgoutput"


class PostgresCdcError(RuntimeError):
    """The server, a table, the publication or the slot does not allow change capture."""


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A captured table: its columns in order and the positions of its primary key columns."""

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[int, ...]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def check_wal_level(wal_level: str) -> None:
    if wal_level != "logical":
        raise PostgresCdcError(
            f"the server runs with wal_level={wal_level}; change data capture needs "
            "wal_level=logical: set it in postgresql.conf (or ALTER SYSTEM SET wal_level = "
            "logical) and restart the server"
        )


def check_role(user: str, superuser: bool, replication: bool) -> None:
    if not (superuser or replication):
        raise PostgresCdcError(
            f"role {user!r} may not use replication: run ALTER ROLE {user} WITH REPLICATION "
            "as a superuser (and GRANT SELECT on the captured tables)"
        )


def check_server(conn: Any) -> None:
    """wal_level and the role's REPLICATION privilege."""
    check_wal_level(conn.execute("SHOW wal_level").fetchone()[0])
    row = conn.execute(
        "SELECT current_user, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    check_role(*row)


_COLUMNS = """
SELECT a.attname, a.atttypid, array_position(i.indkey::int2[], a.attnum), c.relreplident
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
ORDER BY a.attnum
"""


def read_table(conn: Any, qualified: str) -> TableInfo:
    """The table `schema.table` with its columns; a clear error if it is missing, has no
    primary key (the snapshot is read in key-ordered chunks), a key type that cannot be
    chunked, or a replica identity other than FULL (the -U and -D rows need the whole old
    row)."""
    schema, name = qualified.split(".", 1)
    rows = conn.execute(_COLUMNS, (schema, name)).fetchall()
    if not rows:
        raise PostgresCdcError(f"table {qualified} does not exist (or is not visible to this role)")
    columns = tuple(Column(r[0], r[1], r[2] is not None) for r in rows)
    key = tuple(i for _, i in sorted((r[2], i) for i, r in enumerate(rows) if r[2] is not None))
    if not key:
        raise PostgresCdcError(
            f"table {qualified} has no primary key: the source reads its snapshot in chunks of "
            f"the primary key; add one (ALTER TABLE {qualified} ADD PRIMARY KEY (...))"
        )
    unchunkable = [columns[i].name for i in key if columns[i].type_oid not in CHUNKABLE_KEY_TYPES]
    if unchunkable:
        raise PostgresCdcError(
            f"table {qualified}: primary key columns {unchunkable} have a type the snapshot "
            "cannot split into key ranges (supported: integers, numeric, text/varchar, uuid, "
            "date, timestamp(tz), bytea)"
        )
    if rows[0][3] != "f":
        raise PostgresCdcError(
            f"table {qualified} has REPLICA IDENTITY {_IDENTITY.get(rows[0][3], rows[0][3])}: "
            "updates and deletes would not carry the old row the -U/-D records need; run "
            f"ALTER TABLE {qualified} REPLICA IDENTITY FULL"
        )
    return TableInfo(schema, name, columns, key)


_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX", "f": "FULL"}


def ensure_publication(conn: Any, publication: str, tables: list[TableInfo]) -> None:
    """Create `publication` FOR TABLE the captured tables if it is missing; an existing one
    must publish them all (and their inserts, updates and deletes)."""
    from psycopg import errors, sql

    row = conn.execute(
        "SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication "
        "WHERE pubname = %s",
        (publication,),
    ).fetchone()
    if row is None:
        names = sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
        try:
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(publication), names
                )
            )
        except errors.InsufficientPrivilege as e:
            raise PostgresCdcError(
                f"cannot create publication {publication!r} ({e}): create it as the tables' "
                f"owner: CREATE PUBLICATION {publication} FOR TABLE "
                f"{', '.join(t.qualified for t in tables)}"
            ) from None
        return
    all_tables, all_changes = row
    if not all_changes:
        raise PostgresCdcError(
            f"publication {publication!r} does not publish all of insert, update and delete: "
            f"ALTER PUBLICATION {publication} SET (publish = 'insert, update, delete, truncate')"
        )
    if all_tables:
        return
    published = {
        f"{s}.{t}"
        for s, t in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (publication,),
        )
    }
    missing = [t.qualified for t in tables if t.qualified not in published]
    if missing:
        raise PostgresCdcError(
            f"publication {publication!r} does not publish {missing}: run ALTER PUBLICATION "
            f"{publication} ADD TABLE {', '.join(missing)} (or name another publication)"
        )


def _slot(conn: Any, slot: str) -> tuple[str, str, str, str | None] | None:
    return conn.execute(
        "SELECT plugin, slot_type, database, confirmed_flush_lsn::text "
        "FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()


def _check_slot_kind(conn: Any, slot: str, found: tuple[str, str, str, str | None]) -> None:
    plugin, kind, database, _ = found
    here = conn.info.dbname
    if kind != "logical" or plugin != PLUGIN or database != here:
        raise PostgresCdcError(
            f"replication slot {slot!r} is a {kind} slot of plugin {plugin} on database "
            f"{database}; the source needs a logical {PLUGIN} slot on {here}: name another "
            "slot (slot_name) or drop this one"
        )


def ensure_slot(conn: Any, slot: str) -> int:
    """The LSN the stream starts at: the slot's confirmed LSN, the slot created (logical,
    pgoutput) if it is missing. Called before the snapshot's first chunk."""
    from psycopg import errors

    found = _slot(conn, slot)
    if found is not None:
        _check_slot_kind(conn, slot, found)
        return parse_lsn(found[3])
    try:
        (lsn,) = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN)
        ).fetchone()
    except errors.ObjectNotInPrerequisiteState as e:
        raise PostgresCdcError(f"cannot create replication slot {slot!r}: {e}") from None
    except errors.DuplicateObject:  # created concurrently by another run of this job
        found = _slot(conn, slot)
        assert found is not None
        _check_slot_kind(conn, slot, found)
        return parse_lsn(found[3])
    return parse_lsn(lsn)


def check_slot_holds(conn: Any, slot: str, lsn: int) -> None:
    """After a restore: the slot must exist and not have been confirmed past `lsn`, the
    checkpointed position (else changes after it are gone and the result would be wrong)."""
    found = _slot(conn, slot)
    if found is None:
        raise PostgresCdcError(
            f"replication slot {slot!r} is missing: the changes after the checkpoint's position "
            f"{format_lsn(lsn)} are lost. Start the job without restoring (a new snapshot "
            "creates the slot again)"
        )
    _check_slot_kind(conn, slot, found)
    confirmed = parse_lsn(found[3])
    if confirmed > lsn:
        raise PostgresCdcError(
            f"replication slot {slot!r} was confirmed up to {format_lsn(confirmed)}, past the "
            f"checkpoint's position {format_lsn(lsn)}: the changes in between are lost (was "
            "an older checkpoint restored, or is another consumer reading the slot?). Restore "
            "the latest checkpoint, or start without restoring"
        )
