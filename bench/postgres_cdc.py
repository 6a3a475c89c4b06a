"""The PostgreSQL CDC source's reader against bare client-library loops doing the same work on
the same private server (started as the tests start it: tests/support/postgres.py).

    .venv/bin/python bench/postgres_cdc.py [--n 100000] [--repeats 3]

* stream: N inserts (transactions of 1000 rows of `(id int, v text, n numeric)`) read from
  the slot by the connector's reader (`poll_batch(512)` until N rows: pgoutput decoded, values
  converted, Rows made, the snapshot handoff checked) vs a bare psycopg2 loop over the same
  slot from the same LSN (START_REPLICATION, `read_message` until N Insert messages, payloads
  not decoded). Neither confirms, so every repeat reads the same changes.
* snapshot: the N rows read by the reader's snapshot phase (chunks of 512 rows in key order,
  each in its own REPEATABLE READ transaction) vs a bare psycopg 3 `SELECT * FROM t`.

One process, one core: the connector's overhead over the client, not a job's throughput.
Prints a table and writes JSON (default bench/results/postgres_cdc.json).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import interleaved, print_ratios, report_header, write_report
from tests.support.cdc import source_builder
from tests.support.postgres import start_postgres
from tidegate.connectors.postgres_cdc.handoff import Chunk, TableSnapshot, XidSnapshot
from tidegate.connectors.postgres_cdc.split import PostgresCdcSplit, StreamPosition, parse_lsn

BATCH = 512


def bare_stream(url: str, slot: str, publication: str, start_lsn: int, n: int) -> int:
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(url, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cursor = conn.cursor()
    cursor.start_replication(
        slot_name=slot,
        decode=False,
        start_lsn=start_lsn,
        options={"proto_version": "1", "publication_names": publication},
    )
    got = 0
    while got < n:
        message = cursor.read_message()
        if message is None:
            select.select([conn], [], [], 1.0)
            continue
        got += message.payload[:1] == b"I"
    conn.close()
    return got


def connector_stream(source, start_lsn: int, n: int) -> int:
    """The reader from a split whose snapshot holds nothing (every change is emitted)."""
    nothing = TableSnapshot((Chunk(None, XidSnapshot(0, 0)),))
    split = PostgresCdcSplit(source.tables, (nothing,), StreamPosition(start_lsn))
    reader = source.create_reader([split], 0, 1)
    got = 0
    while got < n:
        got += len(reader.poll_batch(BATCH))
    reader.close()
    return got


def bare_snapshot(url: str, table: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return len(conn.execute(f"SELECT * FROM {table}").fetchall())


def connector_snapshot(source) -> int:
    """The snapshot phase of a fresh split (the slot exists already: found, not created)."""
    reader = source.create_reader(source.create_splits(1), 0, 1)
    got = 0
    while True:
        batch = reader.poll_batch(BATCH)
        got += len(batch)
        if reader.snapshot_splits()[0].snapshot_done:
            break
    reader.close()
    return got


def main() -> None:
    import psycopg

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--out", default=os.path.join(here, "results", "postgres_cdc.json"))
    args = p.parse_args()
    n = args.n
    server = start_postgres()
    try:
        table, slot = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server.url, autocommit=True) as db:
            db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric)")
            db.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        source = source_builder(server.url, table, slot=slot).build()
        source.create_reader(source.create_splits(1), 0, 1).close()  # publication and slot
        with psycopg.connect(server.url, autocommit=True) as db:
            (lsn,) = db.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            ).fetchone()
            for low in range(0, n, 1000):
                db.execute(
                    f"INSERT INTO {table} SELECT i, 'value ' || i, i * 0.25 "
                    "FROM generate_series(%s::int, %s::int) i",
                    (low, min(n, low + 1000) - 1),
                )
        start = parse_lsn(lsn)
        parts = urlsplit(server.url)
        replication_url = (
            f"host={parts.hostname} port={parts.port} user={parts.username} "
            f"dbname={parts.path.lstrip('/')}"
        )
        cases: dict[str, tuple[Callable[[], int], Callable[[], int]]] = {
            "stream (changes/s)": (
                lambda: bare_stream(replication_url, slot, source.publication_name, start, n),
                lambda: connector_stream(source, start, n),
            ),
            "snapshot (rows/s)": (
                lambda: bare_snapshot(server.url, table),
                lambda: connector_snapshot(source),
            ),
        }
        results = {
            name: interleaved({"bare": bare, "connector": connector}, args.repeats)
            for name, (bare, connector) in cases.items()
        }
    finally:
        server.stop()
    print_ratios("per second (median)", results, "bare", "connector")
    write_report(args.out, {**report_header(args), "results": results})


if __name__ == "__main__":
    main()
