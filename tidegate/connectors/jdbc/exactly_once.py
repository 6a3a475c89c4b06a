"""The exactly-once JDBC sink (`JdbcSink.exactly_once_sink`) by PostgreSQL's two-phase
commit, per sink subtask (writer index w; gids in gids.py, SQL in transactions.py):

1. Write: records are executed (`executemany`, `batch_size` at a time) in one open
   transaction of the writer's connection; nothing is visible to others.
2. Pre-commit (`prepare_commit(n)`, synchronous phase of checkpoint n): the rest of the
   records are executed, the marker row of gid `tidegate:<job>:<w>:<attempt>:<n>:<nonce>` is
   inserted, and `PREPARE TRANSACTION gid`: the transaction is on disk and survives any crash
   of the job. The committable (job, w, n, gid) is stored in the checkpoint.
3. Commit (checkpoint n completed): `COMMIT PREPARED gid` from the committer's own connection.
4. Recover (`Sink.recover` on every start, then `commit` of the restored committables): roll
   back every prepared transaction of this job (and of the jobs whose committables were
   restored) whose writer index this subtask takes over, except the restored gids: those
   belong to checkpoints that the restore keeps, they are committed in step 3. A restored gid
   that no longer exists was committed before the failure if its marker row exists; without
   the marker its records are lost (someone rolled it back, or the sink writes to another
   database than before), and the commit fails with an error saying so rather than passing.

A transaction keeps its row locks until its checkpoint completes and it is committed. A
statement of the next checkpoint's transaction that touches one of those rows (the same key
upserted in two consecutive checkpoints) would wait for a commit that the same task thread
makes later: it fails after the lock timeout with an error explaining this. Keyed values that
are overwritten belong in the at-least-once sink with an upsert (at_least_once.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tidegate.connectors.jdbc.at_least_once import retry_pause_s
from tidegate.connectors.jdbc.connection import (
    connect,
    error_text,
    is_transient,
    require_prepared_transactions,
    statement_error,
)
from tidegate.connectors.jdbc.gids import CommitOutcome, Gid, commit_outcome, to_roll_back
from tidegate.connectors.jdbc.options import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
)
from tidegate.connectors.jdbc.statements import JdbcStatement
from tidegate.connectors.jdbc.transactions import (
    commit_prepared,
    create_marker_table,
    delete_old_markers,
    insert_marker,
    list_prepared,
    marker_exists,
    prepare,
    rollback_prepared,
)

__all__ = ["PreparedCommitter", "PreparedTransactionCommittable", "TransactionalWriter", "recover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedTransactionCommittable:
    """Writer `writer`'s transaction of checkpoint `checkpoint_id` (`gid` None: it wrote
    nothing; the committable still tells a restore which job the writer belonged to)."""

    job_id: str
    writer: int
    checkpoint_id: int
    gid: str | None


def recover(
    connection: JdbcConnectionOptions,
    job_id: str,
    subtask_index: int,
    parallelism: int,
    restored: list[PreparedTransactionCommittable],
) -> None:
    """Step 4 (before the committer commits `restored`): check the server, create the
    marker table, roll back the leftovers this subtask takes over."""
    conn = connect(connection, autocommit=True)
    try:
        require_prepared_transactions(conn, connection)
        create_marker_table(conn)
        prepared = [str(p.gid) for p in list_prepared(conn)]
        jobs = {job_id} | {c.job_id for c in restored}
        keep = [c.gid for c in restored if c.gid is not None]
        rolled_back = to_roll_back(prepared, jobs, subtask_index, parallelism, keep)
        for gid in rolled_back:
            rollback_prepared(conn, gid)
        if rolled_back:
            log.info(
                "JdbcSink subtask %d rolled back %d prepared transaction(s) no checkpoint "
                "covers: %s",
                subtask_index,
                len(rolled_back),
                ", ".join(rolled_back),
            )
        if subtask_index == 0:
            delete_old_markers(conn)
    finally:
        conn.close()


class TransactionalWriter:
    """Steps 1 and 2 for writer index `writer` (connectors/base.py SinkWriter)."""

    def __init__(
        self,
        statement: JdbcStatement,
        connection: JdbcConnectionOptions,
        execution: JdbcExecutionOptions,
        exactly_once: JdbcExactlyOnceOptions,
        job_id: str,
        writer: int,
        attempt: int,
    ) -> None:
        self._statement = statement
        self._options = connection
        self._batch_size = execution.batch_size
        self._lock_timeout_ms = exactly_once.lock_timeout_ms
        self._job_id, self._writer, self._attempt = job_id, writer, attempt
        self._nonce = uuid.uuid4().hex[:8]
        self._rows: list[tuple[Any, ...]] = []
        self._in_transaction = False
        self._conn = connect(connection)
        self._conn.execute(f"SET lock_timeout = {int(self._lock_timeout_ms)}")
        self._conn.commit()

    def write_batch(self, records: list[Any]) -> None:
        self._rows.extend(self._statement.parameters(records))
        if len(self._rows) >= self._batch_size:
            self._execute()

    def prepare_commit(self, checkpoint_id: int) -> list[PreparedTransactionCommittable]:
        self._execute()
        if not self._in_transaction:
            return [PreparedTransactionCommittable(self._job_id, self._writer, checkpoint_id, None)]
        import psycopg

        gid = Gid(self._job_id, self._writer, self._attempt, checkpoint_id, self._nonce)
        try:
            insert_marker(self._conn, gid)
            prepare(self._conn, str(gid))
        except psycopg.Error as e:
            raise RuntimeError(
                f"the exactly-once JdbcSink could not prepare its transaction {gid} on "
                f"{self._options.describe()}: {error_text(e)}. If the server's "
                "max_prepared_transactions "
                "is reached, raise it or resolve the transactions dead jobs left (`tidegate "
                "transactions list`)"
            ) from e
        self._in_transaction = False
        return [PreparedTransactionCommittable(self._job_id, self._writer, checkpoint_id, str(gid))]

    def _execute(self) -> None:
        import psycopg

        if not self._rows:
            return
        try:
            with self._conn.cursor() as cur:
                cur.executemany(self._statement.query, self._rows)
        except psycopg.errors.LockNotAvailable as e:
            raise RuntimeError(
                f"a statement of the exactly-once JdbcSink waited more than "
                f"{self._lock_timeout_ms} ms for a row lock ({error_text(e)}). Most likely "
                "the row was written by this sink's transaction of an earlier checkpoint, "
                "which holds its locks until that checkpoint completes and it is committed, "
                "by this same task (e.g. one key upserted in consecutive checkpoints). Write "
                "values that are overwritten with JdbcSink.sink and an upsert statement "
                "(idempotent, so its results are exactly once), or, if another program holds "
                "the lock, raise "
                "JdbcExactlyOnceOptions.builder().with_lock_timeout_ms(...)"
            ) from e
        except psycopg.Error as e:
            if is_transient(e):
                raise RuntimeError(
                    f"the exactly-once JdbcSink lost its transaction on "
                    f"{self._options.describe()}: {error_text(e)}. The job restarts from its last "
                    "checkpoint and writes these records again"
                ) from e
            raise statement_error(e, self._statement.sql) from e
        self._in_transaction = True
        self._rows = []

    def close(self) -> None:
        """Closing the connection rolls back the open transaction (records after the last
        checkpoint: a restore replays them). Prepared ones stay for the committer or a
        restore."""
        self._conn.close()
        self._rows = []


class PreparedCommitter:
    """Step 3 (connectors/base.py Committer): idempotent by the commit markers."""

    def __init__(self, connection: JdbcConnectionOptions, exactly_once: JdbcExactlyOnceOptions):
        self._options = connection
        self._attempts = exactly_once.max_commit_attempts
        self._conn: Any = None

    def commit(self, committables: list[PreparedTransactionCommittable]) -> None:
        done = set()
        for c in sorted(committables, key=lambda c: c.checkpoint_id):
            if c.gid is not None:
                self._commit(c)
                done.add((c.job_id, c.writer))
        for job_id, writer in sorted(done):
            self._with_retries(lambda conn, j=job_id, w=writer: delete_old_markers(conn, j, w))

    def _commit(self, c: PreparedTransactionCommittable) -> None:
        def attempt(conn: Any) -> CommitOutcome:
            found = commit_prepared(conn, c.gid)
            return commit_outcome(found, found or marker_exists(conn, c.gid))

        if self._with_retries(attempt) is CommitOutcome.LOST:
            raise RuntimeError(
                f"the exactly-once JdbcSink cannot commit prepared transaction {c.gid!r} of "
                f"checkpoint {c.checkpoint_id} (writer {c.writer}) on "
                f"{self._options.describe()}: it is no longer prepared and its commit marker "
                "is not in the table tidegate_jdbc_commits, so it was rolled back (by hand, "
                "or by another job restored from the same checkpoint) or prepared in another "
                "database: its records are not in the table. Restore the job from an earlier "
                "checkpoint or savepoint to write them again"
            )

    def _with_retries(self, action: Any) -> Any:
        """`action(connection)`, on a new connection after a transient error, up to
        `max_commit_attempts` times in all."""
        import psycopg

        retry = 0
        while True:
            try:
                if self._conn is None:
                    self._conn = connect(self._options, autocommit=True)
                return action(self._conn)
            except (psycopg.Error, ConnectionError) as e:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                retry += 1
                if not is_transient(e) or retry == self._attempts:
                    raise RuntimeError(
                        f"the exactly-once JdbcSink could not commit on "
                        f"{self._options.describe()} (attempt {retry} of "
                        f"{self._attempts}): {error_text(e)}"
                    ) from e
                time.sleep(retry_pause_s(retry - 1))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
