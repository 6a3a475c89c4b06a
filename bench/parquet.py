"""Rows/s of Parquet through tidegate's FileSink and FileSource against a bare pyarrow loop
doing the same work, on one core, in-process (no Spark): what the bulk-format sink protocol and
the Row conversions cost.

    .venv/bin/python bench/parquet.py [--rows 200000] [--batch 512] [--rounds 3]

The record: `Row(id LONG, name STRING, amount DOUBLE, at SQL_TIMESTAMP, tags LIST<STRING>)`.
Write: the rows arrive in batches of `--batch` (as a sink receives them); tidegate's
`FileSink.for_bulk_format(dir, ParquetBulkWriters.for_row_type(t))` writer takes every batch,
then one checkpoint (`prepare_commit`) and its commit; the bare loop appends each batch's
values to column lists and writes a pyarrow table per row group of the same size (128k rows)
with `pq.ParquetWriter`, snappy, as tidegate does. Read: tidegate's FileSource reader with
`ParquetColumnarRowInputFormat` (`poll_batch(512)`) against reading each row group with
pyarrow and zipping the Python values of its columns into tuples, 512 rows at a time (as a
reader hands them on; converting a whole group's list column at once is several times
slower). Figures: median rows/s of `--rounds` interleaved rounds; `x bare` is tidegate / bare.
JSON in bench/results/parquet.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
import pyarrow.parquet as pq

from tidegate.common import Row, Types
from tidegate.connectors.parquet_format import DEFAULT_ROW_GROUP_SIZE, FORMAT
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink, FileSource
from tidegate.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat
from tidegate.formats.arrow_row import arrow_schema

ORDER = Types.ROW_NAMED(
    ["id", "name", "amount", "at", "tags"],
    [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.SQL_TIMESTAMP(),
     Types.LIST(Types.STRING())],
)  # fmt: skip
START = dt.datetime(2026, 1, 1)


def batches(n: int, size: int) -> list[list[Row]]:
    rows = [
        Row(
            id=10_000_000 + i,
            name=f"customer {i % 977}",
            amount=i * 0.37,
            at=START + dt.timedelta(milliseconds=i),
            tags=["new", "eu"] if i % 2 else ["old"],
        )
        for i in range(n)
    ]
    return [rows[i : i + size] for i in range(0, n, size)]


def write_tidegate(directory: str, data: list[list[Row]]) -> str:
    sink = (
        FileSink.for_bulk_format(directory, ParquetBulkWriters.for_row_type(ORDER))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    writer = sink.create_writer(0, 1, 0)
    for batch in data:
        writer.write_batch(batch)
    committables = writer.prepare_commit(1)
    sink.create_committer().commit(committables)
    return committables[0].final_path


def write_bare(directory: str, data: list[list[Row]]) -> str:
    path = os.path.join(directory, "bare.parquet")
    schema = arrow_schema(ORDER, FORMAT)
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        columns: list[list] = [[] for _ in schema]
        for batch in data:
            for column, values in zip(columns, zip(*batch, strict=True), strict=True):
                column.extend(values)
            if len(columns[0]) >= DEFAULT_ROW_GROUP_SIZE:
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                columns = [[] for _ in schema]
        if columns[0]:
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    return path


def read_tidegate(path: str) -> int:
    fmt = ParquetColumnarRowInputFormat(row_type=ORDER, batch_size=512)
    source = FileSource.for_bulk_file_format(fmt, path).build()
    reader = source.create_reader(source.create_splits(1), 0, 1)
    n = 0
    while (batch := reader.poll_batch(512)) is not None:
        n += len(batch)
    return n


def read_bare(path: str) -> int:
    file = pq.ParquetFile(path)
    n = 0
    for group in range(file.num_row_groups):
        table = file.read_row_group(group)
        for start in range(0, table.num_rows, 512):  # whole-group to_pylist of lists is slow
            chunk = table.slice(start, 512)
            n += len(list(zip(*(c.to_pylist() for c in chunk.columns), strict=True)))
    return n


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def one_round(data: list[list[Row]], rows: int) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds of each of the four measurements, and the two files' sizes."""
    root = tempfile.mkdtemp(prefix="bench-parquet-")
    try:
        os.makedirs(os.path.join(root, "bare"))
        write, ours = timed(write_tidegate, os.path.join(root, "ours"), data)
        write_bare_s, bare = timed(write_bare, os.path.join(root, "bare"), data)
        read, n = timed(read_tidegate, ours)
        read_bare_s, n_bare = timed(read_bare, bare)
        assert n == n_bare == rows
        seconds = {
            "write": write,
            "write_bare": write_bare_s,
            "read": read,
            "read_bare": read_bare_s,
        }
        return seconds, {"ours": os.path.getsize(ours), "bare": os.path.getsize(bare)}
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default="bench/results/parquet.json")
    args = parser.parse_args()

    data = batches(args.rows, args.batch)
    seconds: dict[str, list[float]] = {k: [] for k in ("write", "write_bare", "read", "read_bare")}
    sizes: dict[str, int] = {}
    for _ in range(args.rounds):  # interleaved, so load on the machine hits both alike
        measured, sizes = one_round(data, args.rows)
        for name, value in measured.items():
            seconds[name].append(value)

    results = []
    print(f"{'direction':<9} {'tidegate rows/s':>16} {'bare rows/s':>12} {'x bare':>7}  bare")
    for direction, bare_call in (
        ("write", "column lists + pq.ParquetWriter.write_table per row group"),
        ("read", "read_row_group + to_pylist + zip per 512 rows"),
    ):
        ours = args.rows / statistics.median(seconds[direction])
        bare = args.rows / statistics.median(seconds[f"{direction}_bare"])
        results.append(
            {
                "direction": direction,
                "tidegate_rows_per_s": round(ours),
                "bare_rows_per_s": round(bare),
                "ratio": round(ours / bare, 2),
                "bare_call": bare_call,
                "seconds": seconds[direction],
                "bare_seconds": seconds[f"{direction}_bare"],
            }
        )
        print(f"{direction:<9} {ours:>16,.0f} {bare:>12,.0f} {ours / bare:>7.2f}  {bare_call}")
    print(f"file bytes: tidegate {sizes['ours']:,}, bare {sizes['bare']:,}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(
            {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "versions": {"pyarrow": pa.__version__},
                "rows": args.rows,
                "batch": args.batch,
                "rounds": args.rounds,
                "file_bytes": sizes,
                "results": results,
            },
            f,
            indent=2,
        )
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
