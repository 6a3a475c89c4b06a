"""JsonLinesFormat: JSON-lines files through FileSource's reader as Rows of the schema's type,
with offsets that resume exactly and errors naming file and line."""

from __future__ import annotations

import pickle

import pytest

from tidegate.common import Row, Types
from tidegate.connectors.file_source import FileSource
from tidegate.datastream.formats.json import JsonLinesFormat, JsonRowDeserializationSchema

ROW = Types.ROW_NAMED(["id", "tags"], [Types.INT(), Types.LIST(Types.STRING())])


def source(path, **options) -> FileSource:
    builder = JsonRowDeserializationSchema.builder().type_info(ROW)
    if options.get("ignore_parse_errors"):
        builder = builder.ignore_parse_errors()
    fmt = JsonLinesFormat.for_schema(builder.build())
    return FileSource.for_record_stream_format(fmt, str(path)).build()


def read(reader, batch: int) -> list:
    rows = []
    while (got := reader.poll_batch(batch)) is not None:
        rows += got
    return rows


def test_lines_are_read_as_rows_and_blank_lines_skipped(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1, "tags": ["x"], "more": 0}\n\n  \r\n{"id": "2"}\r\n{"tags": []}')
    s = source(path)
    assert read(s.create_reader(s.create_splits(1), 0, 1), 2) == [
        Row(id=1, tags=["x"]),
        Row(id=2, tags=None),
        Row(id=None, tags=[]),
    ]
    assert s.get_produced_type() == ROW


def test_a_restore_resumes_exactly_after_the_last_row_returned(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(f'{{"id": {i}, "tags": ["é{i}"]}}\n' for i in range(11)))
    s = source(path)
    everything = read(s.create_reader(s.create_splits(1), 0, 1), 100)
    reader = s.create_reader(s.create_splits(1), 0, 1)
    got: list = []
    while (batch := reader.poll_batch(3)) is not None:
        got += batch
        splits = pickle.loads(pickle.dumps(reader.snapshot_splits()))
        assert got + read(s.create_reader(splits, 0, 1), 4) == everything
    assert [r.id for r in everything] == list(range(11))


def test_a_bad_line_names_the_file_and_line_unless_parse_errors_are_ignored(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1}\n{"id": 1.5}\n{"id": 3}\n')
    s = source(path)
    with pytest.raises(ValueError, match=r"a.jsonl: line 2: JSON \(field 'id'\)"):
        read(s.create_reader(s.create_splits(1), 0, 1), 10)
    lenient = source(path, ignore_parse_errors=True)
    assert read(lenient.create_reader(lenient.create_splits(1), 0, 1), 10) == [
        Row(id=1, tags=None),
        Row(id=3, tags=None),
    ]


def test_the_format_takes_a_json_row_deserialization_schema_and_pickles():
    with pytest.raises(TypeError, match="JsonRowDeserializationSchema"):
        JsonLinesFormat.for_schema(ROW)
    fmt = JsonLinesFormat.for_schema(JsonRowDeserializationSchema(ROW))
    assert pickle.loads(pickle.dumps(fmt)) == fmt
