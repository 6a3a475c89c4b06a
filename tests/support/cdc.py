"""Helpers of the PostgreSQL CDC tests: a source builder for the test server, and applying a
changelog (Rows with RowKind +I, -U, +U, -D) to a table mirror, checking each change against
what the mirror holds: a change read twice or lost shows as an inconsistency (+I of a key
present, -U/-D of a row that is not the one held, +U without its -U)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tidegate.common.types import Row, RowKind
from tidegate.datastream.connectors.postgres_cdc import PostgresSource, PostgresSourceBuilder


def source_builder(url: str, *tables: str, slot: str) -> PostgresSourceBuilder:
    """A PostgresSource builder for the test server's `url` (trust auth), `tables`, `slot`."""
    parts = urlsplit(url)
    return (
        PostgresSource.builder()
        .hostname(parts.hostname)
        .port(parts.port)
        .database(parts.path.lstrip("/"))
        .username(parts.username)
        .table_list(*tables)
        .slot_name(slot)
        .publication_name(f"{slot}_publication")
    )


class ChangelogError(AssertionError):
    pass


def apply_change(mirror: dict[Any, tuple], key: Any, row: Row) -> None:
    """Apply `row` (its values as a tuple) to `mirror[key]`; ChangelogError if it does not fit."""
    kind, values = row.get_row_kind(), tuple(row)
    held = mirror.get(key)
    if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER):
        if held is not None:
            raise ChangelogError(f"{kind} {values}: key {key!r} already holds {held}")
        mirror[key] = values
    else:
        if held != values:
            raise ChangelogError(f"{kind} {values}: key {key!r} holds {held}")
        del mirror[key]
