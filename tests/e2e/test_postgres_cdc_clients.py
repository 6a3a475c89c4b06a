"""The PostgreSQL CDC source's reader against a private server, without Spark: the snapshot
read in chunks while the table changes, handed over to the stream without a change lost or
doubled; restores from its checkpointed split (also in the middle of the snapshot and of a
transaction) resume exactly; the slot moves only on checkpoint completion; misconfigured
servers, tables and slots give clear errors."""

from __future__ import annotations

import decimal
import re
import time
import uuid
from contextlib import closing

import psycopg
import pytest

from tests.support.cdc import ChangelogError, apply_change, source_builder
from tidegate.common.typeinfo import Types
from tidegate.common.types import Row, RowKind
from tidegate.connectors.base import Boundedness
from tidegate.connectors.postgres_cdc.split import parse_lsn
from tidegate.datastream.connectors.postgres_cdc import PostgresCdcError, StartupOptions


@pytest.fixture
def db(postgres_server):
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


def _table(db, rows: int = 0, identity_full: bool = True) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, n numeric)")
    if identity_full:
        db.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    if rows:
        db.execute(
            f"INSERT INTO {name} SELECT i, 'v' || i, i * 1.5 FROM generate_series(0, %s) i",
            (rows - 1,),
        )
    return name


def _source(server, *tables, startup=None):
    """A source of `tables` on a new slot, snapshot chunks of 10 rows."""
    builder = source_builder(server.url, *tables, slot=f"s_{uuid.uuid4().hex[:8]}")
    return builder.split_size(10).startup_options(startup or StartupOptions.initial()).build()


def _table_state(db, name) -> dict:
    return {r[0]: r for r in db.execute(f"SELECT id, v, n FROM {name}")}


def _drain(reader, mirror, until, *, max_records=10, timeout=10.0):
    """Poll `reader` applying its rows to `mirror` until `until(mirror)` holds."""
    deadline = time.monotonic() + timeout
    while not until(mirror):
        assert time.monotonic() < deadline, f"the mirror did not get there: {mirror}"
        for row in reader.poll_batch(max_records):
            apply_change(mirror, row[0], row)


def test_the_snapshot_and_the_stream_hand_over_exactly_while_the_table_changes(postgres_server, db):
    name = _table(db, rows=35)
    source = _source(postgres_server, name)
    mirror: dict = {}
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        first = reader.poll_batch(10)  # chunk 1: ids 0..9
        assert [r.get_row_kind() for r in first] == [RowKind.INSERT] * 10
        for row in first:
            apply_change(mirror, row[0], row)
        # changes to a chunk read (must come from the stream) and to chunks not yet read
        # (must come from the snapshot only), some in one transaction
        with db.transaction():
            db.execute(f"UPDATE {name} SET v = 'changed' WHERE id IN (3, 20)")
            db.execute(f"DELETE FROM {name} WHERE id IN (4, 21)")
            db.execute(f"INSERT INTO {name} VALUES (100, 'new', 1), (-1, 'low', 2)")
        db.execute(f"UPDATE {name} SET id = 50 WHERE id = 5")  # moves to an unread chunk
        db.execute(f"UPDATE {name} SET id = 7000 WHERE id = 25")  # within the unread range
        _drain(reader, mirror, lambda m: m == _table_state(db, name))
        assert mirror == _table_state(db, name)
        db.execute(f"UPDATE {name} SET n = n + 1 WHERE id < 12")
        _drain(reader, mirror, lambda m: m == _table_state(db, name))
        assert mirror == _table_state(db, name)


def test_a_restore_resumes_exactly_mid_snapshot_and_mid_transaction(postgres_server, db):
    name = _table(db, rows=25)
    source = _source(postgres_server, name)
    mirror: dict = {}
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        for _ in range(4):  # ids 0..3, 4..7, 8..9 (chunk 1, read at once), 10..13 (chunk 2)
            for row in reader.poll_batch(4):
                apply_change(mirror, row[0], row)
        # changes to rows emitted, read but not emitted, and not read yet
        db.execute(f"UPDATE {name} SET v = 'a' WHERE id IN (1, 12, 15, 24)")
        split = reader.snapshot_splits()  # mid-snapshot, in the middle of chunk 2
        assert split[0].snapshots[0].after == (13,)
        for row in reader.poll_batch(4):  # read after the checkpoint: lost with the failure
            apply_change(dict(mirror), row[0], row)
    with closing(source.create_reader(split, 0, 1)) as reader:
        _drain(reader, mirror, lambda m: m == _table_state(db, name))
        assert mirror == _table_state(db, name)
        with db.transaction():  # one transaction of 40 changes, read 7 at a time
            for i in range(40):
                db.execute(f"UPDATE {name} SET n = n + 1 WHERE id = %s", (i % 20,))
        for _ in range(200):
            batch = reader.poll_batch(7)
            for row in batch:
                apply_change(mirror, row[0], row)
            if batch:
                break
        split = reader.snapshot_splits()
        assert split[0].position.txn_lsn is not None, "the checkpoint is inside the transaction"
        assert 0 < split[0].position.txn_changes < 40
    with closing(source.create_reader(split, 0, 1)) as reader:
        _drain(reader, mirror, lambda m: m == _table_state(db, name), max_records=7)
        assert mirror == _table_state(db, name)


def test_the_slot_moves_only_when_a_checkpoint_completed(postgres_server, db):
    name = _table(db, rows=3)
    source = _source(postgres_server, name)

    def confirmed() -> int:
        (lsn,) = db.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (source.slot_name,),
        ).fetchone()
        return parse_lsn(lsn)

    mirror: dict = {}
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        _drain(reader, mirror, lambda m: len(m) == 3)
        start = confirmed()
        db.execute(f"INSERT INTO {name} VALUES (10, 'x', 1)")
        _drain(reader, mirror, lambda m: len(m) == 4)
        split = reader.snapshot_splits()
        db.execute(f"INSERT INTO {name} VALUES (11, 'y', 1)")
        _drain(reader, mirror, lambda m: len(m) == 5)
        assert confirmed() == start
        reader.notify_checkpoint_complete(1, split)
        reader.poll_batch(10)
        assert confirmed() == split[0].position.lsn - 1
    # a restore of that checkpoint reads the change after it again
    with closing(source.create_reader(split, 0, 1)) as reader:
        again: dict = dict(mirror)
        del again[11]
        _drain(reader, again, lambda m: len(m) == 5)
        assert again == mirror == _table_state(db, name)


def test_rows_have_the_tables_column_types(postgres_server, db):
    name = f"typed_{uuid.uuid4().hex[:8]}"
    db.execute(
        f"CREATE TABLE {name} (k text PRIMARY KEY, i int, b bigint, f float8, d date, "
        "ts timestamp, tz timestamptz, ok boolean, raw bytea, n numeric(10, 2))"
    )
    db.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    db.execute(
        f"INSERT INTO {name} VALUES ('a', 1, 2, 0.5, '2024-02-03', '2024-02-03 04:05:06', "
        "'2024-02-03 04:05:06+02', true, '\\x0102', 3.25)"
    )
    source = _source(postgres_server, name)
    assert source.get_produced_type() == Types.ROW_NAMED(
        ["k", "i", "b", "f", "d", "ts", "tz", "ok", "raw", "n"],
        [
            Types.STRING(), Types.INT(), Types.LONG(), Types.DOUBLE(), Types.SQL_DATE(),
            Types.SQL_TIMESTAMP(), Types.INSTANT(), Types.BOOLEAN(), Types.PICKLED_BYTE_ARRAY(),
            Types.BIG_DEC(),
        ],
    )  # fmt: skip
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        (snapshot_row,) = reader.poll_batch(10)
        db.execute(f"UPDATE {name} SET i = 9 WHERE k = 'a'")
        rows: list[Row] = []
        for _ in range(100):
            rows += reader.poll_batch(10)
            if len(rows) == 2:
                break
    before, after = rows
    assert tuple(before) == tuple(snapshot_row)
    assert before.get_row_kind() is RowKind.UPDATE_BEFORE
    assert after.get_row_kind() is RowKind.UPDATE_AFTER
    assert after.as_dict()["i"] == 9 and after.as_dict()["n"] == decimal.Decimal("3.25")
    assert str(after.as_dict()["tz"]) == "2024-02-03 02:05:06+00:00"
    assert after.as_dict()["raw"] == b"\x01\x02"


def test_a_table_without_primary_key_or_full_replica_identity_is_refused(postgres_server, db):
    name = _table(db, identity_full=False)
    advice = re.escape(f"ALTER TABLE public.{name} REPLICA IDENTITY FULL")
    with pytest.raises(PostgresCdcError, match=advice):
        _source(postgres_server, name).get_produced_type()
    keyless = f"k_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE TABLE {keyless} (v text)")
    with pytest.raises(PostgresCdcError, match="has no primary key"):
        _source(postgres_server, keyless).get_produced_type()
    with pytest.raises(PostgresCdcError, match=re.escape("public.missing_table does not exist")):
        _source(postgres_server, "missing_table").get_produced_type()


def test_a_role_without_replication_is_refused(postgres_server, db):
    role = f"r_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    name = _table(db)
    url = postgres_server.url.replace("postgres@", f"{role}@")
    source = source_builder(url, name, slot="unused").build()
    with pytest.raises(PostgresCdcError, match=f"ALTER ROLE {role} WITH REPLICATION"):
        source.get_produced_type()


def test_a_restore_whose_slot_is_gone_or_moved_on_or_whose_tables_differ_fails_clearly(
    postgres_server, db
):
    name = _table(db, rows=3)
    source = _source(postgres_server, name)
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        _drain(reader, {}, lambda m: len(m) == 3)
        split = reader.snapshot_splits()
    db.execute("SET synchronous_commit = on")  # the slot advances up to flushed WAL only
    db.execute(f"INSERT INTO {name} VALUES (10, 'x', 1)")
    db.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (source.slot_name,))
    with pytest.raises(PostgresCdcError, match="past the checkpoint's position"):
        source.create_reader(split, 0, 1)
    other = _table(db)
    with pytest.raises(PostgresCdcError, match="a restore cannot add or drop tables"):
        _source(postgres_server, name, other).create_reader(split, 0, 1)
    db.execute("SELECT pg_drop_replication_slot(%s)", (source.slot_name,))
    with pytest.raises(PostgresCdcError, match="is missing: the changes after the checkpoint"):
        source.create_reader(split, 0, 1)


def test_an_unreachable_server_is_named(postgres_server):
    source = source_builder("postgresql://postgres@127.0.0.1:1/nowhere", "t", slot="s").build()
    with pytest.raises(PostgresCdcError, match="cannot connect to PostgreSQL database 'nowhere'"):
        source.get_produced_type()


def test_the_mirror_check_catches_a_doubled_change():
    mirror: dict = {}
    apply_change(mirror, 1, Row.of_kind(RowKind.INSERT, 1, "a"))
    with pytest.raises(ChangelogError):
        apply_change(mirror, 1, Row.of_kind(RowKind.INSERT, 1, "a"))


def test_a_slot_still_streamed_to_a_failed_attempt_is_waited_for_then_refused(
    postgres_server, db, monkeypatch
):
    from tidegate.connectors.postgres_cdc import reader as reader_module

    name = _table(db, rows=2)
    source = _source(postgres_server, name)
    first = source.create_reader(source.create_splits(1), 0, 1)
    _drain(first, {}, lambda m: len(m) == 2)
    first.poll_batch(10)  # streaming now
    split = first.snapshot_splits()
    with closing(source.create_reader(split, 0, 1)) as second:
        db.execute(f"INSERT INTO {name} VALUES (10, 'x', 1)")
        assert second.poll_batch(10) == []  # the slot is busy: retried later
        first.close()
        mirror: dict = {}
        _drain(second, mirror, lambda m: len(m) == 1)
        assert list(mirror) == [10]
    monkeypatch.setattr(reader_module, "SLOT_BUSY_S", 0.3)
    with (
        closing(source.create_reader(split, 0, 1)) as holder,
        closing(source.create_reader(split, 0, 1)) as waiting,
    ):
        holder.poll_batch(10)
        with pytest.raises(PostgresCdcError, match="is another job reading it"):
            for _ in range(100):
                waiting.poll_batch(10)
                time.sleep(0.05)


def test_startup_from_the_latest_offset_reads_only_later_changes(postgres_server, db):
    name = _table(db, rows=5)
    source = _source(postgres_server, name, startup=StartupOptions.latest())
    mirror = _table_state(db, name)
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        assert reader.poll_batch(10) == []  # no snapshot rows
        db.execute(f"UPDATE {name} SET v = 'later' WHERE id = 1")
        db.execute(f"DELETE FROM {name} WHERE id = 2")
        db.execute(f"INSERT INTO {name} VALUES (9, 'new', 1)")
        _drain(reader, mirror, lambda m: m == _table_state(db, name))


def test_a_snapshot_only_startup_is_bounded_and_uses_no_slot(postgres_server, db):
    name = _table(db, rows=25)
    source = _source(postgres_server, name, startup=StartupOptions.snapshot())
    assert source.boundedness is Boundedness.BOUNDED
    mirror: dict = {}
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        while (batch := reader.poll_batch(10)) is not None:
            for row in batch:
                apply_change(mirror, row[0], row)
        split = reader.snapshot_splits()
    assert mirror == _table_state(db, name) and split[0].snapshot_done
    slots = db.execute(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (source.slot_name,)
    ).fetchone()[0]
    assert slots == 0


def test_several_tables_are_told_apart_by_the_deserializer(postgres_server, db):
    first, second = _table(db, rows=3), _table(db, rows=2)
    source = (
        source_builder(postgres_server.url, first, second, slot=f"s_{uuid.uuid4().hex[:8]}")
        .deserializer(lambda table, row: (table, row))
        .build()
    )
    assert source.get_produced_type() is None  # records of the deserializer's making
    mirrors: dict[str, dict] = {f"public.{first}": {}, f"public.{second}": {}}

    def apply(batch):
        for table, row in batch:
            apply_change(mirrors[table], row[0], row)

    def done():
        return all(m == _table_state(db, t.split(".")[1]) for t, m in mirrors.items())

    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        db.execute(f"UPDATE {second} SET v = 'changed' WHERE id = 1")
        db.execute(f"DELETE FROM {first} WHERE id = 0")
        deadline = time.monotonic() + 10
        while not done():
            assert time.monotonic() < deadline, mirrors
            apply(reader.poll_batch(10))


def test_an_idle_stream_moves_past_the_wal_of_other_tables(postgres_server, db):
    name, other = _table(db, rows=1), _table(db)  # `other` is not captured
    source = _source(postgres_server, name)
    mirror: dict = {}
    with closing(source.create_reader(source.create_splits(1), 0, 1)) as reader:
        db.execute(f"INSERT INTO {name} VALUES (5, 'x', 1)")
        _drain(reader, mirror, lambda m: len(m) == 2)
        captured = reader.snapshot_splits()[0].position.lsn
        db.execute(f"INSERT INTO {other} SELECT i, 'y', i FROM generate_series(1, 1000) i")
        (written,) = db.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert parse_lsn(written) > captured
        deadline = time.monotonic() + 10
        while reader.snapshot_splits()[0].position.lsn < parse_lsn(written):
            assert time.monotonic() < deadline, "the position stayed at the last captured change"
            assert reader.poll_batch(10) == []
        split = reader.snapshot_splits()
    with closing(source.create_reader(split, 0, 1)) as reader:
        db.execute(f"UPDATE {name} SET v = 'after' WHERE id = 5")
        _drain(reader, mirror, lambda m: m == _table_state(db, name))
