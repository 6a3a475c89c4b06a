"""`tidegate check-restore JOB.py --from PATH [--parallelism N] [--allow-non-restored-state]
[--verify] [--json] [-- JOB_ARGS]`: would restoring the job from this snapshot succeed?

The job script runs as under `tidegate run` until its first `env.execute()` (or
`execute_async()`), which builds the job graph and then stops the script: nothing is started
(no Spark, no slots). The graph is compared with the snapshot by `deploy.restore_check`, which
also runs the operators' `open()` / `initialize_state()` to learn the states they declare.
Exit codes: 0 the restore would succeed, 1 it would be refused, 2 a usage or path error.
"""

from __future__ import annotations

import json
import runpy
from typing import Any

import click

from tidegate.checkpoint.errors import CheckpointNotFoundError, CorruptCheckpointError
from tidegate.checkpoint.storage import read_checkpoint_metadata, resolve_checkpoint_path
from tidegate.cli.errors import (
    EXIT_JOB_FAILED,
    CliError,
    environment_error,
    one_line,
    reported,
    verbose_option,
)
from tidegate.cli.formatting import format_table, human_size
from tidegate.cli.run import _check_script, _job_environment, _script_error
from tidegate.deploy.job_spec import JobSpec
from tidegate.deploy.restore_check import RestoreReport, check_restore


class _JobSpecCaptured(BaseException):
    """Raised from `env.execute()` to stop the job script once its job is built (a
    BaseException, so a script's `except Exception` does not swallow it)."""

    def __init__(self, spec: JobSpec) -> None:
        super().__init__("job graph captured")
        self.spec = spec


@click.command("check-restore")
@click.argument("job", metavar="JOB.py")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- JOB_ARGS...]")
@click.option(
    "-s",
    "--from",
    "restore_from",
    metavar="PATH",
    help="The savepoint or chk-<n> dir, its _metadata file, or a job dir (its latest "
    "checkpoint); default: the restore path the job configures.",
)
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism.")
@click.option(
    "-n",
    "--allow-non-restored-state",
    is_flag=True,
    default=None,
    help="Accept dropping the state of operators (uids) the job no longer has.",
)
@click.option("--verify", is_flag=True, help="Also read every state file and check its checksum.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@verbose_option
def check_restore_command(
    job: str,
    job_args: tuple[str, ...],
    restore_from: str | None,
    parallelism: int | None,
    allow_non_restored_state: bool | None,
    verify: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    """Check whether JOB.py can restore from a snapshot, without starting it.

    Runs JOB.py up to its first env.execute() to build the job graph (the script's code before
    that call runs, and each operator's open() and initialize_state() are called once to learn
    the states it declares), then reports per operator uid what the restore would do: restored,
    new, dropped or refused (and why), and the sink transactions it would commit. Exit code 0:
    the restore would succeed; 1: it would be refused.
    """
    script = _check_script(job)
    spec = _capture_job_spec(script, job, [script, *job_args], parallelism, verbose)
    path = restore_from or spec.restore_path
    if path is None:
        raise CliError(
            f"{job} configures no restore path and no --from PATH was given",
            "pass the savepoint or checkpoint to check with --from PATH",
        )
    allow = bool(allow_non_restored_state) or spec.allow_non_restored_state
    report = _check(spec, path, allow, verify, verbose)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=1, default=str))
    else:
        _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(EXIT_JOB_FAILED)


def _capture_job_spec(
    script: str, shown: str, argv: list[str], parallelism: int | None, verbose: bool
) -> JobSpec:
    """Run the script until it submits its first job; return that job's spec."""

    def capture(spec: JobSpec) -> None:
        raise _JobSpecCaptured(spec)

    overrides: dict[str, Any] = {"capture_job_spec": capture}
    if parallelism is not None:
        overrides["parallelism"] = parallelism
    with _job_environment(script, argv, overrides):
        try:
            runpy.run_path(script, run_name="__main__")
        except _JobSpecCaptured as captured:
            return captured.spec
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise CliError(f"{shown} exited with {exc.code} before submitting a job") from None
        except Exception as exc:
            error = environment_error(exc, verbose)
            raise (error or _script_error(exc, script, shown, verbose)) from None
    raise CliError(
        f"{shown} submitted no job (no env.execute() call)",
        "check-restore builds the job that the script's first env.execute() submits",
    )


def _check(spec: JobSpec, path: str, allow: bool, verify: bool, verbose: bool) -> RestoreReport:
    """The report; a snapshot that cannot be read at all is a refusal, a wrong path a usage
    error."""
    with reported(verbose):
        directory = resolve_checkpoint_path(path, spec.filesystems)
        try:
            metadata = read_checkpoint_metadata(directory, spec.filesystems)
        except CheckpointNotFoundError:
            raise
        except CorruptCheckpointError as exc:
            return RestoreReport(directory, None, False, None, None, problems=[one_line(exc)])
        except Exception as exc:  # e.g. an unknown format version
            if environment_error(exc, verbose) is None:
                raise
            return RestoreReport(directory, None, False, None, None, problems=[one_line(exc)])
        return check_restore(
            spec.graph,
            metadata,
            directory,
            allow_non_restored_state=allow,
            verify=verify,
            filesystems=spec.filesystems,
        )


# output -------------------------------------------------------------------------------------------
def _print_report(report: RestoreReport) -> None:
    kind = "savepoint" if report.is_savepoint else "checkpoint"
    echo = click.echo
    if report.checkpoint_id is not None:
        echo(
            f"{kind} {report.checkpoint_id} in {report.path}: max parallelism "
            f"{report.snapshot_max_parallelism}"
            + (f" (the job sets {report.max_parallelism})" if report.max_parallelism else "")
        )
    rows = [
        [
            item.uid,
            item.status.upper(),
            _parallelism(item.old_parallelism, item.new_parallelism),
            ", ".join(_state_text(s) for s in item.states) or "-",
            str(item.key_groups) if item.key_groups else "-",
            human_size(item.bytes) if item.bytes else "-",
        ]
        for item in report.operators
    ]
    if rows:
        header = ["UID", "STATUS", "PARALLELISM", "STATES", "KEY GROUPS", "SIZE"]
        echo(format_table(header, rows))
    for item in report.operators:
        for reason in item.reasons:
            echo(f"  {item.uid}: {reason}")
        for warning in item.warnings:
            echo(f"  {item.uid}: warning: {warning}")
        if item.distribution:
            parts = [
                f"{d['subtask']}: {d['key_groups']} ({human_size(d['bytes'])})"
                for d in item.distribution
            ]
            echo(f"  {item.uid}: key groups by new subtask: {'; '.join(parts)}")
        if item.pending_transactions:
            ids = sorted({t["checkpoint_id"] for t in item.pending_transactions} - {None})
            echo(
                f"  {item.uid}: {len(item.pending_transactions)} pending sink transaction(s)"
                + (f" of checkpoint(s) {', '.join(map(str, ids))}" if ids else "")
                + " will be committed on restore"
            )
    if report.ok:
        echo("restore would succeed")
        return
    for problem in report.problems:
        click.echo(f"refused: {problem}", err=True)
    echo("restore would be REFUSED")


def _parallelism(old: int | None, new: int | None) -> str:
    def text(p: int | None) -> str:
        return "-" if p is None else str(p)

    return text(new) if old == new else f"{text(old)} -> {text(new)}"


def _state_text(state: dict[str, Any]) -> str:
    mark = "" if state["in_snapshot"] else " (new)"
    if state["in_snapshot"] and state["declared"] is False:
        mark = " (not declared in open)"
    return f"{state['name']}:{state['kind']}{mark}"
