"""The PostgreSQL CDC source's pure parts: the pgoutput decoder (messages built byte by byte as
the protocol documents them), the snapshot/stream handoff (MVCC visibility per chunk), LSNs,
value conversion, the server checks and the builder."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from tidegate.connectors.postgres_cdc.handoff import Chunk, TableSnapshot, XidSnapshot
from tidegate.connectors.postgres_cdc.pgoutput import (
    UNCHANGED,
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    decode,
)
from tidegate.connectors.postgres_cdc.server import (
    PostgresCdcError,
    TableInfo,
    check_role,
    check_wal_level,
)
from tidegate.connectors.postgres_cdc.snapshot import TableDecoder
from tidegate.connectors.postgres_cdc.split import format_lsn, parse_lsn
from tidegate.connectors.postgres_cdc.values import parser
from tidegate.datastream.connectors.postgres_cdc import PostgresSource


def _tuple(*values) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def test_begin_and_commit():
    assert decode(b"B" + struct.pack("!QqI", 0x1_0000_0010, 77, 4_000_000_000)) == Begin(
        0x1_0000_0010, 77, 4_000_000_000
    )
    assert decode(b"C" + struct.pack("!BQQq", 0, 100, 140, 78)) == Commit(100, 140, 78)


def test_relation():
    body = struct.pack("!I", 16384) + b"public\0orders\0f" + struct.pack("!h", 2)
    body += b"\x01id\0" + struct.pack("!Ii", 23, -1) + b"\x00note\0" + struct.pack("!Ii", 25, -1)
    assert decode(b"R" + body) == Relation(
        16384, "public", "orders", "f", (Column("id", 23, True), Column("note", 25, False))
    )


def test_insert_update_delete_truncate():
    oid = struct.pack("!I", 5)
    assert decode(b"I" + oid + b"N" + _tuple("1", None, "h\u00e9")) == Insert(
        5, ("1", None, "h\u00e9")
    )
    full = decode(b"U" + oid + b"O" + _tuple("1", "a") + b"N" + _tuple("1", UNCHANGED))
    assert full == Update(5, ("1", "a"), False, ("1", UNCHANGED))
    assert decode(b"U" + oid + b"N" + _tuple("1", "b")) == Update(5, None, False, ("1", "b"))
    assert decode(b"U" + oid + b"K" + _tuple("1", None) + b"N" + _tuple("2", "b")).old_is_key_only
    assert decode(b"D" + oid + b"O" + _tuple("1", "a")) == Delete(5, ("1", "a"), False)
    assert decode(b"T" + struct.pack("!iBII", 2, 0, 5, 6)) == Truncate((5, 6))


def test_messages_tidegate_does_not_use_and_unknown_ones():
    assert decode(b"Y" + struct.pack("!I", 1) + b"public\0mood\0") is None
    with pytest.raises(ValueError, match="not part of protocol version 1"):
        decode(b"S" + b"\0" * 8)


def test_xid_visibility_follows_the_snapshot():
    s = XidSnapshot.parse("745:749:745,747")
    assert s == XidSnapshot(745, 749, frozenset({745, 747}))
    assert [x for x in range(740, 752) if s.sees(x)] == [740, 741, 742, 743, 744, 746, 748]
    assert XidSnapshot.parse("10:10:") == XidSnapshot(10, 10)


def test_32_bit_xids_are_placed_in_the_snapshots_epoch():
    epoch = 3 << 32
    s = XidSnapshot(epoch + 5, epoch + 10)
    assert s.full_xid(7) == epoch + 7
    assert s.full_xid(0xFFFF_FFF0) == epoch - 16  # before the wraparound: visible
    assert s.sees(0xFFFF_FFF0) and not s.sees(12)


def test_a_change_is_in_the_snapshot_of_its_keys_chunk_only_if_visible_there():
    early, late, last = XidSnapshot(100, 100), XidSnapshot(200, 200), XidSnapshot(300, 300)
    table = TableSnapshot().add(Chunk((10,), early)).add(Chunk((20,), late))
    assert not table.complete and table.after == (20,)
    table = table.add(Chunk(None, last))
    assert table.complete
    # xid 150 committed after chunk 1's snapshot, before chunk 2's and 3's
    assert [table.holds((k,), 150) for k in (-5, 10, 11, 20, 21, 10**9)] == [
        False, False, True, True, True, True,
    ]  # fmt: skip
    assert not table.holds((5,), 250) and not table.holds((25,), 300)
    with pytest.raises(ValueError, match="complete"):
        table.add(Chunk(None, last))


def test_rows_of_one_read_emitted_in_several_batches_stay_one_chunk():
    first, second = XidSnapshot(100, 100), XidSnapshot(200, 200)
    table = TableSnapshot().add(Chunk((4,), first)).add(Chunk((9,), first))
    assert table.chunks == (Chunk((9,), first),)
    table = table.add(Chunk((12,), second)).add(Chunk(None, second))
    assert table.chunks == (Chunk((9,), first), Chunk(None, second))


def test_an_empty_table_is_one_unbounded_chunk():
    table = TableSnapshot().add(Chunk(None, XidSnapshot(50, 52, frozenset({50}))))
    assert table.holds(("anything",), 51) and not table.holds(("anything",), 50)


def test_lsns_print_as_postgresql_does():
    assert parse_lsn("16/B374D848") == 0x16_B374_D848
    assert format_lsn(0x16_B374_D848) == "16/B374D848" and format_lsn(0) == "0/0"


def test_text_values_become_python_values():
    assert parser(16)("t") is True and parser(16)("true") is True and parser(16)("f") is False
    assert parser(20)("-9000000000") == -9_000_000_000
    assert parser(1700)("12.50") == Decimal("12.50")
    assert parser(701)("NaN") != parser(701)("NaN") and parser(701)("-Infinity") < 0
    assert parser(1082)("2024-02-29") == dt.date(2024, 2, 29)
    assert parser(1184)("2024-02-29 10:00:00.5+00") == dt.datetime(
        2024, 2, 29, 10, 0, 0, 500000, tzinfo=dt.UTC
    )
    assert parser(17)("\\x00ff") == b"\x00\xff"
    assert parser(3802)('{"a": 1}') == '{"a": 1}'


def test_a_value_python_cannot_hold_is_named_with_its_column():
    table = TableInfo("public", "events", (Column("id", 23, True), Column("at", 1114, False)), (0,))
    decoder = TableDecoder(table)
    assert decoder.values(("1", "2024-01-01 00:00:00")) == [1, dt.datetime(2024, 1, 1)]
    assert decoder.key([1, None]) == (1,)
    with pytest.raises(PostgresCdcError, match=r"public\.events, column at: the value 'infinity'"):
        decoder.values(("1", "infinity"))


def test_server_checks_say_what_to_change():
    check_wal_level("logical")
    with pytest.raises(PostgresCdcError, match="wal_level=logical"):
        check_wal_level("replica")
    check_role("cdc", superuser=False, replication=True)
    with pytest.raises(PostgresCdcError, match="ALTER ROLE cdc WITH REPLICATION"):
        check_role("cdc", superuser=False, replication=False)


def test_the_builder_names_what_is_missing_and_qualifies_tables():
    with pytest.raises(ValueError, match=r"needs \['hostname', 'database'"):
        PostgresSource.builder().username("u").table_list("t").slot_name("s").build()
    base = PostgresSource.builder().hostname("h").database("d").username("u").slot_name("s")
    assert base.table_list("t", "other.u").build().tables == ("public.t", "other.u")
    assert base.schema_list("inventory").table_list("t").build().tables == ("inventory.t",)
    with pytest.raises(ValueError, match="twice"):
        base.schema_list().table_list("t", "public.t").build()
    with pytest.raises(ValueError, match="'pgoutput'"):
        base.decoding_plugin_name("wal2json")
    with pytest.raises(TypeError, match="takes a StartupOptions"):
        base.startup_options("latest")
    source = base.table_list("t").build()
    assert source.create_splits(4) == [source.create_splits(1)[0]]
    assert "options='-c TimeZone=UTC" in source.conninfo
