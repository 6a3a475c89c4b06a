"""The at-least-once JDBC sink writer (`JdbcSink.sink`): records are executed in batches of
`batch_size` (psycopg's `executemany`, pipelined), each batch one transaction, committed:

- when the batch is full (`write_batch`);
- when `batch_interval_ms` passed since the last flush (a timer thread; its error, if any,
  fails the next `write_batch` or checkpoint);
- at each checkpoint (`prepare_commit`), so a completed checkpoint covers only written records.

A batch failing by a lost connection, a serialization failure or a deadlock (connection.py
`is_transient`) is retried on a new connection after a pause that doubles each time, up to
`max_retries` times: a batch whose commit was acknowledged too late may then be written twice,
and a restore writes the records after the checkpoint again, so the table gets every record at
least once. An idempotent statement (`INSERT ... ON CONFLICT (key) DO UPDATE SET ...` of a
keyed value) makes the final table exact: each key ends with its last value.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tidegate.connectors.jdbc.connection import (
    connect,
    error_text,
    is_transient,
    statement_error,
)
from tidegate.connectors.jdbc.options import JdbcConnectionOptions, JdbcExecutionOptions
from tidegate.connectors.jdbc.statements import JdbcStatement

__all__ = ["BatchingWriter", "retry_pause_s"]

#: the first retry's pause (seconds); each next one doubles, up to MAX_PAUSE_S
FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 5.0


def retry_pause_s(retry: int) -> float:
    """The pause before retry number `retry` (0-based)."""
    return min(FIRST_PAUSE_S * 2**retry, MAX_PAUSE_S)


class BatchingWriter:
    """One sink subtask's writer (connectors/base.py SinkWriter); see the module docstring."""

    def __init__(
        self,
        statement: JdbcStatement,
        connection: JdbcConnectionOptions,
        execution: JdbcExecutionOptions,
    ) -> None:
        self._statement = statement
        self._options = connection
        self._execution = execution
        self._conn: Any = None
        self._rows: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._timer_error: BaseException | None = None
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if execution.batch_interval_ms > 0:
            self._timer = threading.Thread(target=self._flush_on_time, daemon=True)
            self._timer.start()

    def write_batch(self, records: list[Any]) -> None:
        rows = self._statement.parameters(records)
        with self._lock:
            self._raise_timer_error()
            self._rows.extend(rows)
            if len(self._rows) >= self._execution.batch_size:
                self._flush()

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Execute and commit every buffered record: nothing to commit later."""
        with self._lock:
            self._raise_timer_error()
            self._flush()
        return []

    def close(self) -> None:
        """Stop the timer; buffered records are dropped (a restore replays them)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join(10)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _raise_timer_error(self) -> None:
        if self._timer_error is not None:
            error, self._timer_error = self._timer_error, None
            raise RuntimeError(
                f"a timed flush of the JDBC sink failed: {error_text(error)}"
            ) from error

    def _flush_on_time(self) -> None:
        interval_s = self._execution.batch_interval_ms / 1000
        while not self._stop.wait(interval_s / 2):
            with self._lock:
                due = time.monotonic() - self._last_flush >= interval_s
                if not due or not self._rows or self._timer_error is not None:
                    continue
                try:
                    self._flush()
                except Exception as e:  # raised on the task thread by _raise_timer_error
                    self._timer_error = e

    def _flush(self) -> None:
        size = self._execution.batch_size
        while self._rows:
            self._execute(self._rows[:size])
            del self._rows[:size]
        self._last_flush = time.monotonic()

    def _execute(self, rows: list[tuple[Any, ...]]) -> None:
        """One batch in one transaction, retried on transient errors."""
        import psycopg

        retries = self._execution.max_retries
        for retry in range(retries + 1):
            try:
                if self._conn is None:
                    self._conn = connect(self._options)
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement.query, rows)
                self._conn.commit()
                return
            except (psycopg.Error, ConnectionError) as e:
                self._discard_connection()
                if not is_transient(e):
                    raise statement_error(e, self._statement.sql) from e
                if retry == retries:
                    raise RuntimeError(
                        f"the JDBC sink could not write a batch of {len(rows)} record(s) to "
                        f"{self._options.describe()} in {retries + 1} attempt(s) "
                        f"(JdbcExecutionOptions max_retries = {retries}): {error_text(e)}"
                    ) from e
                time.sleep(retry_pause_s(retry))

    def _discard_connection(self) -> None:
        """After a failed batch: roll back (a live connection is kept) or drop the
        connection (a lost one is reopened by the next attempt)."""
        import psycopg

        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except psycopg.Error:
            self._conn.close()
            self._conn = None
