"""`tidegate run JOB.py ...`: run a job script with the CLI's overrides, and map what went
wrong (the script, its jobs, or the environment) to one error line and an exit code."""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import runpy
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import click

from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.storage import checkpoint_candidates, resolve_checkpoint_path
from tidegate.cli.checkpoints import read_metadata
from tidegate.cli.errors import (
    ENVIRONMENT_ERRORS,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_USAGE,
    CliError,
    environment_error,
    full_traceback,
    one_line,
    reported,
    verbose_detail,
    verbose_option,
)
from tidegate.cli.status import JobMonitor, StatusPrinter, cli_logging
from tidegate.common.configuration import Configuration
from tidegate.common.filesystems import FileSystems
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream.stream_execution_environment import StreamExecutionEnvironment
from tidegate.deploy.chaos import ChaosRun, ChaosSettings

#: a frame line of a formatted traceback (its source line, if any, follows on the next line)
_TRACEBACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)')


@click.command("run")
@click.argument("job", metavar="JOB.py")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- JOB_ARGS...]")
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism.")
@click.option("--runner", type=click.Choice(["spark", "local"]), help="Where slots run.")
@click.option(
    "--spark-master", metavar="URL", help="spark.master, e.g. local[8] or spark://h:7077."
)
@click.option(
    "-s",
    "--from-savepoint",
    "--from-checkpoint",
    "restore_from",
    metavar="PATH",
    help="Restore from a savepoint or chk-<n> dir, its _metadata file, or a job dir (its latest "
    "checkpoint).",
)
@click.option(
    "-n",
    "--allow-non-restored-state",
    is_flag=True,
    default=None,
    help="Drop the restored state of operators (uids) the job no longer has instead of failing.",
)
@click.option(
    "--claim-mode",
    type=click.Choice(["no_claim", "claim"], case_sensitive=False),
    help="no_claim (default): never modify or delete the restored snapshot; claim: the job owns "
    "it (deleted once its own checkpoints subsume it).",
)
@click.option(
    "--restore-fallback",
    is_flag=True,
    default=None,
    help="If the checkpoint to restore is damaged, fall back to an older retained one (also on "
    "restarts after a failure) instead of failing.",
)
@click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A configuration entry (repeatable), overriding the script's: tidegate and Flink keys "
    "(execution.checkpointing.dir=s3://b/chk), and spark.* keys for the Spark session tidegate "
    "starts (spark.driver.host=10.0.0.5).",
)
@click.option(
    "--status-interval",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="How often to print the status line (0: only the summary).",
)
@click.option("--chaos", "chaos", metavar="SETTINGS", hidden=True, help="(tidegate chaos)")
@verbose_option
def run_command(
    job: str,
    job_args: tuple[str, ...],
    parallelism: int | None,
    runner: str | None,
    spark_master: str | None,
    restore_from: str | None,
    allow_non_restored_state: bool | None,
    claim_mode: str | None,
    restore_fallback: bool | None,
    conf: tuple[str, ...],
    status_interval: float,
    chaos: str | None,
    verbose: bool,
) -> None:
    """Run a job script, with live status on stderr.

    Runs JOB.py as `python JOB.py` would; its env.execute() calls submit the jobs, with the
    options given here overriding the script's settings. Arguments after `--` are passed to
    the script as sys.argv[1:].
    """
    script = _check_script(job)
    configuration = _parse_conf(conf)
    printer = StatusPrinter(sys.stderr)
    overrides: dict[str, Any] = {
        "parallelism": parallelism,
        "runner": runner,
        "spark_master": spark_master,
        "allow_non_restored_state": allow_non_restored_state,
        "restore_mode": claim_mode and claim_mode.upper(),
        "restore_fallback": restore_fallback,
        "configuration": configuration or None,
    }
    # the snapshot to restore is read with the filesystem options given here
    filesystems = FileSystems.from_configuration(Configuration().add_all(configuration))
    if restore_from is not None and restore_fallback:
        # the job picks the newest intact checkpoint: check only that the path holds some
        with reported(verbose):
            newest = checkpoint_candidates(restore_from, filesystems)[0]
        overrides["restore_path"] = restore_from
        printer.line(f"restoring from {newest}, or an older checkpoint if it is damaged")
    elif restore_from is not None:
        directory, metadata = _check_restore_path(restore_from, filesystems, verbose)
        overrides["restore_path"] = directory
        kind = "savepoint" if metadata.is_savepoint else "checkpoint"
        printer.line(f"restoring from {kind} {metadata.checkpoint_id} in {directory}")
    monitor = JobMonitor(printer, status_interval)
    overrides = {k: v for k, v in overrides.items() if v is not None} | {"on_submit": monitor}
    recording: contextlib.AbstractContextManager = contextlib.nullcontext()
    if chaos is not None:  # a run of `tidegate chaos` (deploy/chaos.py)
        chaos_run = ChaosRun(ChaosSettings.load(chaos))
        overrides |= {"chaos": chaos_run, "on_submit": chaos_run.watched_by(monitor)}
        recording = chaos_run.recording()
    with (
        _job_environment(script, [script, *job_args], overrides),
        cli_logging(printer, verbose),
        recording,
    ):
        _execute(script, job, monitor, verbose)


# setup ----------------------------------------------------------------------------------------
def _parse_conf(entries: tuple[str, ...]) -> dict[str, str]:
    """`--conf KEY=VALUE` entries as a dict; a usage error for one without `=`."""
    parsed = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{entry!r} is not KEY=VALUE", param_hint="--conf")
        parsed[key.strip()] = value
    return parsed


def _check_script(path: str) -> str:
    if not os.path.exists(path):
        raise CliError(f"job script {path} does not exist", "check the path of JOB.py")
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "__main__.py")):
        raise CliError(f"{path} is a directory, not a job script", "pass the job's .py file")
    return os.path.abspath(path)


def _check_restore_path(
    path: str, filesystems: FileSystems, verbose: bool
) -> tuple[str, CheckpointMetadata]:
    """The checkpoint directory `path` names, and its validated metadata."""
    with reported(verbose):
        directory = resolve_checkpoint_path(path, filesystems)
        return directory, read_metadata(directory, filesystems)


@contextlib.contextmanager
def _job_environment(script: str, argv: list[str], overrides: dict[str, Any]) -> Iterator[None]:
    """sys.argv (argv[0]: the script's absolute path, as runpy sets it), sys.path[0] and the
    environment's CLI overrides for the script; restored afterwards."""
    saved = sys.argv, list(sys.path), StreamExecutionEnvironment.cli_overrides
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(script))
    StreamExecutionEnvironment.cli_overrides = overrides
    try:
        yield
    finally:
        sys.argv, sys.path[:], StreamExecutionEnvironment.cli_overrides = saved


# execution ------------------------------------------------------------------------------------
def _run_script(script: str, monitor: JobMonitor) -> None:
    """Run the script, then wait for jobs it submitted but did not wait for."""
    runpy.run_path(script, run_name="__main__")
    for client in monitor.running():
        client.get_job_execution_result().result()


def _execute(script: str, shown: str, monitor: JobMonitor, verbose: bool) -> None:
    try:
        _run_script(script, monitor)
    except KeyboardInterrupt:
        monitor.cancel_all()
        monitor.summarize()
        raise CliError("interrupted: the job was cancelled", None, EXIT_INTERRUPTED) from None
    except SystemExit:
        monitor.summarize()
        raise
    except JobExecutionException as exc:
        monitor.summarize()
        raise _job_failure(exc, monitor, script, shown, verbose) from None
    except Exception as exc:
        monitor.summarize()
        error = environment_error(exc, verbose)
        raise (error or _script_error(exc, script, shown, verbose)) from None
    monitor.summarize()
    if not monitor.jobs:
        monitor.printer.line(f"tidegate: note: {shown} submitted no job (no env.execute() call)")


# error mapping --------------------------------------------------------------------------------
def _script_error(exc: BaseException, script: str, shown: str, verbose: bool) -> CliError:
    """The CliError for an exception the job script raised."""
    hint = None if verbose else "rerun with --verbose for the full traceback"
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == script:
        return CliError(f"{shown}:{exc.lineno}: SyntaxError: {exc.msg}", None, EXIT_JOB_FAILED)
    message = f"{shown} raised {type(exc).__name__}: {one_line(str(exc))}"
    message = _with_frame(message, _user_frame(exc, script, shown))
    return CliError(message, hint, EXIT_JOB_FAILED, verbose_detail(exc, verbose))


def _job_failure(
    exc: JobExecutionException, monitor: JobMonitor, script: str, shown: str, verbose: bool
) -> CliError:
    """The CliError for a failed or cancelled job; environment problems exit with 2."""
    failure = monitor.failure_of(exc.job_id) or ""
    kind, _, message = failure.partition(": ")
    if kind in ENVIRONMENT_ERRORS:
        detail = exc.detail if verbose else None
        return CliError(one_line(message), ENVIRONMENT_ERRORS[kind], EXIT_USAGE, detail)
    message = _with_frame(one_line(str(exc)), _user_frame_in(exc.detail or "", script, shown))
    if verbose:
        parts = [full_traceback(exc)]
        if exc.detail:
            parts.append(f"The failing slot's traceback:\n{exc.detail}")
        return CliError(message, None, EXIT_JOB_FAILED, "\n".join(parts))
    hint = "rerun with --verbose to see the failing slot's traceback" if exc.detail else None
    return CliError(message, hint, EXIT_JOB_FAILED)


def _user_frame(exc: BaseException, script: str, shown: str) -> str | None:
    """`at JOB.py:LINE in FUNCTION: SOURCE` for the last traceback frame inside the script."""
    mine = [
        f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == script
    ]
    if not mine:
        return None
    f = mine[-1]
    return _frame_text(shown, f.lineno, f.name, f.line or None)


def _user_frame_in(detail: str, script: str, shown: str) -> str | None:
    """Like `_user_frame`, for a traceback a slot reported as text. The source line is read
    from the script here: a worker on another host may have no copy of it to quote."""
    mine = [m for m in _TRACEBACK_FRAME.finditer(detail) if m["file"] == script]
    if not mine:
        return None
    m = mine[-1]
    source = linecache.getline(script, int(m["line"])).strip()
    return _frame_text(shown, m["line"], m["name"], source or None)


def _frame_text(shown: str, line: object, name: str, source: str | None) -> str:
    """`at JOB.py:LINE in FUNCTION`, then `: SOURCE` unless there is no source (None)."""
    return f"at {shown}:{line} in {name}" + (f": {source}" if source is not None else "")


def _with_frame(message: str, frame: str | None) -> str:
    """`message`, with the script's frame (if any) on an indented second line."""
    return message if frame is None else f"{message}\n  {frame}"
