"""Parquet files of Rows: the Types -> Arrow mapping, the bulk-format FileSink (part files
rolled at every checkpoint, hidden until committed, recovered after a crash, written in row
groups), and ParquetColumnarRowInputFormat read by FileSource with positions that resume
exactly; all checked by reading the files back with pyarrow."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.test_file_sink import hidden_files, visible_files
from tidegate.common import Configuration, Row, Types
from tidegate.common.serialization import BulkWriterFactory
from tidegate.connectors.base import Sink
from tidegate.connectors.file_sink import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from tidegate.connectors.file_source import BulkFormat, FileSource, FileSourceSplit
from tidegate.connectors.parquet_format import FORMAT, ParquetWriterFactory
from tidegate.datastream.connectors import file_system
from tidegate.datastream.formats import parquet
from tidegate.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat
from tidegate.formats.arrow_row import arrow_schema, batch_writer
from tidegate.formats.base import FormatError

ROW = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
BYTE_ARRAY = Types.PRIMITIVE_ARRAY(Types.BYTE())

EVERY_TYPE = Types.ROW_NAMED(
    [
        "s", "c", "bo", "by", "sh", "i", "l", "f", "d", "dec", "inst", "date", "time", "ts",
        "bytes", "ints", "names", "objs", "m", "sub", "big", "pair",
    ],
    [
        Types.STRING(), Types.CHAR(), Types.BOOLEAN(), Types.BYTE(), Types.SHORT(), Types.INT(),
        Types.LONG(), Types.FLOAT(), Types.DOUBLE(), Types.BIG_DEC(), Types.INSTANT(),
        Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(),
        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.INT()),
        Types.BASIC_ARRAY(Types.STRING()),
        Types.OBJECT_ARRAY(Types.ROW_NAMED(["x"], [Types.INT()])),
        Types.MAP(Types.STRING(), Types.LIST(Types.DOUBLE())),
        Types.ROW_NAMED(["a", "when"], [Types.INT(), Types.SQL_TIMESTAMP()]),
        Types.BIG_INT(), Types.TUPLE([Types.INT(), Types.LIST(Types.BIG_INT())]),
    ],
)  # fmt: skip


def every_type_row(i: int) -> Row:
    return Row(
        s=f"s{i}", c="x", bo=i % 2 == 0, by=-3, sh=300, i=i, l=1 << 40, f=1.5, d=0.1,
        dec=Decimal("12.345"), inst=dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC),
        date=dt.date(2024, 5, 1), time=dt.time(12, 30, 0, 250),
        ts=dt.datetime(2024, 5, 1, 1, 2, 3, 4),
        bytes=[-1, 0, 127], ints=[1, None, 3], names=["a", None], objs=[Row(x=i)],
        m={"k": [1.0, None]}, sub=Row(a=None, when=dt.datetime(2000, 1, 1)),
        big=-(10**37) + i, pair=(i, [1 << 70, None]),
    )  # fmt: skip


def parquet_sink(base: Path | str, row_type=ROW, **factory_kw) -> FileSink:
    factory = ParquetWriterFactory(row_type, **factory_kw) if factory_kw else None
    return (
        FileSink.for_bulk_format(str(base), factory or ParquetBulkWriters.for_row_type(row_type))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig("part", ".parquet"))
        .build()
    )


def committed_rows(base: Path) -> list[dict]:
    return [r for name in visible_files(base) for r in pq.read_table(base / name).to_pylist()]


def read_all(source: FileSource, batch: int = 1000) -> list:
    reader = source.create_reader(source.create_splits(1), 0, 1)
    rows = []
    while (got := reader.poll_batch(batch)) is not None:
        rows += got
    return rows


def parquet_source(*paths: Path, row_type=ROW, **kw) -> FileSource:
    fmt = ParquetColumnarRowInputFormat(row_type=row_type, **kw)
    return FileSource.for_bulk_file_format(fmt, *map(str, paths)).build()


# --- the type mapping ------------------------------------------------------------------------


def test_every_supported_type_maps_to_its_arrow_type() -> None:
    schema = arrow_schema(EVERY_TYPE, FORMAT)
    assert [str(f.type) for f in schema] == [
        "string", "string", "bool", "int8", "int16", "int32", "int64", "float", "double",
        "decimal128(38, 18)", "timestamp[us, tz=UTC]", "date32[day]", "time64[us]",
        "timestamp[us]", "binary", "list<item: int32>", "list<item: string>",
        "list<item: struct<x: int32>>", "map<string, list<item: double>>",
        "struct<a: int32, when: timestamp[us]>", "decimal128(38, 0)",
        "struct<f0: int32, f1: list<item: decimal128(38, 0)>>",
    ]  # fmt: skip
    utc = arrow_schema(Types.ROW_NAMED(["t"], [Types.SQL_TIMESTAMP()]), FORMAT, utc_timestamp=True)
    assert str(utc[0].type) == "timestamp[us, tz=UTC]"


@pytest.mark.parametrize(
    ("field_type", "shown"),
    [
        (Types.PICKLED_BYTE_ARRAY(), "PickledByteArrayTypeInfo"),
        (Types.LIST(Types.PICKLED_BYTE_ARRAY()), "PickledByteArrayTypeInfo"),
        (Types.TUPLE([Types.PICKLED_BYTE_ARRAY()]), "PickledByteArrayTypeInfo"),
    ],
)
def test_a_type_parquet_cannot_hold_is_refused_naming_the_field(field_type, shown) -> None:
    row_type = Types.ROW_NAMED(["ok", "bad"], [Types.INT(), field_type])
    with pytest.raises(TypeError, match=rf"Parquet: field 'bad.*{shown}.*supported: STRING"):
        ParquetBulkWriters.for_row_type(row_type)
    with pytest.raises(TypeError, match="field 'bad"):
        ParquetColumnarRowInputFormat(row_type=row_type)


def test_the_writer_needs_a_row_type_and_no_hadoop_options() -> None:
    with pytest.raises(TypeError, match="ROW_NAMED"):
        ParquetBulkWriters.for_row_type(Types.LONG())
    with pytest.raises(ValueError, match="hadoop_config is not supported"):
        ParquetBulkWriters.for_row_type(ROW, Configuration().set_string("parquet.block.size", "1"))
    ParquetBulkWriters.for_row_type(ROW, Configuration())  # empty: accepted


def test_a_record_that_does_not_fit_names_the_field_and_the_record() -> None:
    write = batch_writer(Types.ROW_NAMED(["id", "b"], [Types.INT(), Types.BYTE()]), FORMAT)
    with pytest.raises(FormatError, match=r"field 'b'.*cannot write as int8.*record: .*300"):
        write([Row(id=1, b=1), Row(id=2, b=300)])
    with pytest.raises(FormatError, match=r"field 'id'.*int32.*'x'"):
        write([(1, 1), ("x", 1)])
    with pytest.raises(FormatError, match=r"expected 2 fields"):
        write([(1, 1, 1)])
    with pytest.raises(FormatError, match=r"no field 'b'"):
        write([Row(id=1, c=2)])
    write = batch_writer(
        Types.ROW_NAMED(["m", "b"], [Types.MAP(Types.STRING(), Types.INT()), BYTE_ARRAY]), FORMAT
    )
    with pytest.raises(FormatError, match=r"field 'b'.*holds values in -128..127"):
        write([({"a": 1}, [1, 300])])
    with pytest.raises(FormatError, match=r"field 'm'.*map<string, int32>"):
        write([(["not", "a", "dict"], None)])
    write = batch_writer(Types.ROW_NAMED(["id", "big"], [Types.INT(), Types.BIG_INT()]), FORMAT)
    with pytest.raises(FormatError, match=r"field 'big'.*BIG_INT value is an int, got str.*\(2, "):
        write([(1, 5), (2, "5")])
    with pytest.raises(FormatError, match=r"field 'big'.*decimal128\(38, 0\).*\(3, 1000"):
        write([(1, 10**37), (3, 10**40)])  # 41 digits


# --- the bulk-format sink ---------------------------------------------------------------------


def test_part_files_stay_hidden_until_committed_and_hold_every_type(tmp_path: Path) -> None:
    sink = parquet_sink(tmp_path, EVERY_TYPE)
    writer = sink.create_writer(0, 1, 0)
    rows = [every_type_row(i) for i in range(5)]
    writer.write_batch(rows[:2])
    writer.write_batch([tuple(r) for r in rows[2:]])  # tuples by position, too
    committables = writer.prepare_commit(1)
    assert visible_files(tmp_path) == []
    assert hidden_files(tmp_path) == [".part-0-0-0.parquet.inprogress"]
    sink.create_committer().commit(committables)
    assert visible_files(tmp_path) == ["part-0-0-0.parquet"]
    table = pq.read_table(tmp_path / "part-0-0-0.parquet")
    assert table.schema == arrow_schema(EVERY_TYPE, FORMAT)
    assert table.column("i").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("bytes").to_pylist()[0] == b"\xff\x00\x7f"
    # and FileSource reads back exactly the rows written
    assert read_all(parquet_source(tmp_path, row_type=EVERY_TYPE)) == rows


def test_every_checkpoint_rolls_a_finished_parquet_file(tmp_path: Path) -> None:
    sink = parquet_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    committer = sink.create_committer()
    for checkpoint in (1, 2, 3):
        writer.write_batch([(checkpoint * 10 + i, "x") for i in range(3)])
        committer.commit(writer.prepare_commit(checkpoint))
    assert writer.prepare_commit(4) == []  # nothing new: no empty file
    assert visible_files(tmp_path) == [f"part-0-0-{i}.parquet" for i in range(3)]
    assert [r["id"] for r in committed_rows(tmp_path)] == [10, 11, 12, 20, 21, 22, 30, 31, 32]


def test_small_batches_are_written_in_full_row_groups(tmp_path: Path) -> None:
    sink = parquet_sink(tmp_path, row_group_size=10)
    writer = sink.create_writer(0, 1, 0)
    for i in range(25):  # one record per call
        writer.write_batch([(i, f"n{i}")])
    sink.create_committer().commit(writer.prepare_commit(1))
    metadata = pq.ParquetFile(tmp_path / "part-0-0-0.parquet").metadata
    groups = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    assert groups == [10, 10, 5]


def test_a_crash_between_prepare_and_commit_then_recovery_yields_every_row_once(
    tmp_path: Path,
) -> None:
    rows = [(i, f"r{i}") for i in range(30)]
    sink = parquet_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(rows[:10])
    sink.create_committer().commit(writer.prepare_commit(1))
    writer.write_batch(rows[10:20])
    checkpoint_2 = writer.prepare_commit(2)
    writer.write_batch(rows[20:25])  # an unfinished file: no footer
    writer.close()

    assert len(hidden_files(tmp_path)) == 2
    sink.recover(0, 1, 1, checkpoint_2)
    assert hidden_files(tmp_path) == [".part-0-0-1.parquet.inprogress"]  # the restored one
    sink.create_committer().commit(checkpoint_2)
    writer = sink.create_writer(0, 1, 1)
    writer.write_batch(rows[20:])
    sink.create_committer().commit(writer.prepare_commit(3))

    assert [(r["id"], r["name"]) for r in committed_rows(tmp_path)] == rows
    assert hidden_files(tmp_path) == []


def test_records_of_custom_buckets_go_to_each_buckets_file(tmp_path: Path) -> None:
    class ByParity(BucketAssigner):
        def get_bucket_id(self, element, now_ms):
            return "even" if element[0] % 2 == 0 else "odd"

    sink = parquet_sink(tmp_path)
    sink = FileSink(sink.base_path, None, sink.output_file_config, ByParity(),
                    sink.rolling_policy, bulk_writer_factory=sink.bulk_writer_factory)  # fmt: skip
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([(i, "x") for i in range(5)])
    sink.create_committer().commit(writer.prepare_commit(1))
    assert pq.read_table(tmp_path / "even").column("id").to_pylist() == [0, 2, 4]
    assert pq.read_table(tmp_path / "odd").column("id").to_pylist() == [1, 3]


def test_bulk_formats_roll_on_checkpoints_only() -> None:
    builder = FileSink.for_bulk_format("out", ParquetBulkWriters.for_row_type(ROW))
    builder.with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
    with pytest.raises(ValueError, match="on_checkpoint_rolling_policy"):
        builder.with_rolling_policy(RollingPolicy.default_rolling_policy())
    with pytest.raises(ValueError, match="checkpoints only"):
        FileSink("out", None, bulk_writer_factory=ParquetBulkWriters.for_row_type(ROW))
    with pytest.raises(TypeError, match="BulkWriterFactory"):
        FileSink.for_bulk_format("out", ROW)


def test_the_bulk_sink_satisfies_the_sink_contract_and_pickles(tmp_path: Path) -> None:
    sink = parquet_sink(tmp_path, row_group_size=7, compression="zstd")
    assert isinstance(sink, Sink)
    assert sink.for_input_type(Types.STRING()) is sink
    clone = pickle.loads(pickle.dumps(sink))
    factory = clone.bulk_writer_factory
    assert isinstance(factory, BulkWriterFactory)
    assert (factory.row_type, factory.row_group_size, factory.compression) == (ROW, 7, "zstd")
    assert factory.get_row_type() == ROW
    with pytest.raises(ValueError, match="compression 'nope'"):
        ParquetWriterFactory(ROW, compression="nope")


def test_the_bulk_sink_works_on_other_fsspec_filesystems() -> None:
    fs = fsspec.filesystem("memory")
    try:
        sink = parquet_sink("memory://tidegate-parquet-test")
        writer = sink.create_writer(0, 1, 0)
        writer.write_batch([(1, "a"), (2, "b")])
        sink.create_committer().commit(writer.prepare_commit(1))
        data = fs.cat("/tidegate-parquet-test/part-0-0-0.parquet")
        assert pq.read_table(pa.BufferReader(data)).to_pylist() == [
            {"id": 1, "name": "a"},
            {"id": 2, "name": "b"},
        ]
    finally:
        if fs.exists("/tidegate-parquet-test"):
            fs.rm("/tidegate-parquet-test", recursive=True)


# --- the reader ---------------------------------------------------------------------------------


def write_parquet(path: Path, ids: range, row_group_size: int) -> None:
    table = pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]})
    pq.write_table(table, path, row_group_size=row_group_size)


def test_a_restore_resumes_exactly_after_the_last_row_returned(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", range(0, 23), row_group_size=5)
    write_parquet(tmp_path / "b.parquet", range(23, 30), row_group_size=4)
    source = parquet_source(tmp_path, batch_size=3)
    everything = read_all(source)
    assert everything == [Row(id=i, name=f"n{i}") for i in range(30)]
    # snapshot after every batch; a reader restored from that snapshot reads exactly the rest
    reader = source.create_reader(source.create_splits(1), 0, 1)
    read: list = []
    while (batch := reader.poll_batch(2)) is not None:
        read += batch
        splits = reader.snapshot_splits()
        restored = source.create_reader(pickle.loads(pickle.dumps(splits)), 0, 1)
        rest = []
        while (more := restored.poll_batch(4)) is not None:
            rest += more
        assert read + rest == everything, splits
    first = source.create_splits(1)[0]
    mid = source.create_reader([FileSourceSplit(first.split_id, first.path, 2, 4)], 0, 1)
    assert mid.poll_batch(10)[0] == Row(id=14, name="n14")  # row group 2, after 4 of its rows


def test_columns_are_matched_by_name_and_cast_to_the_declared_types(tmp_path: Path) -> None:
    table = pa.table({"NAME": ["a"], "extra": [1.5], "ID": pa.array([7], pa.int32())})
    pq.write_table(table, tmp_path / "f.parquet")
    rows = read_all(parquet_source(tmp_path / "f.parquet", is_case_sensitive=False))
    assert rows == [Row(id=7, name="a")]
    with pytest.raises(ValueError, match=r"f.parquet: the Parquet file has no column 'id'"):
        read_all(parquet_source(tmp_path / "f.parquet"))


def test_a_column_that_cannot_be_read_as_declared_names_the_file(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": ["x"], "name": ["a"]}), tmp_path / "f.parquet")
    with pytest.raises(ValueError, match=r"f.parquet.*row group 0 does not fit"):
        read_all(parquet_source(tmp_path / "f.parquet"))
    pq.write_table(pa.table({"id": [[1]], "name": ["a"]}), tmp_path / "g.parquet")
    with pytest.raises(ValueError, match=r"g.parquet: column 'id' is list<.*cannot be read as"):
        read_all(parquet_source(tmp_path / "g.parquet"))
    (tmp_path / "h.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"h.parquet: not a readable Parquet file"):
        read_all(parquet_source(tmp_path / "h.parquet"))


def test_the_source_declares_the_row_type_and_the_format_pickles() -> None:
    fmt = ParquetColumnarRowInputFormat(Configuration(), ROW, 500, True, True)
    assert parquet_source(Path(__file__), row_type=ROW).get_produced_type() == ROW
    assert pickle.loads(pickle.dumps(fmt)) == fmt
    with pytest.raises(TypeError, match="row type"):
        ParquetColumnarRowInputFormat()


def test_parquet_classes_are_importable_from_the_pyflink_paths() -> None:
    assert parquet.ParquetBulkWriters is ParquetBulkWriters
    assert file_system.BulkFormat is BulkFormat
    assert isinstance(ParquetColumnarRowInputFormat(Configuration(), ROW), file_system.BulkFormat)
    assert file_system.FileSink is FileSink
    assert file_system.FileSink.for_bulk_format is FileSink.for_bulk_format
