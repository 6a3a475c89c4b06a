"""The Delta Lake and Iceberg sinks: rows as Arrow, data file names and the leftover rule, the
commit decision, then each sink's writer, committer and recovery against a real table in a
temp directory (delta-rs; pyiceberg with a SQL catalog on sqlite): idempotent commits, a
zombie's concurrent commit of the same checkpoint, leftovers removed, bad tables refused."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.exceptions import CommitFailedException

from tidegate.common import Types
from tidegate.common.filesystems import NO_OPTIONS
from tidegate.common.types import Row
from tidegate.connectors.base import UsesFileSystems, UsesJobId, UsesOperatorUid
from tidegate.connectors.delta import DeltaSink, DeltaTableError
from tidegate.connectors.iceberg import IcebergSink, IcebergTableError, committed_checkpoint
from tidegate.connectors.table_commit import (
    MAX_DECISIONS,
    TableCommittable,
    app_id,
    before_deciding_again,
    pending_commits,
)
from tidegate.connectors.table_files import (
    DataFile,
    DataFileName,
    check_partition_columns,
    is_leftover,
    partition_dirs,
)
from tidegate.formats.arrow_row import arrow_schema, batch_writer
from tidegate.formats.base import FormatError

ROW = Types.ROW_NAMED(["key", "value", "count"], [Types.INT(), Types.LONG(), Types.LONG()])


def rows(values: range, count: int = 1) -> list[Row]:
    return [Row(key=v % 3, value=v, count=count) for v in values]


# rows as Arrow ------------------------------------------------------------------------------
def test_row_types_map_to_arrow_types():
    nested = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.DOUBLE()])
    schema = arrow_schema(
        Types.ROW_NAMED(
            ["s", "i", "big", "dec", "at", "d", "t", "ts", "bytes", "ints", "m", "row", "pair"],
            [
                Types.STRING(),
                Types.INT(),
                Types.BIG_INT(),
                Types.BIG_DEC(),
                Types.INSTANT(),
                Types.SQL_DATE(),
                Types.SQL_TIME(),
                Types.SQL_TIMESTAMP(),
                Types.PRIMITIVE_ARRAY(Types.BYTE()),
                Types.LIST(Types.LONG()),
                Types.MAP(Types.STRING(), Types.INT()),
                nested,
                Types.TUPLE([Types.INT(), Types.STRING()]),
            ],
        ),
        "a test",
    )
    assert [f.type for f in schema] == [
        pa.string(),
        pa.int32(),
        pa.decimal128(38, 0),
        pa.decimal128(38, 18),
        pa.timestamp("us", tz="UTC"),
        pa.date32(),
        pa.time64("us"),
        pa.timestamp("us"),
        pa.binary(),
        pa.list_(pa.int64()),
        pa.map_(pa.string(), pa.int32()),
        pa.struct([("a", pa.string()), ("b", pa.float64())]),
        pa.struct([("f0", pa.int32()), ("f1", pa.string())]),
    ]
    with pytest.raises(TypeError, match=r"Types.ROW_NAMED"):
        arrow_schema(Types.STRING(), "a DeltaSink")
    with pytest.raises(TypeError, match=r"a DeltaSink: field 'x' .* has no column type"):
        arrow_schema(Types.ROW_NAMED(["x"], [Types.PICKLED_BYTE_ARRAY()]), "a DeltaSink")


def test_rows_tuples_and_dicts_become_one_record_batch_and_misfits_name_sink_field_record():
    nested = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.DOUBLE()])
    t = Types.ROW_NAMED(
        ["k", "n", "m", "r"],
        [Types.BIG_INT(), Types.LIST(nested), Types.MAP(Types.STRING(), Types.INT()), nested],
    )
    batch = batch_writer(t, "a test")(
        [
            Row(k=1, n=[Row(a="x", b=1.0)], m={"p": 1}, r=Row(a="y", b=2.0)),
            (2, [], None, ("z", 3.0)),
            {"k": None, "n": None, "m": {}, "r": None},
        ]
    )
    assert batch.to_pylist() == [
        {
            "k": decimal.Decimal(1),
            "n": [{"a": "x", "b": 1.0}],
            "m": [("p", 1)],
            "r": {"a": "y", "b": 2.0},
        },
        {"k": decimal.Decimal(2), "n": [], "m": None, "r": {"a": "z", "b": 3.0}},
        {"k": None, "n": None, "m": [], "r": None},
    ]
    write = batch_writer(ROW, "a DeltaSink")
    with pytest.raises(FormatError, match=r"a DeltaSink \(field 'value'\).*int64.*not a number"):
        write([Row(key=1, value=2, count=1), Row(key=1, value="not a number", count=1)])
    with pytest.raises(FormatError, match=r"a DeltaSink: expected 3 fields"):
        write([(1, 2)])


# data files and leftovers ------------------------------------------------------------------
def test_a_data_file_name_says_who_wrote_it_for_which_checkpoint():
    name = DataFileName("0123456789ab", 3, 17, 2, 5)
    assert str(name) == "part-0123456789ab-3-17-2-5.parquet"
    assert DataFileName.parse(str(name)) == name
    assert DataFileName.parse("part-00000-1234.snappy.parquet") is None  # another writer's
    assert partition_dirs((("day", "2024-01-01"), ("city", "a/b"), ("x", None))) == (
        "day=2024-01-01/city=a%2Fb/x=__HIVE_DEFAULT_PARTITION__"
    )


@pytest.mark.parametrize(
    ("name", "subtask", "parallelism", "committed", "restored", "leftover"),
    [
        (DataFileName("t" * 12, 0, 5, 0, 0), 0, 2, 4, False, True),  # after the committed one
        (DataFileName("t" * 12, 0, 5, 0, 0), 0, 2, None, False, True),  # nothing committed
        (DataFileName("t" * 12, 0, 5, 0, 0), 0, 2, 5, False, False),  # committed
        (DataFileName("t" * 12, 0, 4, 0, 0), 0, 2, 5, False, False),  # compacted away: kept
        (DataFileName("t" * 12, 0, 6, 0, 0), 0, 2, 4, True, False),  # restored: committed next
        (DataFileName("t" * 12, 1, 6, 0, 0), 0, 2, None, False, False),  # another subtask's
        (DataFileName("t" * 12, 2, 6, 0, 0), 0, 2, None, False, True),  # vanished index 2 -> 0
        (DataFileName("t" * 12, 0, 6, 1, 0), 0, 2, None, False, False),  # this attempt's
        (DataFileName("u" * 12, 0, 6, 0, 0), 0, 2, None, False, False),  # another sink or run
    ],
)
def test_a_recovery_removes_only_files_nothing_will_commit(
    name, subtask, parallelism, committed, restored, leftover
):
    assert is_leftover(name, "t" * 12, subtask, parallelism, 1, committed, restored) is leftover


def test_partition_columns_are_fields_of_an_exact_type():
    schema = arrow_schema(ROW, "a test")
    check_partition_columns(schema, ("key",))
    with pytest.raises(ValueError, match="'day' is not a field"):
        check_partition_columns(schema, ("day",))
    floats = arrow_schema(Types.ROW_NAMED(["x", "y"], [Types.DOUBLE(), Types.INT()]), "t")
    with pytest.raises(ValueError, match="partition by a string, integer"):
        check_partition_columns(floats, ("x",))
    with pytest.raises(ValueError, match="not all of the columns"):
        check_partition_columns(schema, ("key", "value", "count"))


def _committable(app: str, checkpoint: int, writer: int = 0) -> TableCommittable:
    f = DataFile(f"/t/{app}-{checkpoint}", f"{app}-{checkpoint}", 10, 1, ())
    return TableCommittable(app, writer, checkpoint, (f,))


def test_the_committables_above_an_apps_committed_checkpoint_become_one_commit_at_the_highest():
    committed = {"a": 4, "b": None, "c": 9}
    commits = pending_commits(
        [
            _committable("a", 6),
            _committable("a", 4),
            _committable("a", 5),
            _committable("b", 2),
            _committable("c", 9),
        ],
        committed.get,
    )
    assert [(c.app_id, c.version, [f.relative_path for f in c.files]) for c in commits] == [
        ("a", 6, ["a-5", "a-6"]),
        ("b", 2, ["b-2"]),
    ]


def test_a_committer_losing_races_decides_again_until_a_bound_that_names_the_table():
    before_deciding_again(1, "/t", ValueError("lost"))  # a short wait, then the next decision
    with pytest.raises(RuntimeError, match=r"50 commits to /t in a row lost races .* lost"):
        before_deciding_again(MAX_DECISIONS, "/t", ValueError("lost"))


# the sinks against real tables --------------------------------------------------------------
def _delta(tmp_path: Path, **builder) -> DeltaSink:
    b = DeltaSink.builder().set_table_path(str(tmp_path / "table"))
    if "partition" in builder:
        b.set_partition_columns(*builder["partition"])
    return b.build()


def _bound(sink, job: str = "job-1"):
    assert isinstance(sink, UsesFileSystems | UsesJobId | UsesOperatorUid)
    return sink.for_input_type(ROW).with_filesystems(NO_OPTIONS).for_uid("sink-0").for_job(job)


def _iceberg(tmp_path: Path, table: str = "db.totals", partition=()) -> IcebergSink:
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse",
    }
    b = IcebergSink.builder().set_catalog("test", catalog).set_table(table)
    return b.set_partition_columns(*partition).build()


def _values(arrow_table) -> list[int]:
    return sorted(arrow_table.column("value").to_pylist())


def _read(sink) -> list[int]:
    if isinstance(sink, DeltaSink):
        return _values(DeltaTable(sink.table_path).to_pyarrow_table())
    return _values(sink.load_table().scan().to_arrow())


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_checkpoints_files_are_committed_once_however_often_the_commit_is_replayed(
    tmp_path, kind
):
    sink = _bound(
        _delta(tmp_path, partition=("key",))
        if kind == "delta"
        else _iceberg(tmp_path, partition=("key",))
    )
    sink.recover(0, 1, 0, [])
    writer, committer = sink.create_writer(0, 1, 0), sink.create_committer()
    writer.write_batch(rows(range(0, 10)))
    assert _read(sink) == []  # written at the checkpoint, visible when committed
    first = writer.prepare_commit(1)
    assert len(first) == 1 and len(first[0].files) == 3  # one file per partition
    assert _read(sink) == []
    writer.write_batch(rows(range(10, 15)))
    second = writer.prepare_commit(2)
    assert writer.prepare_commit(3) == []  # nothing written: nothing to commit
    committer.commit(first)
    committer.commit(first)  # replayed
    assert _read(sink) == list(range(10))
    sink.create_committer().commit(first + second)  # a restore commits both again
    assert _read(sink) == list(range(15))


def test_a_zombies_concurrent_delta_commit_of_the_same_checkpoint_is_refused_and_skipped(tmp_path):
    sink = _bound(_delta(tmp_path))
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(rows(range(5)))
    committables = writer.prepare_commit(7)
    zombie, restored = sink.create_committer(), sink.create_committer()
    stale = zombie._fresh_table()  # the zombie read the table before the restore committed
    restored.commit(committables)
    pending = pending_commits(committables, lambda app: None)[0]  # its outdated decision
    with pytest.raises(Exception, match="Concurrent transaction"):
        zombie._commit_one(stale, pending)
    zombie.commit(committables)  # decides again on the current table: skipped
    assert _read(sink) == list(range(5))
    assert DeltaTable(sink.table_path).transaction_version(committables[0].app_id) == 7


def test_a_zombies_concurrent_iceberg_commit_of_the_same_checkpoint_is_refused_and_skipped(
    tmp_path,
):
    sink = _bound(_iceberg(tmp_path))
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(rows(range(5)))
    committables = writer.prepare_commit(7)
    stale = sink.load_table()
    sink.create_committer().commit(committables)
    pending = pending_commits(committables, lambda app: None)[0]
    with pytest.raises(CommitFailedException):  # no silent retry on the newer snapshot
        sink.create_committer()._commit_one(stale, pending)
    sink.create_committer().commit(committables)
    assert _read(sink) == list(range(5))
    assert committed_checkpoint(sink.load_table(), committables[0].app_id) == 7


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_recovery_removes_what_a_failed_attempt_wrote_and_keeps_committed_and_restored_files(
    tmp_path, kind
):
    sink = _bound(_delta(tmp_path) if kind == "delta" else _iceberg(tmp_path))
    writers = [sink.create_writer(i, 2, 0) for i in range(2)]
    committer = sink.create_committer()
    for i, w in enumerate(writers):
        w.write_batch(rows(range(i * 100, i * 100 + 5)))
    committed = [c for w in writers for c in w.prepare_commit(1)]
    committer.commit(committed)
    for i, w in enumerate(writers):
        w.write_batch(rows(range(i * 100 + 5, i * 100 + 10)))
    restored = [c for w in writers for c in w.prepare_commit(2)]  # checkpoint 2 completed
    for i, w in enumerate(writers):
        w.write_batch(rows(range(i * 100 + 10, i * 100 + 15)))
    lost = [c for w in writers for c in w.prepare_commit(3)]  # failed before 3 completed

    def path(c: TableCommittable) -> Path:
        return Path(c.files[0].path)

    # restored at parallelism 1: subtask 0 takes over writer indexes 0 and 1
    sink.recover(0, 1, 1, restored)
    assert all(path(c).exists() for c in committed + restored)
    assert not any(path(c).exists() for c in lost)
    sink.create_committer().commit(restored)
    assert _read(sink) == [*range(10), *range(100, 110)]


def test_a_delta_table_with_other_columns_or_partitions_is_refused_when_the_job_is_submitted(
    tmp_path,
):
    _bound(_delta(tmp_path))  # creates the table
    other = Types.ROW_NAMED(["key", "value"], [Types.INT(), Types.STRING()])
    with pytest.raises(DeltaTableError, match=r"has the columns .* the rows have"):
        _delta(tmp_path).for_input_type(other).with_filesystems(NO_OPTIONS)
    with pytest.raises(DeltaTableError, match=r"partitioned by \[\], the sink by \['key'\]"):
        _delta(tmp_path, partition=("key",)).for_input_type(ROW).with_filesystems(NO_OPTIONS)
    with pytest.raises(TypeError, match="no TIME type"):
        _delta(tmp_path).for_input_type(Types.ROW_NAMED(["t"], [Types.SQL_TIME()]))
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(DeltaTableError, match="cannot create or open the Delta table"):
        DeltaSink.builder().set_table_path(str(blocked / "t")).build().for_input_type(
            ROW
        ).with_filesystems(NO_OPTIONS)


def test_an_iceberg_table_with_another_schema_or_a_bad_catalog_is_refused(tmp_path):
    _bound(_iceberg(tmp_path))
    other = Types.ROW_NAMED(["key", "value"], [Types.INT(), Types.STRING()])
    with pytest.raises(IcebergTableError, match="does not have the rows' schema"):
        _iceberg(tmp_path).for_input_type(other).with_filesystems(NO_OPTIONS)
    with pytest.raises(IcebergTableError, match="partitioned by"):
        _iceberg(tmp_path, partition=("key",)).for_input_type(ROW).with_filesystems(NO_OPTIONS)
    with pytest.raises(IcebergTableError, match=r"<namespace>\.<table>"):
        _iceberg(tmp_path, table="totals").for_input_type(ROW).with_filesystems(NO_OPTIONS)
    bad = IcebergSink.builder().set_catalog("x", {"type": "nonsense"}).set_table("a.b").build()
    with pytest.raises(IcebergTableError, match="cannot open the Iceberg catalog 'x'"):
        bad.for_input_type(ROW).with_filesystems(NO_OPTIONS)


def test_delta_compaction_rewrites_small_files_and_keeps_every_row(tmp_path):
    sink = _bound(
        DeltaSink.builder()
        .set_table_path(str(tmp_path / "table"))
        .set_compaction(every_checkpoints=4)
        .build()
    )
    writer, committer = sink.create_writer(0, 1, 0), sink.create_committer()
    for checkpoint in range(1, 5):
        writer.write_batch(rows(range(checkpoint * 10, checkpoint * 10 + 10)))
        committer.commit(writer.prepare_commit(checkpoint))
    table = DeltaTable(sink.table_path)
    assert len(table.file_uris()) == 1  # 4 small files compacted after checkpoint 4
    assert _read(sink) == list(range(10, 50))
    assert table.transaction_version(app_id("job-1", "sink-0", 0)) == 4


def test_builders_say_what_is_missing():
    with pytest.raises(ValueError, match="set_table_path"):
        DeltaSink.builder().build()
    with pytest.raises(ValueError, match="set_catalog"):
        IcebergSink.builder().set_table("a.b").build()
    with pytest.raises(ValueError, match="set_table"):
        IcebergSink.builder().set_catalog("c", {}).build()
    with pytest.raises(ValueError, match="every_checkpoints > 0"):
        DeltaSink.builder().set_compaction(every_checkpoints=0)
    with pytest.raises(ValueError, match="target file size must be > 0"):
        IcebergSink.builder().set_target_file_size(0)


ALL_NAMES = [
    "b", "s", "i", "f", "ok", "dec", "big", "day", "at", "when", "raw", "signed", "tags", "m", "r",
    "pair",
]  # fmt: skip
ALL_TYPES = Types.ROW_NAMED(
    ALL_NAMES,
    [
        Types.BYTE(),
        Types.SHORT(),
        Types.INT(),
        Types.FLOAT(),
        Types.BOOLEAN(),
        Types.BIG_DEC(),
        Types.BIG_INT(),
        Types.SQL_DATE(),
        Types.SQL_TIMESTAMP(),
        Types.INSTANT(),
        Types.PRIMITIVE_ARRAY(Types.BYTE()),
        Types.PRIMITIVE_ARRAY(Types.BYTE()),
        Types.LIST(Types.STRING()),
        Types.MAP(Types.STRING(), Types.LONG()),
        Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.STRING()]),
        Types.TUPLE([Types.BIG_INT(), Types.STRING()]),
    ],
)


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_every_column_type_is_read_back_as_written(tmp_path, kind):
    sink = _delta(tmp_path) if kind == "delta" else _iceberg(tmp_path)
    sink = sink.for_input_type(ALL_TYPES).with_filesystems(NO_OPTIONS).for_uid("u").for_job("j")
    utc = dt.UTC
    row = Row(
        b=-8,
        s=300,
        i=70_000,
        f=1.5,
        ok=True,
        dec=decimal.Decimal("12.5"),
        big=10**20,
        day=dt.date(2026, 11, 26),
        at=dt.datetime(2026, 11, 26, 10, 0, 1, 500),
        when=dt.datetime(2026, 11, 26, 9, 0, tzinfo=utc),
        raw=b"\x00\x01",
        signed=[-1, 0, 127],  # tidegate's value of a BYTE array: signed bytes
        tags=["a", None],
        m={"k": 1},
        r=Row(x=1, y="z"),
        pair=(-(10**30), "p"),
    )
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([row, tuple([None] * len(ALL_NAMES))])
    sink.create_committer().commit(writer.prepare_commit(1))
    if kind == "delta":
        got = DeltaTable(sink.table_path).to_pyarrow_table().to_pylist()
    else:
        got = sink.load_table().scan().to_arrow().to_pylist()
    full = next(r for r in got if r["b"] is not None)
    assert full == {
        "b": -8, "s": 300, "i": 70_000, "f": 1.5, "ok": True,
        "dec": decimal.Decimal("12.500000000000000000"), "big": decimal.Decimal(10**20),
        "day": dt.date(2026, 11, 26), "at": dt.datetime(2026, 11, 26, 10, 0, 1, 500),
        "when": dt.datetime(2026, 11, 26, 9, 0, tzinfo=utc), "raw": b"\x00\x01",
        "signed": b"\xff\x00\x7f", "tags": ["a", None], "m": [("k", 1)], "r": {"x": 1, "y": "z"},
        "pair": {"f0": decimal.Decimal(-(10**30)), "f1": "p"},
    }  # fmt: skip
    assert [r for r in got if r["b"] is None] == [dict.fromkeys(full)]
