"""A decoder of PostgreSQL's `pgoutput` logical replication messages, protocol version 1
(PostgreSQL 10+; the message formats of the "Logical Replication Message Formats" chapter).

Pure: `decode(payload)` turns the bytes of one XLogData message into one of the dataclasses
below. Column values stay in PostgreSQL's text format (`str`, None for NULL, `UNCHANGED` for
a TOASTed value an UPDATE did not change); values.py converts them by type. No maintained
decoder is on PyPI (pypgoutput 0.0.3 is from 2022 and pulls in pydantic), and the format is
small, so tidegate keeps its own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "UNCHANGED",
    "Begin",
    "Column",
    "Commit",
    "Delete",
    "Insert",
    "Relation",
    "Truncate",
    "Update",
    "decode",
]


class _Unchanged:
    """The value of a TOASTed column an UPDATE left as it was (pgoutput's 'u')."""

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()

Tuple = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """A transaction starts; `final_lsn` is the LSN of its commit record."""

    final_lsn: int
    commit_time_us: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction ends; `end_lsn` is the end of its commit record: decoding restarted there
    skips it and everything committed before it."""

    commit_lsn: int
    end_lsn: int
    commit_time_us: int


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    is_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    """A table's shape, sent before the first change of it on a connection (and again after
    it changed). `replica_identity`: 'd' default, 'n' nothing, 'f' full, 'i' index."""

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    relation_oid: int
    new: Tuple


@dataclass(frozen=True, slots=True)
class Update:
    """`old` is the whole old row under REPLICA IDENTITY FULL ('O'), the old key if the key
    changed ('K', other columns None), or None."""

    relation_oid: int
    old: Tuple | None
    old_is_key_only: bool
    new: Tuple


@dataclass(frozen=True, slots=True)
class Delete:
    relation_oid: int
    old: Tuple
    old_is_key_only: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_oids: tuple[int, ...]


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | None

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_BEGIN = struct.Struct("!QqI")
_COMMIT = struct.Struct("!BQQq")


class _Cursor:
    """Reads big-endian fields of one message in order."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def byte(self) -> str:
        b = self.buf[self.pos : self.pos + 1]
        if not b:
            raise ValueError("pgoutput message ends early")
        self.pos += 1
        return b.decode("ascii")

    def unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        values = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return values

    def string(self) -> str:
        end = self.buf.index(b"\0", self.pos)
        text = self.buf[self.pos : end].decode()
        self.pos = end + 1
        return text

    def tuple_data(self) -> Tuple:
        values, self.pos = _tuple_data(self.buf, self.pos)
        return values


_NULL, _TOAST, _TEXT = ord("n"), ord("u"), ord("t")


def _tuple_data(buf: bytes, pos: int) -> tuple[Tuple, int]:
    """A TupleData at `pos`: its values and the position after it (the hot path: inlined)."""
    n = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    values: list[Any] = []
    append = values.append
    for _ in range(n):
        kind = buf[pos]
        pos += 1
        if kind == _TEXT:
            length = int.from_bytes(buf[pos : pos + 4], "big")
            pos += 4
            append(buf[pos : pos + length].decode())
            pos += length
        elif kind == _NULL:
            append(None)
        elif kind == _TOAST:
            append(UNCHANGED)
        else:
            raise ValueError(f"pgoutput column kind {chr(kind)!r} is not text (binary mode is off)")
    return tuple(values), pos


def decode(payload: bytes) -> Message:
    """The message in `payload`; None for kinds tidegate does not use (Origin, Type,
    logical decoding messages)."""
    kind = chr(payload[0])
    c = _Cursor(payload, 1)
    if kind == "B":
        return Begin(*c.unpack(_BEGIN))
    if kind == "C":
        _flags, commit_lsn, end_lsn, ts = c.unpack(_COMMIT)
        return Commit(commit_lsn, end_lsn, ts)
    if kind == "R":
        (oid,) = c.unpack(_U32)
        namespace, name = c.string(), c.string()
        identity = c.byte()
        (n,) = c.unpack(_I16)
        columns = []
        for _ in range(n):
            flags = c.buf[c.pos]
            c.pos += 1
            col_name = c.string()
            type_oid, _typmod = struct.unpack_from("!Ii", c.buf, c.pos)
            c.pos += 8
            columns.append(Column(col_name, type_oid, bool(flags & 1)))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if kind == "I":
        (oid,) = c.unpack(_U32)
        if c.byte() != "N":
            raise ValueError("pgoutput Insert without a new tuple")
        return Insert(oid, c.tuple_data())
    if kind == "U":
        (oid,) = c.unpack(_U32)
        marker = c.byte()
        old = None
        if marker in ("K", "O"):
            old = c.tuple_data()
            key_only = marker == "K"
            marker = c.byte()
        else:
            key_only = False
        if marker != "N":
            raise ValueError(f"pgoutput Update: expected a new tuple, got {marker!r}")
        return Update(oid, old, key_only, c.tuple_data())
    if kind == "D":
        (oid,) = c.unpack(_U32)
        marker = c.byte()
        if marker not in ("K", "O"):
            raise ValueError(f"pgoutput Delete: expected an old tuple, got {marker!r}")
        return Delete(oid, c.tuple_data(), marker == "K")
    if kind == "T":
        (n,) = c.unpack(_I32)
        c.pos += 1  # options: CASCADE, RESTART IDENTITY
        return Truncate(tuple(struct.unpack_from(f"!{n}I", c.buf, c.pos)))
    if kind in ("O", "Y", "M"):
        return None
    raise ValueError(
        f"pgoutput message kind {kind!r} is not part of protocol version 1 "
        "(streamed or two-phase transactions are not requested)"
    )
