"""ns per record of the row formats (JSON, CSV, Avro) against the bare library call, on one
core, in-process: what a declared Row type, field conversion and error reporting cost.

    .venv/bin/python bench/formats.py [--records 50000] [--rounds 5] [--json out.json]

The record: `Row(id LONG, name STRING, amount DOUBLE, active BOOLEAN, tags LIST<STRING>,
address ROW(street STRING, zip INT))`, with varied values. Bare baselines do the library's
part only, with no type checks or conversion: `orjson.loads` / `orjson.dumps` of a dict,
`csv.reader` / `csv.writer` of one line, `fastavro.schemaless_reader` / `schemaless_writer` of a
dict. The CSV record has `tags` and `address` as array columns (`a;b`, `Main St;12345`), which
the bare csv baseline leaves unsplit. Figures: median ns per record of `--rounds` rounds;
`x bare` is tidegate / bare. JSON in bench/results/formats.json.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastavro
import orjson

from tidegate.common import Row, Types
from tidegate.datastream.formats.avro import (
    AvroRowDeserializationSchema,
    AvroRowSerializationSchema,
)
from tidegate.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from tidegate.datastream.formats.json import (
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
)

ADDRESS = Types.ROW_NAMED(["street", "zip"], [Types.STRING(), Types.INT()])
ORDER = Types.ROW_NAMED(
    ["id", "name", "amount", "active", "tags", "address"],
    [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.LIST(Types.STRING()),
     ADDRESS],
)  # fmt: skip
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "active", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "street", "type": "string"},
                    {"name": "zip", "type": "int"},
                ],
            },
        },
    ],
}


def records(n: int) -> list[Row]:
    return [
        Row(
            id=10_000_000 + i,
            name=f"customer {i % 977}",
            amount=i * 0.37,
            active=i % 3 == 0,
            tags=["new", "eu"] if i % 2 else ["old"],
            address=Row(street=f"{i % 50} Main St", zip=10_000 + i % 9000),
        )
        for i in range(n)
    ]


def per_record_ns(fn: Callable[[Any], Any], items: list[Any], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for item in items:
            fn(item)
        samples.append((time.perf_counter_ns() - start) / len(items))
    return statistics.median(samples)


def csv_bare() -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    def read(line: bytes) -> list[str]:
        return next(csv.reader([line.decode()]))

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")

    def write(values: list[Any]) -> bytes:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue().encode()

    return read, write


def cases(rows: list[Row]) -> list[dict[str, Any]]:
    """(format, direction, tidegate fn, its inputs, bare fn, its inputs) for each measurement."""
    dicts = [row.as_dict(recursive=True) for row in rows]
    json_out = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
    json_in = JsonRowDeserializationSchema.builder().type_info(ORDER).build()
    csv_out = CsvRowSerializationSchema.Builder(ORDER).build()
    csv_in = CsvRowDeserializationSchema.Builder(ORDER).build()
    avro_text = json.dumps(AVRO_SCHEMA)
    avro_out = AvroRowSerializationSchema(avro_schema_string=avro_text)
    avro_in = AvroRowDeserializationSchema(avro_schema_string=avro_text)
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    json_messages = [json_out.serialize(r) for r in rows]
    csv_lines = [csv_out.serialize(r) for r in rows]
    csv_values = [next(csv.reader([line.decode()])) for line in csv_lines]
    avro_messages = [avro_out.serialize(r) for r in rows]
    read_csv, write_csv = csv_bare()

    def avro_write(d: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, d)
        return out.getvalue()

    return [
        {"format": "json", "direction": "deserialize", "ours": (json_in.deserialize, json_messages),
         "bare": (orjson.loads, json_messages), "bare_call": "orjson.loads"},
        {"format": "json", "direction": "serialize", "ours": (json_out.serialize, rows),
         "bare": (orjson.dumps, dicts), "bare_call": "orjson.dumps(dict)"},
        {"format": "csv", "direction": "deserialize", "ours": (csv_in.deserialize, csv_lines),
         "bare": (read_csv, csv_lines), "bare_call": "csv.reader"},
        {"format": "csv", "direction": "serialize", "ours": (csv_out.serialize, rows),
         "bare": (write_csv, csv_values), "bare_call": "csv.writer"},
        {"format": "avro", "direction": "deserialize", "ours": (avro_in.deserialize, avro_messages),
         "bare": (lambda m: fastavro.schemaless_reader(io.BytesIO(m), parsed), avro_messages),
         "bare_call": "fastavro.schemaless_reader"},
        {"format": "avro", "direction": "serialize", "ours": (avro_out.serialize, rows),
         "bare": (avro_write, dicts), "bare_call": "fastavro.schemaless_writer(dict)"},
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default="bench/results/formats.json")
    args = parser.parse_args()

    results = []
    print(f"{'format':<6} {'direction':<12} {'tidegate ns':>12} {'bare ns':>9} {'x bare':>7}  bare")
    for case in cases(records(args.records)):
        ours = per_record_ns(*case["ours"], args.rounds)
        bare = per_record_ns(*case["bare"], args.rounds)
        result = {
            "format": case["format"],
            "direction": case["direction"],
            "tidegate_ns_per_record": round(ours, 1),
            "bare_ns_per_record": round(bare, 1),
            "ratio": round(ours / bare, 2),
            "bare_call": case["bare_call"],
        }
        results.append(result)
        print(
            f"{case['format']:<6} {case['direction']:<12} {ours:>12.0f} {bare:>9.0f} "
            f"{ours / bare:>7.2f}  {case['bare_call']}"
        )
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(
            {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "versions": {"orjson": orjson.__version__, "fastavro": fastavro.__version__},
                "records": args.records,
                "rounds": args.rounds,
                "results": results,
            },
            f,
            indent=2,
        )
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
