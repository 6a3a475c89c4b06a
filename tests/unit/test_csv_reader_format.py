"""CsvReaderFormat: CSV files through FileSource's reader (headers, comments, offsets that
resume exactly, errors naming file and line) and PyFlink's CsvSchemaBuilder."""

from __future__ import annotations

import pickle

import pytest

from tidegate.common import Row, Types
from tidegate.connectors.file_source import FileSource
from tidegate.datastream.formats.csv import CsvReaderFormat, CsvSchema


def schema(**flags):
    builder = (
        CsvSchema.builder()
        .add_number_column("id", number_type=Types.INT())
        .add_string_column("name")
        .add_array_column("tags", ",", element_type=Types.STRING())
        .add_boolean_column("ok")
        .set_column_separator("|")
        .set_allow_comments()
    )
    if flags.get("header"):
        builder = builder.set_use_header().set_strict_headers()
    return builder.build()


def read_all(path, csv_schema, batch=2):
    source = FileSource.for_record_stream_format(
        CsvReaderFormat.for_schema(csv_schema), str(path)
    ).build()
    reader = source.create_reader(source.create_splits(1), 0, 1)
    rows, positions = [], []
    while (batch_rows := reader.poll_batch(batch)) is not None:
        rows.extend(batch_rows)
        positions.append(reader.snapshot_splits())
    return rows, positions


def test_rows_are_read_with_the_schemas_names_and_types(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text('id|name|tags|ok\n# a comment\n1|Zoë|x,y|true\n2|"b|c"||false\n')
    rows, _ = read_all(path, schema(header=True))
    assert rows == [
        Row(id=1, name="Zoë", tags=["x", "y"], ok=True),
        Row(id=2, name="b|c", tags=None, ok=False),
    ]
    assert schema().row_type() == Types.ROW_NAMED(
        ["id", "name", "tags", "ok"],
        [Types.INT(), Types.STRING(), Types.LIST(Types.STRING()), Types.BOOLEAN()],
    )


def test_reading_resumes_from_a_snapshot_at_the_next_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("".join(f"{i}|n{i}|t|true\n" for i in range(7)))
    everything, positions = read_all(path, schema())
    resumed_from = positions[1][0]  # after two batches of two
    source = FileSource.for_record_stream_format(
        CsvReaderFormat.for_schema(schema()), str(path)
    ).build()
    reader = source.create_reader([resumed_from], 0, 1)
    rest = []
    while (batch := reader.poll_batch(3)) is not None:
        rest.extend(batch)
    assert resumed_from.line_number == 4
    assert rest == everything[4:]


def test_a_bad_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id|name|tags|ok\n1|a|x|true\n2|b|x|maybe\n")
    with pytest.raises(ValueError, match=r"a\.csv: line 3: CSV \(field 'ok' column 4\)"):
        read_all(path, schema(header=True))
    path.write_text("ID|name|tags|ok\n")
    with pytest.raises(ValueError, match="header"):
        read_all(path, schema(header=True))


def test_the_schema_builder_checks_its_types_and_separators():
    with pytest.raises(TypeError, match="DataTypes"):
        CsvSchema.builder().add_number_column("n", number_type="INT")
    with pytest.raises(ValueError, match="one separator"):
        CsvSchema.builder().add_array_column("a", ",").add_array_column("b", ";").build()
    built = CsvSchema.builder().add_string_column("a").add_columns_from(schema()).build()
    assert built.size() == len(built) == 5
    assert CsvSchema.builder().add_string_column("a").clear_columns().size() == 0
    fmt = CsvReaderFormat.for_schema(schema())
    assert pickle.loads(pickle.dumps(fmt)) == fmt
    assert fmt.get_produced_type() == schema().row_type()


def test_a_file_source_of_csv_declares_the_schemas_row_type(tmp_path):
    from tidegate.datastream import StreamExecutionEnvironment

    path = tmp_path / "a.csv"
    path.write_text("1|a|x|true\n")
    source = FileSource.for_record_stream_format(
        CsvReaderFormat.for_schema(schema()), str(path)
    ).build()
    assert source.get_produced_type() == schema().row_type()
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.from_source(source, None, "csv").get_type() == schema().row_type()
