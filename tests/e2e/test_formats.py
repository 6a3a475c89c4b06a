"""Row formats in real jobs: CSV lines from a FileSource parsed with CsvRowDeserializationSchema
(bad lines routed to a dead-letter side output), written by a FileSink whose encoder is a
JsonRowSerializationSchema; the output compared record for record with a reference."""

from __future__ import annotations

import sys
from pathlib import Path

import cloudpickle
import orjson

from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tidegate.common import Encoder, Types
from tidegate.datastream import OutputTag
from tidegate.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from tidegate.datastream.formats.csv import (
    CsvReaderFormat,
    CsvRowDeserializationSchema,
    CsvSchema,
)
from tidegate.datastream.formats.dead_letters import DeserializeOrDeadLetter
from tidegate.datastream.formats.json import JsonRowSerializationSchema

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ORDER = Types.ROW_NAMED(
    ["id", "customer", "amount", "tags"],
    [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.LIST(Types.STRING())],
)
DEAD = OutputTag("dead-letters")


def write_input(data: Path) -> tuple[list[dict], list[str]]:
    """Two CSV files of orders, every 50th line broken; the expected rows and bad lines."""
    data.mkdir()
    rows, bad = [], []
    for part in range(2):
        lines = []
        for i in range(part * 1000, part * 1000 + 1000):
            if i % 50 == 7:
                line = f"{i},broken,not-a-number,"
                bad.append(line)
            else:
                customer = f'"Zoë, #{i % 13}"' if i % 3 == 0 else f"c{i % 13}"
                line = f"{i},{customer},{i / 4},{'a;b' if i % 2 else ''}"
                rows.append({
                    "id": i,
                    "customer": f"Zoë, #{i % 13}" if i % 3 == 0 else f"c{i % 13}",
                    "amount": i / 4,
                    "tags": ["a", "b"] if i % 2 else None,
                })  # fmt: skip
            lines.append(line)
        (data / f"orders-{part}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows, bad


def test_csv_in_json_out_with_dead_letters(runner, tmp_path):
    expected, bad = write_input(tmp_path / "input")
    env = job_environment(runner, tmp_path / "chk", parallelism=2, interval_ms=None)
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), str(tmp_path / "input")
    ).build()
    csv = CsvRowDeserializationSchema.Builder(ORDER).build()
    json = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
    lines = env.from_source(source, None, "orders")
    orders = lines.process(DeserializeOrDeadLetter(csv, DEAD), output_type=ORDER)
    orders.sink_to(
        FileSink.for_row_format(
            str(tmp_path / "json"), Encoder(lambda row: json.serialize(row) + b"\n")
        ).build()
    )
    orders.get_side_output(DEAD).map(
        lambda letter: f"{letter.record}|{letter.field}|{letter.position}"
    ).sink_to(file_sink(tmp_path / "dead"))
    env.execute("formats")

    got = [orjson.loads(line) for line in committed_lines(tmp_path / "json")]
    assert sorted(got, key=lambda r: r["id"]) == expected
    assert sorted(committed_lines(tmp_path / "dead")) == sorted(
        f"{line}|amount|column 3" for line in bad
    )


def test_csv_files_through_csv_reader_format_into_keyed_state(runner, tmp_path):
    data = tmp_path / "input"
    data.mkdir()
    totals: dict[str, int] = {}
    for part in range(3):
        lines = ["customer;amount;tags", "# a comment line"]
        for i in range(400):
            customer, amount = f"c{(i * 7 + part) % 11}", i % 5
            totals[customer] = totals.get(customer, 0) + amount
            lines.append(f"{customer};{amount};x|y")
        (data / f"part-{part}.csv").write_text("\n".join(lines) + "\n")
    schema = (
        CsvSchema.builder()
        .add_string_column("customer")
        .add_number_column("amount", number_type=Types.INT())
        .add_array_column("tags", "|")
        .set_column_separator(";")
        .set_allow_comments()
        .set_use_header()
        .set_strict_headers()
        .build()
    )
    env = job_environment(runner, tmp_path / "chk", parallelism=2, interval_ms=None)
    source = FileSource.for_record_stream_format(
        CsvReaderFormat.for_schema(schema), str(data)
    ).build()
    rows = env.from_source(source, None, "csv")
    assert rows.get_type() == schema.row_type()
    (
        rows.map(lambda row: (row.customer, row.amount))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda pair: f"{pair[0]},{pair[1]}")
        .sink_to(file_sink(tmp_path / "out"))
    )
    env.execute("csv files")
    final: dict[str, int] = {}
    for line in committed_lines(tmp_path / "out"):
        customer, total = line.split(",")
        final[customer] = max(final.get(customer, 0), int(total))
    assert final == totals
