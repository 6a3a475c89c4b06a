"""PyFlink's `JdbcSink` for PostgreSQL: `JdbcSink.sink(...)` (at least once, at_least_once.py)
and `JdbcSink.exactly_once_sink(...)` (two-phase commit, exactly_once.py).

    sink = JdbcSink.sink(
        "INSERT INTO totals (k, total) VALUES (?, ?) "
        "ON CONFLICT (k) DO UPDATE SET total = EXCLUDED.total",
        Types.ROW([Types.STRING(), Types.LONG()]),
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
        .with_url("jdbc:postgresql://127.0.0.1:5432/shop")
        .with_user_name("tidegate")
        .with_password("secret")
        .build(),
        JdbcExecutionOptions.builder().with_batch_size(500).build(),
    )
    stream.add_sink(sink)  # or stream.sink_to(sink)

The statement uses JDBC `?` placeholders, one per field of `type_info`; records are Rows or
tuples of those fields, by position.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.jdbc.at_least_once import BatchingWriter
from tidegate.connectors.jdbc.exactly_once import (
    PreparedCommitter,
    TransactionalWriter,
    recover,
)
from tidegate.connectors.jdbc.options import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
)
from tidegate.connectors.jdbc.statements import JdbcStatement

__all__ = ["JdbcSink"]


class NoCommits:
    """The at-least-once sink's committer: its writer commits every batch itself."""

    def commit(self, committables: list[Any]) -> None:
        """Never given any: the writer's checkpoints return no committables."""


@dataclass(frozen=True)
class JdbcSink:
    """A JDBC sink (connectors/base.py Sink). Make one with `JdbcSink.sink` or
    `JdbcSink.exactly_once_sink`."""

    statement: JdbcStatement
    connection: JdbcConnectionOptions
    execution: JdbcExecutionOptions
    #: None: at least once
    exactly_once: JdbcExactlyOnceOptions | None = None
    job_id: str = ""

    @staticmethod
    def sink(
        sql: str,
        type_info: Any,
        jdbc_connection_options: JdbcConnectionOptions,
        jdbc_execution_options: JdbcExecutionOptions | None = None,
    ) -> JdbcSink:
        """At least once: batches committed by size, interval and at each checkpoint, with
        retries; exactly-once results for an idempotent (upsert) statement."""
        return JdbcSink(
            JdbcStatement.of(sql, type_info),
            _connection(jdbc_connection_options),
            jdbc_execution_options or JdbcExecutionOptions.defaults(),
        )

    @staticmethod
    def exactly_once_sink(
        sql: str,
        type_info: Any,
        jdbc_connection_options: JdbcConnectionOptions,
        jdbc_execution_options: JdbcExecutionOptions | None = None,
        exactly_once_options: JdbcExactlyOnceOptions | None = None,
    ) -> JdbcSink:
        """Exactly once: each checkpoint's records in one prepared transaction per subtask,
        committed when the checkpoint completes. The server needs max_prepared_transactions
        > 0."""
        return JdbcSink(
            JdbcStatement.of(sql, type_info),
            _connection(jdbc_connection_options),
            jdbc_execution_options or JdbcExecutionOptions.defaults(),
            exactly_once_options or JdbcExactlyOnceOptions.defaults(),
        )

    def for_job(self, job_id: str) -> JdbcSink:
        """Prepared transactions are named after the running job (connectors/base.py
        UsesJobId)."""
        return replace(self, job_id=job_id)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> Any:
        if self.exactly_once is None:
            return BatchingWriter(self.statement, self.connection, self.execution)
        if not self.job_id:
            raise RuntimeError("an exactly-once JdbcSink runs only inside a job (no job id)")
        return TransactionalWriter(
            self.statement,
            self.connection,
            self.execution,
            self.exactly_once,
            self.job_id,
            subtask_index,
            attempt,
        )

    def create_committer(self) -> Any:
        if self.exactly_once is None:
            return NoCommits()
        return PreparedCommitter(self.connection, self.exactly_once)

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Exactly once: roll back what this subtask's writer indexes left prepared and no
        restored checkpoint covers (exactly_once.py step 4). At least once: nothing."""
        if self.exactly_once is not None:
            recover(self.connection, self.job_id, subtask_index, parallelism, restored)

    def __repr__(self) -> str:
        kind = "exactly once" if self.exactly_once is not None else "at least once"
        return f"JdbcSink({kind}, {self.statement.sql!r}, {self.connection.describe()})"


def _connection(options: Any) -> JdbcConnectionOptions:
    if not isinstance(options, JdbcConnectionOptions):
        raise TypeError(
            "a JdbcSink needs JdbcConnectionOptions: JdbcConnectionOptions."
            "JdbcConnectionOptionsBuilder().with_url('jdbc:postgresql://host:port/db')"
            f"...build(), got {options!r}"
        )
    return options
