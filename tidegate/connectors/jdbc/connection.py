"""Opening PostgreSQL connections for the JDBC sinks, with errors that say what to fix, and
which database errors are worth a retry."""

from __future__ import annotations

from typing import Any

from tidegate.connectors.jdbc.options import JdbcConnectionOptions

__all__ = [
    "connect",
    "error_text",
    "is_transient",
    "require_prepared_transactions",
    "statement_error",
]


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ImportError("the JDBC sinks need psycopg: pip install 'tidegate[postgres]'") from None
    return psycopg


def error_text(error: BaseException) -> str:
    """A database error's message on one line, without a final period (to go inside ours)."""
    return " ".join(str(error).split()).rstrip(".")


def connect(options: JdbcConnectionOptions, *, autocommit: bool = False) -> Any:
    """A psycopg connection to the options' database; ConnectionError naming the URL and
    what to check if it cannot be opened (server down or unreachable, no such database,
    wrong user or password)."""
    psycopg = _psycopg()
    try:
        return psycopg.connect(options.conninfo(), autocommit=autocommit)
    except psycopg.OperationalError as e:
        raise ConnectionError(
            f"cannot connect to PostgreSQL at {options.describe()}: {error_text(e)}. Check "
            "that the server runs and accepts connections from this host, and the URL's host, "
            "port and database, the user name and the password"
        ) from e


def is_transient(error: BaseException) -> bool:
    """A lost or refused connection, a serialization failure or a deadlock: a retry of the
    whole transaction may succeed. Anything else (bad SQL, a constraint) fails again."""
    psycopg = _psycopg()
    return isinstance(
        error, ConnectionError | psycopg.OperationalError | psycopg.errors.TransactionRollback
    ) and not isinstance(error, psycopg.errors.LockNotAvailable)


def statement_error(error: BaseException, sql: str) -> RuntimeError:
    """The error a sink raises for a statement PostgreSQL refused."""
    return RuntimeError(
        f"PostgreSQL refused the JDBC sink's statement {sql!r}: {error_text(error)}"
    )


def require_prepared_transactions(conn: Any, options: JdbcConnectionOptions) -> None:
    """Fail with what to change if the server cannot prepare transactions."""
    row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    if row[0] == 0:
        raise RuntimeError(
            f"the PostgreSQL server at {options.describe()} has max_prepared_transactions = 0, "
            "so JdbcSink.exactly_once_sink cannot prepare its transactions (two-phase "
            "commit). Set max_prepared_transactions in postgresql.conf to at least the sink's "
            "parallelism times the checkpoints that may be in flight plus a margin (e.g. "
            "max_connections), restart the server, or use JdbcSink.sink (at least once; an "
            "idempotent upsert statement gives exactly-once results for keyed values)"
        )
