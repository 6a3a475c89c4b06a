"""`tidegate transactions list|commit|abort SOURCE`: the sink transactions a job left open, and
resolving them by hand.

    tidegate transactions list JOB_DIR [--postgres URL [--user NAME]] [--kafka BOOTSTRAP] [--json]
    tidegate transactions commit JOB_DIR ID... [--postgres URL [--user NAME]] [--kafka BOOTSTRAP]
    tidegate transactions abort JOB_DIR ID... [--postgres URL [--user NAME]] [--kafka BOOTSTRAP]

SOURCE is the job's checkpoint directory (the one holding chk-<n>), or, with --postgres only, a
bare job id (nothing is covered then: only `abort` works). The kinds (model.py for the model
and the rule, one module each): FileSink pending part files (always: their paths are in the
committables), PostgreSQL prepared transactions of the exactly-once JdbcSink (`--postgres`),
transactional ids of the exactly-once KafkaSink (`--kafka`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

import click

from tidegate.cli.errors import CliError, reported, verbose_option
from tidegate.cli.formatting import format_table
from tidegate.cli.transactions.files import FileTransactions, UnsupportedFilesystem
from tidegate.cli.transactions.model import (
    JobCommittables,
    LingeringTransaction,
    SinkTransactions,
    job_committables,
    refusal,
)

__all__ = ["transactions_command"]

_options = [
    click.option(
        "--postgres",
        "url",
        metavar="URL",
        help="The JdbcSink's database: jdbc:postgresql://host:port/db or postgresql://...",
    ),
    click.option("--user", metavar="NAME", help="The database user (else the URL's)."),
    click.option(
        "--kafka", "bootstrap", metavar="BOOTSTRAP", help="The KafkaSink's bootstrap servers."
    ),
    verbose_option,
]


def _with_options(function: Any) -> Any:
    for option in reversed(_options):
        function = option(function)
    return function


def _job(source: str, url: str | None) -> JobCommittables:
    if os.path.exists(source) or "://" in source:
        return job_committables(source)
    if url is None:
        raise CliError(
            f"{source} does not exist",
            "pass the job's checkpoint directory (the one holding chk-<n>); a bare job id "
            "works with --postgres only",
        )
    return JobCommittables(source, ())


def _kinds(
    job: JobCommittables, url: str | None, user: str | None, bootstrap: str | None
) -> list[SinkTransactions]:
    """The kinds to look at, and hints for the ones the job's committables ask for but the
    options leave out."""
    from tidegate.connectors.jdbc.exactly_once import PreparedTransactionCommittable
    from tidegate.connectors.kafka.sink import KafkaCommittable

    kinds: list[SinkTransactions] = []
    try:
        kinds.append(FileTransactions(job))
    except UnsupportedFilesystem as e:
        click.echo(f"note: {e.message}", err=True)
    if url is not None:
        from tidegate.cli.transactions.postgres import PostgresTransactions

        kinds.append(PostgresTransactions(job, url, user))
    elif job.of_type(PreparedTransactionCommittable):
        click.echo("the job has a JdbcSink: pass --postgres URL to see its transactions", err=True)
    if bootstrap is not None:
        from tidegate.cli.transactions.kafka import KafkaTransactions

        try:
            kinds.append(KafkaTransactions(job, bootstrap))
        except CliError:
            _close(kinds)
            raise
    elif any(c.committable.txn_id for c in job.of_type(KafkaCommittable)):
        click.echo("the job has a KafkaSink: pass --kafka BOOTSTRAP to see its ids", err=True)
    return kinds


def _row(t: LingeringTransaction) -> dict[str, Any]:
    row = asdict(t)
    row["covered_by_checkpoint"] = row.pop("covered_by")
    return row


def _cell(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


@click.group("transactions")
def transactions_command() -> None:
    """Sink transactions a job left open (FileSink pending files, JdbcSink prepared
    transactions, KafkaSink transactional ids): list them, commit or abort them by id."""


@transactions_command.command("list")
@click.argument("source", metavar="JOB_DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_with_options
def list_transactions(
    source: str,
    as_json: bool,
    url: str | None,
    user: str | None,
    bootstrap: str | None,
    verbose: bool,
) -> None:
    """List the job's lingering sink transactions with their checkpoint, age and cover."""
    with reported(verbose):
        job = _job(source, url)
        found = _lingering(_kinds(job, url, user, bootstrap))
    if as_json:
        click.echo(json.dumps([_row(t) for t in found], indent=2))
        return
    if not found:
        click.echo(f"no lingering sink transactions of job {job.job_id}")
        return
    table = [
        (
            t.kind,
            t.id,
            _cell(t.writer),
            _cell(t.checkpoint_id),
            _cell(t.attempt),
            _cell(t.age_s, "{:.0f}s"),
            _cell(t.covered_by, "chk-{}"),
            t.note,
        )
        for t in found
    ]
    headers = ["KIND", "ID", "WRITER", "CHECKPOINT", "ATTEMPT", "AGE", "COVERED BY", "NOTE"]
    click.echo(format_table(headers, table))


def _lingering(kinds: list[SinkTransactions]) -> list[LingeringTransaction]:
    try:
        return [t for kind in kinds for t in kind.lingering()]
    finally:
        _close(kinds)


def _close(kinds: list[SinkTransactions]) -> None:
    for kind in kinds:
        kind.close()


def _resolve(
    source: str,
    ids: tuple[str, ...],
    url: str | None,
    user: str | None,
    bootstrap: str | None,
    commit: bool,
) -> None:
    job = _job(source, url)
    kinds = _kinds(job, url, user, bootstrap)
    try:
        found: dict[str, tuple[SinkTransactions, LingeringTransaction]] = {}
        for kind in kinds:
            found.update((t.id, (kind, t)) for t in kind.lingering())
        for id_ in ids:
            if id_ not in found:
                raise CliError(
                    f"{id_} is not a lingering sink transaction of job {job.job_id}",
                    f"`tidegate transactions list {source}` (with the options of the job's "
                    "sinks: --postgres, --kafka) lists them",
                )
            error = refusal(found[id_][1], commit, job.job_id)
            if error is not None:
                raise error
        for id_ in ids:
            kind, t = found[id_]
            done = kind.commit(t) if commit else kind.abort(t)
            verb = "committed" if commit else "aborted"
            click.echo(f"{verb} {id_}" if done else f"{id_} was resolved meanwhile by another")
    finally:
        _close(kinds)


def _resolve_command(commit: bool, help: str) -> Any:
    @transactions_command.command("commit" if commit else "abort", help=help)
    @click.argument("source", metavar="JOB_DIR")
    @click.argument("ids", nargs=-1, required=True, metavar="ID...")
    @_with_options
    def command(
        source: str,
        ids: tuple[str, ...],
        url: str | None,
        user: str | None,
        bootstrap: str | None,
        verbose: bool,
    ) -> None:
        with reported(verbose):
            _resolve(source, ids, url, user, bootstrap, commit)

    return command


commit_transactions = _resolve_command(
    True, "Commit sink transactions that a completed checkpoint of the job covers."
)
abort_transactions = _resolve_command(
    False, "Abort sink transactions that no completed checkpoint of the job covers."
)
