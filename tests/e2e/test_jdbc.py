"""The JDBC sinks end to end on Spark against the private PostgreSQL server: one job writes
its keyed running count into an exactly-once sink (every record once: the table equals the
reference record for record, no prepared transaction left) and an at-least-once upsert sink
(each key's row ends with its final count) through three failures: an exception after a
checkpoint completed and before the sinks were notified (the restore commits that
checkpoint's prepared transactions), an exception in a map, and a kill -9 of a worker."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import psycopg
from click.testing import CliRunner

from tests.e2e.connector_jobs import (
    COUNTED_ROW,
    AsRowFailingAfterCheckpoint,
    run_failing_after_checkpoint_2,
    sink_count_job,
)
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.references import (
    check_consistent_prefix,
    check_exactly_once,
    records_per_key,
)
from tests.support.waiting import resolved, wait_until
from tidegate.cli import cli
from tidegate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExecutionOptions,
    JdbcSink,
)


def _connection(postgres_server) -> JdbcConnectionOptions:
    return (
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
        .with_url(postgres_server.jdbc_url)
        .with_driver_name("org.postgresql.Driver")
        .with_user_name("postgres")
        .build()
    )


def _events_table(postgres_server) -> str:
    name = f"events_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        db.execute(f"CREATE TABLE {name} (k int NOT NULL, v bigint NOT NULL, c int NOT NULL)")
    return name


def _events(postgres_server, table: str) -> list[str]:
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        return [f"{k},{v},{c}" for k, v, c in db.execute(f"SELECT k, v, c FROM {table}")]


def _prepared_of(postgres_server, job_id: str) -> list[str]:
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        rows = db.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"tidegate:{job_id}:%",)
        )
        return [gid for (gid,) in rows]


def test_exactly_once_and_upsert_sinks_hold_the_reference_through_an_exception_and_a_kill_9(
    spark, tmp_path, postgres_server
):
    events, totals = _events_table(postgres_server), f"totals_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        db.execute(f"CREATE TABLE {totals} (k int PRIMARY KEY, v bigint, total int NOT NULL)")
    connection = _connection(postgres_server)
    execution = JdbcExecutionOptions.builder().with_batch_size(500).with_batch_interval_ms(100)
    sinks = [
        JdbcSink.exactly_once_sink(
            f"INSERT INTO {events} (k, v, c) VALUES (?, ?, ?)", COUNTED_ROW, connection
        ),
        JdbcSink.sink(
            f"INSERT INTO {totals} (k, v, total) VALUES (?, ?, ?) "
            "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, total = EXCLUDED.total",
            COUNTED_ROW,
            connection,
            execution.build(),
        ),
    ]
    n = 20_000
    env = sink_count_job(
        sinks,
        tmp_path / "chk",
        n=n,
        rate=8_000,
        fail_at={1: 6_000, 2: 6_000},  # the kill may come first in attempt 1
        as_record=(AsRowFailingAfterCheckpoint(), COUNTED_ROW),
    )
    job = env.execute_async("jdbc sinks")
    wait_until(lambda: job.jobmaster.stats.restarts >= 1, "the failure after checkpoint 2", job=job)
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(2, 3))
    check_exactly_once(_events(postgres_server, events), n, 2)
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        final = dict(db.execute(f"SELECT k, total FROM {totals}").fetchall())
    assert final == dict(records_per_key(n))
    assert _prepared_of(postgres_server, job.jobmaster.job_id) == []


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


N_FAILING = 50_000


def _a_job_failing_after_checkpoint_2(tmp_path, postgres_server) -> tuple[JdbcSink, str, str]:
    """`run_failing_after_checkpoint_2` into an exactly-once sink: (the sink, its table, the
    job id)."""
    events = _events_table(postgres_server)
    sink = JdbcSink.exactly_once_sink(
        f"INSERT INTO {events} (k, v, c) VALUES (?, ?, ?)",
        COUNTED_ROW,
        _connection(postgres_server),
    )
    job_id = run_failing_after_checkpoint_2(
        [sink],
        tmp_path / "chk",
        n=N_FAILING,
        rate=5_000,
        as_record=(AsRowFailingAfterCheckpoint(), COUNTED_ROW),
    )
    return sink, events, job_id


def test_the_cli_lists_and_resolves_the_transactions_a_failed_job_left(
    spark, tmp_path, postgres_server
):
    """A job without restarts fails after its second checkpoint completed and before its sink
    committed it; a writer of the same job prepared a checkpoint that never completed. The
    CLI commits the first (its checkpoint covers it) and aborts the second, refusing the
    opposite."""
    sink, events, job_id = _a_job_failing_after_checkpoint_2(tmp_path, postgres_server)
    stray = sink.for_job(job_id).create_writer(0, 2, 0)
    stray.write_batch([(0, 10**9, 1)])
    [uncovered] = stray.prepare_commit(10**6)
    stray.close()

    job_dir = str(tmp_path / "chk" / job_id)
    url = ("--postgres", postgres_server.url)
    listed = _cli("transactions", "list", job_dir, *url, "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    covered = [r["id"] for r in rows if r["covered_by_checkpoint"] is not None]
    others = [r["id"] for r in rows if r["covered_by_checkpoint"] is None]
    assert covered and uncovered.gid in others
    table = _cli("transactions", "list", job_dir, *url)
    assert uncovered.gid in table.output and re.search(r" chk-\d+\n", table.output)

    refused = _cli("transactions", "commit", job_dir, uncovered.gid, *url)
    assert refused.exit_code == 2 and "refusing to commit" in refused.output
    refused = _cli("transactions", "abort", job_dir, covered[0], *url)
    assert refused.exit_code == 2 and "refusing to abort" in refused.output
    assert _cli("transactions", "commit", job_dir, *covered, *url).exit_code == 0
    assert _cli("transactions", "abort", job_dir, *others, *url).exit_code == 0
    assert "no lingering sink transactions" in _cli("transactions", "list", job_dir, *url).output

    lines = _events(postgres_server, events)
    assert lines and (0, 10**9) not in [tuple(map(int, line.split(",")[:2])) for line in lines]
    check_consistent_prefix(lines)


def test_a_restore_at_parallelism_1_commits_both_writers_transactions_of_the_checkpoint(
    spark, tmp_path, postgres_server
):
    """The failed job's writers 0 and 1 left checkpoint 2 prepared; the job restored from
    it at parallelism 1 (a new job id): its one subtask takes over both writer indexes,
    commits their restored transactions, rolls back the rest, and writes what follows."""
    sink, events, first = _a_job_failing_after_checkpoint_2(tmp_path, postgres_server)
    assert _prepared_of(postgres_server, first)
    env = sink_count_job(
        [sink],
        tmp_path / "chk",
        n=N_FAILING,
        parallelism=1,
        as_record=(AsRowFailingAfterCheckpoint(), COUNTED_ROW),  # the same operators
        restore_path=str(tmp_path / "chk" / first),
    )
    second = env.execute_async("jdbc job restored at 1")
    resolved(second.get_job_execution_result(), "the job to finish", timeout=120)
    assert second.jobmaster.stats.restored_from >= 2
    check_exactly_once(_events(postgres_server, events), N_FAILING, 2)
    assert _prepared_of(postgres_server, first) == []
    assert _prepared_of(postgres_server, second.jobmaster.job_id) == []
