"""Reading one chunk of a table's snapshot: the next `limit` rows in primary-key order after
the last key emitted, in a REPEATABLE READ transaction whose MVCC snapshot comes back with the
rows (handoff.py explains why that makes the handoff to the stream exact)."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from tidegate.connectors.postgres_cdc.handoff import XidSnapshot
from tidegate.connectors.postgres_cdc.server import PostgresCdcError, TableInfo
from tidegate.connectors.postgres_cdc.values import TEXT_ORDERED_KEY_TYPES, parser

__all__ = ["TableDecoder", "read_chunk"]


class TableDecoder:
    """Turns a table's rows of text values into Python values; `key(values)` is their
    primary key as a tuple."""

    def __init__(self, table: TableInfo) -> None:
        self.table = table
        self.names = [c.name for c in table.columns]
        self._parsers = [parser(c.type_oid) for c in table.columns]
        key = itemgetter(*table.key)
        self.key: Callable[[list[Any]], tuple[Any, ...]] = (
            key if len(table.key) > 1 else lambda values: (key(values),)
        )

    def values(self, texts: tuple[Any, ...]) -> list[Any]:
        try:
            return [None if t is None else p(t) for p, t in zip(self._parsers, texts, strict=True)]
        except ValueError:
            raise PostgresCdcError(self._unreadable(texts)) from None

    def _unreadable(self, texts: tuple[Any, ...]) -> str:
        for column, parse, text in zip(self.table.columns, self._parsers, texts, strict=True):
            try:
                if text is not None:
                    parse(text)
            except ValueError:
                return (
                    f"table {self.table.qualified}, column {column.name}: the value {text!r} "
                    "has no Python equivalent (infinite dates and timestamps, BC dates, numeric "
                    "NaN as a key are not supported)"
                )
        return f"table {self.table.qualified}: a row does not fit its columns: {texts!r}"


def _chunk_query(table: TableInfo, after: bool) -> Any:
    from psycopg import sql

    def key_column(i: int) -> sql.Composable:
        column = table.columns[i]
        ident = sql.Identifier(column.name)
        if column.type_oid in TEXT_ORDERED_KEY_TYPES:
            return sql.SQL('{} COLLATE "C"').format(ident)  # code point order, as Python's
        return ident

    keys = sql.SQL(", ").join(key_column(i) for i in table.key)
    texts = sql.SQL(", ").join(  # aliased: ORDER BY must see the columns, not their text
        sql.SQL("{}::text AS {}").format(
            sql.Identifier(c.name), sql.Identifier(f"tidegate column {i}")
        )
        for i, c in enumerate(table.columns)
    )
    where = sql.SQL("")
    if after:
        params = sql.SQL(", ").join(sql.Placeholder() for _ in table.key)
        where = sql.SQL(" WHERE ({}) > ({})").format(keys, params)
    return sql.SQL("SELECT {} FROM {}{} ORDER BY {} LIMIT %s").format(
        texts, sql.Identifier(table.schema, table.name), where, keys
    )


def read_chunk(
    conn: Any, decoder: TableDecoder, after: tuple[Any, ...] | None, limit: int
) -> tuple[list[list[Any]], XidSnapshot, bool]:
    """The rows (Python values, in key order) of the chunk after key `after` (None: from the
    first key), the MVCC snapshot they were read in, and whether they end the table (fewer
    than `limit` rows)."""
    from psycopg import IsolationLevel

    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    conn.read_only = True  # BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
    query = _chunk_query(decoder.table, after is not None)
    with conn.transaction():
        # the transaction's snapshot is taken by its first statement, this one
        (text,) = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
        texts = conn.execute(query, (*(after or ()), limit)).fetchall()
    return [decoder.values(r) for r in texts], XidSnapshot.parse(text), len(texts) < limit
