"""PostgreSQL prepared transactions of the exactly-once JdbcSink, as lingering transactions
(`--postgres URL [--user NAME]`). The id is the gid; a gid names the job, writer, attempt and
checkpoint that prepared it (connectors/jdbc/gids.py), so a bare job id works too (nothing is
covered then). The password comes from the URL, `PGPASSWORD` or ~/.pgpass (libpq's ways)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tidegate.cli.errors import CliError, one_line
from tidegate.cli.transactions.model import JobCommittables, LingeringTransaction
from tidegate.connectors.jdbc.connection import connect
from tidegate.connectors.jdbc.exactly_once import PreparedTransactionCommittable
from tidegate.connectors.jdbc.gids import parse_gid
from tidegate.connectors.jdbc.options import JdbcConnectionOptions
from tidegate.connectors.jdbc.transactions import (
    PreparedTransaction,
    commit_prepared,
    list_prepared,
    rollback_prepared,
)

__all__ = ["PostgresTransactions", "covered_gids", "lingering_prepared"]

KIND = "postgres"


def covered_gids(job: JobCommittables) -> dict[str, int]:
    """gid -> the first completed checkpoint of the job whose sink committables name it."""
    covered: dict[str, int] = {}
    for c in job.of_type(PreparedTransactionCommittable):
        if c.committable.gid is not None:
            covered.setdefault(c.committable.gid, c.covered_by)
    return covered


def lingering_prepared(
    prepared: list[PreparedTransaction], job_id: str, covered: dict[str, int], now: datetime
) -> list[LingeringTransaction]:
    """The prepared transactions of job `job_id` and of the jobs whose transactions its
    checkpoints cover (a job restored from an earlier run's checkpoint), with their cover."""
    jobs = {job_id} | {g.job_id for g in map(parse_gid, covered) if g is not None}
    return [
        LingeringTransaction(
            KIND,
            str(p.gid),
            p.gid.writer,
            p.gid.checkpoint_id,
            p.gid.attempt,
            round((now - p.prepared).total_seconds(), 1),
            covered.get(str(p.gid)),
            f"job {p.gid.job_id}" if p.gid.job_id != job_id else "",
        )
        for p in prepared
        if p.gid.job_id in jobs
    ]


class PostgresTransactions:
    """The job's prepared transactions in the database at `url`."""

    kind = KIND

    def __init__(self, job: JobCommittables, url: str, user: str | None) -> None:
        builder = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
        if user:
            builder.with_user_name(user)
        try:
            self._conn: Any = connect(builder.build(), autocommit=True)
        except ConnectionError as e:
            raise CliError(one_line(str(e)), "check --postgres URL and --user") from e
        self._job = job

    def lingering(self) -> list[LingeringTransaction]:
        prepared = list_prepared(self._conn)
        now = datetime.now(prepared[0].prepared.tzinfo) if prepared else datetime.now()
        return lingering_prepared(prepared, self._job.job_id, covered_gids(self._job), now)

    def commit(self, t: LingeringTransaction) -> bool:
        return commit_prepared(self._conn, t.id)

    def abort(self, t: LingeringTransaction) -> bool:
        return rollback_prepared(self._conn, t.id)

    def close(self) -> None:
        self._conn.close()
