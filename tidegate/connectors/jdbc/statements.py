"""The sink's SQL statement: JDBC `?` placeholders turned into psycopg's `%s`, and records
turned into statement parameters. Pure.

`to_psycopg` reads the statement as PostgreSQL's lexer does, so a `?` inside a string
('...', E'...' with backslash escapes, $tag$...$tag$), a quoted identifier ("...") or a
comment (-- and /* */, nested) is kept as written; `??` outside them is PgJDBC's escape of a
literal `?` (the jsonb operators `?`, `?|`, `?&`). psycopg reads `%` everywhere as the start of
a placeholder, so every `%` becomes `%%`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidegate.common.types import Row

__all__ = ["JdbcStatement", "to_psycopg"]

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def _skip_quoted(sql: str, i: int, quote: str, backslashes: bool) -> int:
    """The index after the literal or identifier starting at `sql[i]` (a doubled quote is
    one quote character; with `backslashes`, a backslash escapes the next character)."""
    j = i + 1
    while j < len(sql):
        c = sql[j]
        if backslashes and c == "\\":
            j += 2
            continue
        if c == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    raise ValueError(f"unterminated {quote} quote in the statement: {sql!r}")


def _skip_block_comment(sql: str, i: int) -> int:
    depth, j = 0, i
    while j < len(sql):
        if sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    raise ValueError(f"unterminated /* comment in the statement: {sql!r}")


def _tokens(sql: str) -> Iterable[tuple[bool, str]]:
    """The statement in pieces: (True, text) where placeholders may be, (False, text) for
    strings, quoted identifiers and comments."""
    i, start = 0, 0
    n = len(sql)
    while i < n:
        c = sql[i]
        end = None
        if c == "'":
            escaped = i > 0 and sql[i - 1] in "eE" and (i < 2 or not sql[i - 2].isalnum())
            end = _skip_quoted(sql, i, "'", escaped)
        elif c == '"':
            end = _skip_quoted(sql, i, '"', False)
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            end = n if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            end = _skip_block_comment(sql, i)
        elif c == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            tag = _DOLLAR_TAG.match(sql, i)
            if tag is not None:
                close = sql.find(tag.group(0), tag.end())
                if close < 0:
                    raise ValueError(f"unterminated {tag.group(0)} quote in the statement: {sql!r}")
                end = close + len(tag.group(0))
        if end is None:
            i += 1
            continue
        if start < i:
            yield True, sql[start:i]
        yield False, sql[i:end]
        i = start = end
    if start < n:
        yield True, sql[start:]


def to_psycopg(sql: str) -> tuple[str, int]:
    """(`sql` with psycopg placeholders, the number of parameters)."""
    out: list[str] = []
    count = 0
    for code, text in _tokens(sql):
        text = text.replace("%", "%%")
        if not code:
            out.append(text)
            continue
        pieces = text.split("??")
        for k, piece in enumerate(pieces):
            count += piece.count("?")
            out.append(piece.replace("?", "%s"))
            if k < len(pieces) - 1:
                out.append("?")
    return "".join(out), count


@dataclass(frozen=True, slots=True)
class JdbcStatement:
    """The user's statement (JDBC placeholders), its psycopg form, and how many fields each
    record has (`type_info`'s, which must be as many as the placeholders)."""

    sql: str
    query: str
    arity: int

    @staticmethod
    def of(sql: str, type_info: Any) -> JdbcStatement:
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"a JdbcSink needs an SQL statement, got {sql!r}")
        query, placeholders = to_psycopg(sql)
        field_types = getattr(type_info, "get_field_types", None)
        if field_types is None:
            raise TypeError(
                "a JdbcSink needs the records' type as Types.ROW([...]) / Types.ROW_NAMED(...) "
                f"(or Types.TUPLE([...])), one field per ? of the statement, got {type_info!r}"
            )
        arity = len(field_types())
        if arity != placeholders:
            raise ValueError(
                f"the statement has {placeholders} ? placeholder(s) but the type {type_info!r} "
                f"has {arity} field(s): {sql!r}"
            )
        return JdbcStatement(sql, query, arity)

    def parameters(self, records: Iterable[Any]) -> list[tuple[Any, ...]]:
        """Each record's values, by position (a Row, tuple or list of `arity` fields)."""
        rows = []
        for r in records:
            values = tuple(r) if isinstance(r, Row | tuple | list) else None
            if values is None or len(values) != self.arity:
                raise TypeError(
                    f"a JdbcSink record must be a Row or tuple of {self.arity} field(s) (the "
                    f"sink's type), got {r!r}; map the stream to such records first"
                )
            rows.append(values)
        return rows
