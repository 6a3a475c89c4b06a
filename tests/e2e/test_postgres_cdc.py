"""The PostgreSQL CDC source end to end on Spark against a private server: while a writer
inserts, updates and deletes rows (from the snapshot phase on), a job mirrors the table
through an exception and a kill -9 and, restored at another parallelism, on to the end; the
mirror the job committed equals `SELECT * FROM` the table, and every change it applied fit
the row it held (a change lost or doubled would not)."""

from __future__ import annotations

import random
import threading
import time
import uuid

import psycopg
import pytest

from tests.e2e.cdc_jobs import cdc_mirror_job, mirrored_state
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.cdc import source_builder
from tests.support.output import committed_lines
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.common import JobStatus
from tidegate.common.types import Row

ROWS = 3_000
#: the row whose insert fails the first attempt
MARKER = 10**6


class Writer(threading.Thread):
    """Random inserts, updates (some moving a row to another key) and deletes, in
    transactions of 1-5 statements, `ops` of them at about `rate`/s; with `mark`, the row
    MARKER (the first attempt fails on it) is inserted a third of the way."""

    def __init__(
        self,
        url: str,
        table: str,
        ops: int,
        rate: float,
        seed: int,
        *,
        first_id: int,
        mark: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.mark = mark
        #: the key of the next insert (the table holds keys below it)
        self.next_id = first_id
        self.url, self.table, self.ops, self.rate = url, table, ops, rate
        self.random = random.Random(seed)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._write()
        except BaseException as e:
            self.error = e

    def _write(self) -> None:
        r, t = self.random, self.table
        next_id = self.next_id
        with psycopg.connect(self.url, autocommit=True) as db:
            start = time.monotonic()
            done = 0
            while done < self.ops:
                with db.transaction():
                    for _ in range(r.randint(1, 5)):
                        op = r.random()
                        key = r.randrange(next_id)
                        if op < 0.3:
                            db.execute(f"INSERT INTO {t} VALUES (%s, 0, 'new')", (next_id,))
                            next_id += 1
                        elif op < 0.8:
                            db.execute(
                                f"UPDATE {t} SET balance = balance + 1, note = %s WHERE id = %s",
                                (f"u{done}", key),
                            )
                        elif op < 0.9:
                            db.execute(f"UPDATE {t} SET id = %s WHERE id = %s", (next_id, key))
                            next_id += 1
                        else:
                            db.execute(f"DELETE FROM {t} WHERE id = %s", (key,))
                        done += 1
                if self.mark and done >= self.ops // 3:
                    db.execute(f"INSERT INTO {t} VALUES (%s, 0, 'fail')", (MARKER,))
                    self.mark = False
                self.next_id = next_id
                time.sleep(max(0.0, start + done / self.rate - time.monotonic()))


def _table_state(url: str, table: str) -> dict[int, str]:
    with psycopg.connect(url) as db:
        rows = db.execute(f"SELECT id, balance, note FROM {table}").fetchall()
    return {r[0]: "|".join(map(str, r)) for r in rows}


@pytest.fixture
def table(postgres_server):
    name = f"accounts_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, balance int, note text)")
        db.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        db.execute(
            f"INSERT INTO {name} SELECT i, i, 'init' FROM generate_series(0, %s) i", (ROWS - 1,)
        )
    return name


def _wait_mirrored(job, out, url, table) -> None:
    """Until the committed mirror equals the table (the writer is done)."""
    expected = _table_state(url, table)
    wait_until(
        lambda: mirrored_state(committed_lines(out)) == expected,
        "the committed mirror equals the table",
        job=job,
        timeout=120,
        interval=0.3,  # each look reads every committed file
    )


def test_the_cdc_source_mirrors_a_changing_table_exactly_once_through_failures_and_a_rescale(
    spark, tmp_path, postgres_server, table
):
    url, out, chk = postgres_server.url, tmp_path / "out", tmp_path / "chk"
    source = source_builder(url, table, slot=f"e2e_{uuid.uuid4().hex[:8]}").split_size(500).build()
    marker = Row(id=MARKER, balance=0, note="fail")
    first = cdc_mirror_job(source, out, chk, parallelism=2, fail_at={0: marker, 1: marker})
    writer = Writer(url, table, ops=1_500, rate=500, seed=7, first_id=ROWS, mark=True)
    job = first.execute_async("cdc failures")
    writer.start()  # changes from the snapshot phase on
    killer = kill_slots(job, kills=1)
    writer.join(60)
    assert writer.error is None and not writer.is_alive()
    killer.join(60)
    assert len(killer.killed) == 1
    _wait_mirrored(job, out, url, table)
    check_restarts(job, kills=1, exceptions=(1, 2))
    wait_for_checkpoints(job, 1)
    resolved(job.cancel(), "the job to be cancelled")
    assert job.get_job_status().result() is JobStatus.CANCELED
    # restored at 3 subtasks while the table keeps changing
    second = cdc_mirror_job(
        source, out, chk, parallelism=3, restore_path=str(chk / job.jobmaster.job_id)
    ).execute_async("cdc at 3")
    writer = Writer(url, table, ops=500, rate=500, seed=8, first_id=writer.next_id)
    writer.start()
    writer.join(60)
    assert writer.error is None
    _wait_mirrored(second, out, url, table)
    resolved(second.cancel(), "the job to be cancelled")
    assert second.jobmaster.stats.restored_from is not None
