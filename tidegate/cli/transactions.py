"""`tidegate transactions list|commit|abort SOURCE`: the sink transactions a job left open, and
resolving them by hand (PostgreSQL prepared transactions of the exactly-once JdbcSink).

    tidegate transactions list JOB_DIR --postgres URL [--user NAME] [--json]
    tidegate transactions commit JOB_DIR GID... --postgres URL [--user NAME]
    tidegate transactions abort JOB_DIR GID... --postgres URL [--user NAME]

SOURCE is the job's checkpoint directory (the one holding chk-<n>), or a bare job id. A
transaction is *covered* when the sink committables of one of the job's completed checkpoints
name it: that checkpoint completed, so its records belong in the table and `commit` makes
them visible (a restore from it would commit them too). `commit` refuses a transaction no
completed checkpoint covers (its records will be written again by a restore, or were never
part of a completed checkpoint), and `abort` refuses a covered one (its records would be lost).
With a bare job id nothing is covered: only `abort` works. The password comes from the URL,
`PGPASSWORD` or ~/.pgpass (libpq's ways).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from tidegate.cli.checkpoints import find_checkpoints
from tidegate.cli.errors import CliError, one_line, reported, verbose_option
from tidegate.cli.formatting import format_table
from tidegate.connectors.jdbc.connection import connect
from tidegate.connectors.jdbc.gids import parse_gid
from tidegate.connectors.jdbc.options import JdbcConnectionOptions
from tidegate.connectors.jdbc.transactions import (
    PreparedTransaction,
    commit_prepared,
    list_prepared,
    rollback_prepared,
)
from tidegate.runtime.connector_operators import SinkOperator
from tidegate.state_processor.snapshot import SnapshotView

__all__ = ["LingeringTransaction", "covered_gids", "lingering", "transactions_command"]


@dataclass(frozen=True, slots=True)
class LingeringTransaction:
    prepared: PreparedTransaction
    #: the completed checkpoint whose committables name it, None if none does
    covered_by: int | None

    @property
    def gid(self) -> str:
        return str(self.prepared.gid)


def covered_gids(job_dir: str) -> dict[str, int]:
    """gid -> the first completed checkpoint of `job_dir` whose sink committables name it."""
    covered: dict[str, int] = {}
    for found in sorted(find_checkpoints(job_dir), key=lambda f: f.checkpoint_id):
        view = SnapshotView.open(found.path)
        for uid in view.operators:
            for _subtask, states in view.operator_state(uid):
                _mode, entries = states.get(SinkOperator.COMMITTABLES, (None, []))
                for _writer, _cid, committable in entries:
                    gid = getattr(committable, "gid", None)
                    if isinstance(gid, str):
                        covered.setdefault(gid, found.checkpoint_id)
    return covered


def lingering(
    prepared: list[PreparedTransaction], job_id: str, covered: dict[str, int]
) -> list[LingeringTransaction]:
    """The prepared transactions of job `job_id` and of the jobs whose transactions its
    checkpoints cover (a job restored from an earlier run's checkpoint), with their cover."""
    jobs = {job_id} | {g.job_id for g in map(parse_gid, covered) if g is not None}
    return [
        LingeringTransaction(p, covered.get(str(p.gid))) for p in prepared if p.gid.job_id in jobs
    ]


def _connection(url: str, user: str | None) -> Any:
    builder = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
    if user:
        builder.with_user_name(user)
    try:
        return connect(builder.build(), autocommit=True)
    except ConnectionError as e:
        raise CliError(one_line(str(e)), "check --postgres URL and --user") from e


def _source(source: str) -> tuple[str, dict[str, int]]:
    """(job id, covered gids) of a job directory, or of a bare job id (nothing covered)."""
    if os.path.exists(source) or "://" in source:
        found = find_checkpoints(source)
        jobs = {f.job_id for f in found}
        if len(jobs) != 1:
            raise CliError(
                f"{source} holds the completed checkpoints of {len(jobs)} jobs, not one",
                "pass one job directory (the one holding chk-<n>)",
            )
        return jobs.pop(), covered_gids(source)
    return source, {}


def _rows(found: list[LingeringTransaction]) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {
            "gid": t.gid,
            "job_id": t.prepared.gid.job_id,
            "writer": t.prepared.gid.writer,
            "attempt": t.prepared.gid.attempt,
            "checkpoint_id": t.prepared.gid.checkpoint_id,
            "prepared": t.prepared.prepared.isoformat(timespec="seconds"),
            "age_s": round((now - t.prepared.prepared).total_seconds(), 1),
            "covered_by_checkpoint": t.covered_by,
        }
        for t in found
    ]


postgres_options = [
    click.option(
        "--postgres",
        "url",
        required=True,
        metavar="URL",
        help="The sink's database: jdbc:postgresql://host:port/db or postgresql://...",
    ),
    click.option("--user", metavar="NAME", help="The database user (else the URL's)."),
]


def _with_postgres_options(function: Any) -> Any:
    for option in reversed(postgres_options):
        function = option(function)
    return function


@click.group("transactions")
def transactions_command() -> None:
    """Sink transactions a job left open (PostgreSQL prepared transactions of the
    exactly-once JdbcSink): list them, commit or abort them by gid."""


@transactions_command.command("list")
@click.argument("source", metavar="JOB_DIR_OR_JOB_ID")
@_with_postgres_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@verbose_option
def list_transactions(
    source: str, url: str, user: str | None, as_json: bool, verbose: bool
) -> None:
    """List the job's prepared transactions with their checkpoint, age and cover."""
    with reported(verbose):
        job_id, covered = _source(source)
        conn = _connection(url, user)
        try:
            rows = _rows(lingering(list_prepared(conn), job_id, covered))
        finally:
            conn.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no prepared transactions of job {job_id}")
        return
    table = [
        (
            r["gid"],
            r["writer"],
            r["checkpoint_id"],
            r["attempt"],
            f"{r['age_s']:.0f}s",
            "-" if r["covered_by_checkpoint"] is None else f"chk-{r['covered_by_checkpoint']}",
        )
        for r in rows
    ]
    click.echo(format_table(["GID", "WRITER", "CHECKPOINT", "ATTEMPT", "AGE", "COVERED BY"], table))


def _resolve(source: str, gids: tuple[str, ...], url: str, user: str | None, commit: bool) -> None:
    job_id, covered = _source(source)
    conn = _connection(url, user)
    try:
        found = {t.gid: t for t in lingering(list_prepared(conn), job_id, covered)}
        for gid in gids:
            t = found.get(gid)
            if t is None:
                raise CliError(
                    f"{gid} is not a prepared transaction of job {job_id}",
                    f"`tidegate transactions list {source} --postgres URL` lists them",
                )
            if commit and t.covered_by is None:
                raise CliError(
                    f"refusing to commit {gid}: no completed checkpoint of job {job_id} covers "
                    "it, so its records are not part of the job's consistent output",
                    "abort it (a restore of the job writes those records again)",
                )
            if not commit and t.covered_by is not None:
                raise CliError(
                    f"refusing to abort {gid}: checkpoint {t.covered_by} covers it (it "
                    "completed), aborting would lose its records",
                    "commit it",
                )
        for gid in gids:
            done = commit_prepared(conn, gid) if commit else rollback_prepared(conn, gid)
            verb = "committed" if commit else "aborted"
            click.echo(f"{verb} {gid}" if done else f"{gid} was resolved meanwhile by another")
    finally:
        conn.close()


@transactions_command.command("commit")
@click.argument("source", metavar="JOB_DIR")
@click.argument("gids", nargs=-1, required=True, metavar="GID...")
@_with_postgres_options
@verbose_option
def commit_transactions(
    source: str, gids: tuple[str, ...], url: str, user: str | None, verbose: bool
) -> None:
    """Commit prepared transactions that a completed checkpoint of the job covers."""
    with reported(verbose):
        _resolve(source, gids, url, user, commit=True)


@transactions_command.command("abort")
@click.argument("source", metavar="JOB_DIR_OR_JOB_ID")
@click.argument("gids", nargs=-1, required=True, metavar="GID...")
@_with_postgres_options
@verbose_option
def abort_transactions(
    source: str, gids: tuple[str, ...], url: str, user: str | None, verbose: bool
) -> None:
    """Roll back prepared transactions that no completed checkpoint of the job covers."""
    with reported(verbose):
        _resolve(source, gids, url, user, commit=False)
