"""The Delta Lake and Iceberg sinks against the bare client library's loop doing the same
appends to a table in a temp directory.

    .venv/bin/python bench/tables.py [--n 200000] [--commits 10] [--repeats 3]

N rows `(key INT, value LONG, count LONG, name STRING)` in `--commits` appends (a checkpoint
each), into a new table per run, unpartitioned and partitioned by `key` (8 values):

* sink: the connector's writer gets the rows in batches of 512 (`write_batch`), then each
  checkpoint's `prepare_commit` (Parquet files written) and the committer's commit (one table
  commit recording the checkpoint for the writer's app id, after reading the recorded one).
* bare: the same rows per append as columns into `pa.table(...)` and one
  `deltalake.write_deltalake(path, table, mode="append")` / pyiceberg `table.append(table)`
  (SQL catalog on sqlite), without any idempotence.

One process, one core: the connector's overhead over the client, not a job's throughput.
Prints a table and writes JSON (default bench/results/tables.json).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa

from bench.common import interleaved, print_ratios, report_header, write_report
from tidegate.common import Types
from tidegate.common.filesystems import NO_OPTIONS
from tidegate.connectors.delta import DeltaSink
from tidegate.connectors.iceberg import IcebergSink

BATCH = 512
ROWS = Types.ROW_NAMED(
    ["key", "value", "count", "name"], [Types.INT(), Types.LONG(), Types.LONG(), Types.STRING()]
)
SCHEMA = pa.schema(
    [("key", pa.int32()), ("value", pa.int64()), ("count", pa.int64()), ("name", pa.string())]
)


def records(low: int, high: int) -> list[tuple[int, int, int, str]]:
    return [(i % 8, i, i // 8 + 1, f"name-{i % 1000}") for i in range(low, high)]


def appends(n: int, commits: int) -> list[list[tuple[int, int, int, str]]]:
    step = -(-n // commits)
    return [records(low, min(n, low + step)) for low in range(0, n, step)]


def catalog_properties(tmp: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp}/catalog.db",
        "warehouse": f"file://{tmp}/warehouse",
    }


def run_sink(sink, data: list[list[tuple]]) -> int:
    sink = sink.for_input_type(ROWS).with_filesystems(NO_OPTIONS).for_uid("bench").for_job("b")
    writer, committer = sink.create_writer(0, 1, 0), sink.create_committer()
    for checkpoint, rows in enumerate(data, 1):
        for low in range(0, len(rows), BATCH):
            writer.write_batch(rows[low : low + BATCH])
        committer.commit(writer.prepare_commit(checkpoint))
    return sum(map(len, data))


def as_table(rows: list[tuple]) -> pa.Table:
    return pa.table([list(c) for c in zip(*rows, strict=True)], schema=SCHEMA)


def delta_sink(tmp: Path, data: list[list[tuple]], partitioned: bool) -> int:
    builder = DeltaSink.builder().set_table_path(str(tmp / f"delta-{uuid.uuid4().hex[:6]}"))
    if partitioned:
        builder.set_partition_columns("key")
    return run_sink(builder.build(), data)


def delta_bare(tmp: Path, data: list[list[tuple]], partitioned: bool) -> int:
    from deltalake import write_deltalake

    path = str(tmp / f"delta-{uuid.uuid4().hex[:6]}")
    for rows in data:
        write_deltalake(
            path, as_table(rows), mode="append", partition_by=["key"] if partitioned else None
        )
    return sum(map(len, data))


def iceberg_sink(tmp: Path, data: list[list[tuple]], partitioned: bool) -> int:
    builder = (
        IcebergSink.builder()
        .set_catalog("bench", catalog_properties(tmp))
        .set_table(f"bench.t{uuid.uuid4().hex[:6]}")
    )
    if partitioned:
        builder.set_partition_columns("key")
    return run_sink(builder.build(), data)


def iceberg_bare(tmp: Path, data: list[list[tuple]], partitioned: bool) -> int:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("bench", **catalog_properties(tmp))
    catalog.create_namespace_if_not_exists("bench")
    create = catalog.create_table_transaction(f"bench.t{uuid.uuid4().hex[:6]}", schema=SCHEMA)
    if partitioned:
        with create.update_spec() as spec:
            spec.add_identity("key")
    table = create.commit_transaction()
    for rows in data:
        table.append(as_table(rows))
    return sum(map(len, data))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--commits", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--out", default=os.path.join(here, "results", "tables.json"))
    args = p.parse_args()
    data = appends(args.n, args.commits)
    cases = {
        "delta": (delta_bare, delta_sink),
        "iceberg": (iceberg_bare, iceberg_sink),
    }
    results = {}
    with tempfile.TemporaryDirectory() as work:
        tmp = Path(work)
        for name, (bare, sink) in cases.items():
            for partitioned in (False, True):
                label = f"{name}{' partitioned' if partitioned else ''}"
                runs = {
                    "bare": functools.partial(bare, tmp, data, partitioned),
                    "sink": functools.partial(sink, tmp, data, partitioned),
                }
                bare(tmp, data[:1], partitioned)  # warm-up: imports, a catalog's first table
                sink(tmp, data[:1], partitioned)
                results[label] = interleaved(runs, args.repeats)
    print_ratios("rows/s (median)", results, "bare", "sink")
    write_report(args.out, {**report_header(args), "results": results})


if __name__ == "__main__":
    main()
