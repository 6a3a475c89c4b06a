"""PostgreSQL sink throughput: tidegate's JdbcSink jobs against bare psycopg loops doing the
same inserts, side by side on one private server.

    .venv/bin/python bench/postgres.py [--n 100000] [--batch 1000] [--runner spark|local]

A private PostgreSQL is started (tests/support/postgres.py; fsync off). Records are
(key text, value bigint), N of them over 1,000 keys.

* bare loops (psycopg 3, one connection): `executemany` of `--batch` records per transaction
  (plain INSERT, and the upsert INSERT ... ON CONFLICT (k) DO UPDATE); and the same INSERTs
  in transactions of 20,000 records each ended by PREPARE TRANSACTION + COMMIT PREPARED.
* tidegate jobs, parallelism 1, checkpoints every second: datagen(N) -> JdbcSink.sink (insert;
  upsert) and JdbcSink.exactly_once_sink (insert, one prepared transaction per checkpoint),
  batch size `--batch`. A job's wall time includes starting its slot, so the same job with a
  sink that receives nothing (datagen -> filter(false) -> print) is timed too, and the table
  shows each job's time with and without it (records/s of the latter: the sink's own rate).
  A warm-up job runs first (starting Spark's Python workers is in no figure).

Prints a table and writes JSON (default bench/results/postgres.json). Nothing asserts a limit.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psycopg

from bench.common import report_header, write_report
from tests.support.postgres import PostgresServer, start_postgres
from tidegate.common import Configuration, Types
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExecutionOptions,
    JdbcSink,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = 1_000
PAIR = Types.ROW([Types.STRING(), Types.LONG()])
INSERT = "INSERT INTO {} (k, v) VALUES ({}, {})"
UPSERT = INSERT + " ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
PREPARED_EVERY = 20_000


def record(i: int) -> tuple[str, int]:
    return f"k{i % KEYS}", i


def new_table(server: PostgresServer, keyed: bool) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    key = "PRIMARY KEY" if keyed else ""
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (k text {key}, v bigint NOT NULL)")
    return name


def bare(server: PostgresServer, n: int, batch: int, sql: str, prepared: bool) -> float:
    """executemany of `batch` records per transaction (or per `PREPARED_EVERY` records,
    prepared, then committed from a second connection, as the exactly-once sink does)."""
    rows = [record(i) for i in range(n)]
    every = PREPARED_EVERY if prepared else batch
    committer = psycopg.connect(server.url, autocommit=True)
    with psycopg.connect(server.url) as conn, committer:
        started = time.perf_counter()
        for t, start in enumerate(range(0, n, every)):
            with conn.cursor() as cur:
                for low in range(start, min(start + every, n), batch):
                    cur.executemany(sql, rows[low : min(low + batch, start + every, n)])
            if prepared:
                gid = f"bench-{uuid.uuid4().hex}-{t}"
                conn.execute(f"PREPARE TRANSACTION '{gid}'")
                committer.execute(f"COMMIT PREPARED '{gid}'")
            else:
                conn.commit()
        return time.perf_counter() - started


def job(runner: str, n: int, add_sink: Callable) -> float:
    """The wall time of datagen(n) -> add_sink(stream) at parallelism 1."""
    with tempfile.TemporaryDirectory() as tmp:
        env = StreamExecutionEnvironment.get_execution_environment(
            Configuration().set_string("execution.runner", runner)
        )
        env.set_parallelism(1)
        env.enable_checkpointing(1000)
        env.get_checkpoint_config().set_checkpoint_storage_dir(tmp)
        add_sink(env.from_source(DataGeneratorSource(record, count=n), None, "data"))
        started = time.perf_counter()
        env.execute("postgres sink bench")
        return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1_000, help="records per executemany")
    p.add_argument("--runner", choices=["spark", "local"], default="spark")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "postgres.json"))
    args = p.parse_args()
    if args.runner == "spark":
        from tidegate.deploy.spark_session import get_spark

        get_spark("local[2]", 2)
    server = start_postgres()
    n, batch = args.n, args.batch
    connection = (
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
        .with_url(server.jdbc_url)
        .with_user_name("postgres")
        .build()
    )
    execution = JdbcExecutionOptions.builder().with_batch_size(batch).build()

    def at_least_once(template: str) -> Callable:
        def add(ds):
            sql = template.format(new_table(server, template == UPSERT), "?", "?")
            ds.sink_to(JdbcSink.sink(sql, PAIR, connection, execution))

        return add

    def exactly_once(ds):
        sql = INSERT.format(new_table(server, False), "?", "?")
        ds.sink_to(JdbcSink.exactly_once_sink(sql, PAIR, connection, execution))

    def nothing(ds):
        ds.filter(lambda r: False).print()

    rows: list[tuple[str, float, float | None]] = []
    try:
        job(args.runner, 1_000, nothing)  # warm-up: starts Spark's Python workers
        baseline = job(args.runner, n, nothing)
        rows.append(("tidegate job, no sink (baseline)", baseline, None))
        cases = [
            ("insert", INSERT, False, at_least_once(INSERT)),
            ("upsert", UPSERT, False, at_least_once(UPSERT)),
            ("insert, 2PC", INSERT, True, exactly_once),
        ]
        for what, template, prepared, add in cases:
            sql = template.format(new_table(server, template == UPSERT), "%s", "%s")
            rows.append((f"bare psycopg {what}", bare(server, n, batch, sql, prepared), None))
            kind = "exactly_once_sink" if prepared else "sink"
            seconds = job(args.runner, n, add)
            rows.append((f"tidegate JdbcSink.{kind} {what}", seconds, seconds - baseline))
    finally:
        server.stop()
    print(
        f"\n{n} records ({KEYS} keys), batches of {batch}, PostgreSQL 15 (fsync off), "
        f"tidegate jobs on {args.runner} at parallelism 1, checkpoints every second"
    )
    print(f"{'what':48} {'seconds':>8} {'records/s':>10} {'minus baseline':>15} {'records/s':>10}")
    for name, seconds, net in rows:
        extra = "" if net is None else f" {net:15.2f} {n / max(net, 1e-9):10,.0f}"
        print(f"{name:48} {seconds:8.2f} {n / seconds:10,.0f}{extra}")
    report = report_header(args)
    report["results"] = [
        {
            "what": name,
            "seconds": seconds,
            "records_per_s": n / seconds,
            "seconds_minus_baseline": net,
            "records_per_s_minus_baseline": None if net is None else n / max(net, 1e-9),
        }
        for name, seconds, net in rows
    ]
    write_report(args.out, report)


if __name__ == "__main__":
    main()
