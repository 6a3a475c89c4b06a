"""The `tidegate` command: run a job script with live status, and inspect checkpoints.

    tidegate run JOB.py [--parallelism N] [--runner spark|local] [--spark-master URL]
                        [--from-checkpoint PATH] [-- job args...]
    tidegate checkpoints DIR [--id N] [--json]

Errors are reported as one line plus a hint, never as an internal traceback (`--verbose`
shows the tracebacks). Exit codes: 0 success, 1 the job or the script failed, 2 a usage or path
error (a missing script, a wrong checkpoint path, no Spark), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import re
import runpy
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO, TypeVar

import click
from fsspec.core import url_to_fs

from tidegate.checkpoint.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
)
from tidegate.checkpoint.metadata import METADATA_FILE_NAME, decode_metadata
from tidegate.checkpoint.storage import CheckpointStorage, resolve_checkpoint_path
from tidegate.common.job_client import JobClient, JobExecutionException
from tidegate.datastream.stream_execution_environment import StreamExecutionEnvironment
from tidegate.deploy.spark_session import SparkUnavailableError

T = TypeVar("T")
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: failures the JobMaster reports as "<type>: <message>" that are the environment's, not the job's
_ENVIRONMENT_ERRORS = {
    "SparkUnavailableError": "use --runner local to run without Spark, or install Java 17+",
    "CheckpointNotFoundError": "`tidegate checkpoints DIR` lists the completed checkpoints",
    "CorruptCheckpointError": "`tidegate checkpoints DIR` lists the completed checkpoints",
    "IncompatibleCheckpointError": "operators are matched by uid: keep the uids they had",
    "CheckpointStorageError": "check the checkpoint directory setting and its permissions",
}
_CHK_DIR = re.compile(r"chk-\d+")
#: a frame of a formatted traceback: its file, line, function and source line
_TRACEBACK_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\n(?P<src>[^\n]*)'
)


# errors ---------------------------------------------------------------------------------------
class CliError(click.ClickException):
    """One line of error, an optional hint, and (shown before them) optional detail."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        exit_code: int = EXIT_USAGE,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.exit_code = exit_code
        self.detail = detail

    def show(self, file: Any = None) -> None:
        if self.detail:
            click.echo(self.detail.rstrip("\n"), err=True)
        click.echo(f"Error: {self.message}", err=True)
        if self.hint:
            click.echo(f"Hint: {self.hint}", err=True)


def _full_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _environment_error(exc: BaseException, verbose: bool) -> CliError | None:
    """A CliError for checkpoint and Spark problems, or None if `exc` is something else."""
    if not isinstance(exc, SparkUnavailableError | CheckpointError):
        return None
    hint = _ENVIRONMENT_ERRORS.get(type(exc).__name__, "check the checkpoint path")
    detail = _full_traceback(exc) if verbose else None
    return CliError(_one_line(str(exc)), hint, EXIT_USAGE, detail)


def _path_error(exc: BaseException, verbose: bool) -> CliError | None:
    """Like `_environment_error`, plus filesystem errors (permissions, unknown protocols)."""
    error = _environment_error(exc, verbose)
    if error is None and isinstance(exc, OSError | ValueError):
        message = f"{type(exc).__name__}: {_one_line(str(exc))}"
        error = CliError(message, "check the path", EXIT_USAGE)
        error.detail = _full_traceback(exc) if verbose else None
    return error


@contextlib.contextmanager
def _reported(verbose: bool) -> Iterator[None]:
    """Turn checkpoint, path and unexpected errors into CliErrors."""
    try:
        yield
    except click.ClickException:
        raise
    except Exception as exc:
        error = _path_error(exc, verbose)
        if error is not None:
            raise error from exc
        raise CliError(
            f"internal error: {type(exc).__name__}: {_one_line(str(exc))}",
            "this is a bug in tidegate; rerun with --verbose and report the traceback",
            EXIT_JOB_FAILED,
            _full_traceback(exc) if verbose else None,
        ) from exc


# formatting -----------------------------------------------------------------------------------
def human_size(num_bytes: float) -> str:
    """`1536` -> `1.5 KiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num_bytes < 1024:
            return f"{int(num_bytes)} B" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} TiB"


def local_iso(ms: int | None) -> str:
    """Epoch milliseconds as local ISO-8601 time with offset, or `-`."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    """Columns separated by two spaces; numbers are right-aligned."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(widths))
    ]
    lines = []
    for row in cells:
        padded = [
            c.rjust(w) if numeric[i] else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(indent + "  ".join(padded).rstrip())
    return "\n".join(lines)


def format_status(jm: Any, elapsed_s: float, now_ms: int) -> str:
    """The live status line of a running job (JobMaster `jm`)."""
    stats = jm.stats
    parts = [
        f"{jm.status.name} {_duration(elapsed_s)}",
        f"{stats.records_per_s:,.0f} rec/s",
        f"read {stats.records_read:,}",
        f"in {stats.records_in:,}",
        f"restarts {stats.restarts}",
        f"checkpoints {stats.completed_checkpoints} done, {stats.failed_checkpoints} failed",
    ]
    cp = stats.last_checkpoint
    if cp is not None:
        age = max(now_ms - cp.completed_ms, 0) / 1000
        parts.append(
            f"last #{cp.checkpoint_id} {cp.duration_ms} ms {human_size(cp.size_bytes)} "
            f"{age:.0f}s ago"
        )
    return " | ".join(parts)


def format_summary(jm: Any, elapsed_s: float) -> str:
    """The line printed when a job has ended."""
    stats = jm.stats
    line = (
        f"{jm.status.name}: job {jm.spec.job_name!r} ({jm.job_id}) after {_duration(elapsed_s)}"
        f" | read {stats.records_read:,} | in {stats.records_in:,} | restarts {stats.restarts}"
        f" | checkpoints {stats.completed_checkpoints} done, {stats.failed_checkpoints} failed"
    )
    cp = stats.last_checkpoint
    if cp is not None:
        line += f" | last #{cp.checkpoint_id} ({cp.duration_ms} ms, {human_size(cp.size_bytes)})"
    return line


def _duration(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"{int(minutes)}:{secs:04.1f}" if minutes else f"{secs:.1f}s"


# live status ----------------------------------------------------------------------------------
class StatusPrinter:
    """Writes status lines to `stream`: rewritten in place (`\\r`) on a terminal, else one per
    line. Thread-safe; `line` prints a permanent line (clearing a pending status line first)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._dirty = False

    def status(self, text: str) -> None:
        with self._lock:
            if self.tty:
                width = shutil.get_terminal_size().columns - 1
                self.stream.write(f"\r{text[:width]}\x1b[K")
                self._dirty = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def line(self, text: str) -> None:
        with self._lock:
            if self._dirty:
                self.stream.write("\r\x1b[K")
                self._dirty = False
            self.stream.write(text + "\n")
            self.stream.flush()


@dataclass
class _Watched:
    client: JobClient
    started: float
    ended: float | None = None
    thread: threading.Thread | None = None

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class JobMonitor:
    """The `on_submit` hook: one daemon thread per submitted job prints its status every
    `interval` seconds (0: never) until the job ends; `summarize` prints the final lines."""

    def __init__(self, printer: StatusPrinter, interval: float) -> None:
        self.printer = printer
        self.interval = interval
        self.jobs: list[_Watched] = []

    def __call__(self, client: JobClient) -> None:
        watched = _Watched(client, time.monotonic())
        self.jobs.append(watched)
        spec = client.jobmaster.spec
        self.printer.line(
            f"submitted job {spec.job_name!r} ({client.get_job_id()}): runner {spec.runner}, "
            f"parallelism {max(v.parallelism for v in spec.graph.vertices.values())}"
        )
        watched.thread = threading.Thread(
            target=self._watch, args=(watched,), name="tidegate-cli-status", daemon=True
        )
        watched.thread.start()

    def _watch(self, watched: _Watched) -> None:
        jm = watched.client.jobmaster
        while not jm.done.wait(self.interval or None):
            self.printer.status(format_status(jm, watched.elapsed(), int(time.time() * 1000)))
        watched.ended = time.monotonic()

    def running(self) -> list[JobClient]:
        return [w.client for w in self.jobs if not w.client.jobmaster.done.is_set()]

    def cancel_all(self, timeout_s: float = 15.0) -> None:
        clients = self.running()
        for client in clients:
            self.printer.line(f"cancelling job {client.get_job_id()} ...")
            client.cancel()
        deadline = time.monotonic() + timeout_s
        for client in clients:
            client.jobmaster.done.wait(max(deadline - time.monotonic(), 0))

    def summarize(self) -> None:
        for watched in self.jobs:
            jm = watched.client.jobmaster
            if jm.done.is_set():
                if watched.thread is not None:
                    watched.thread.join(1.0)  # its last status line comes before the summary
                watched.ended = watched.ended or time.monotonic()
                self.printer.line(format_summary(jm, watched.elapsed()))

    def failure_of(self, job_id: str) -> str | None:
        """The JobMaster's error (`<type>: <message>` for crashes) of a submitted job."""
        for watched in self.jobs:
            jm = watched.client.jobmaster
            if jm.job_id == job_id and jm.error is not None:
                return str(jm.error)
        return None


class _LogHandler(logging.Handler):
    """Shows tidegate's log records as `tidegate: <level>: ...` lines, unless the job script
    configured logging itself (then its handlers print them). Crashes caused by the
    environment are left to the final error line, unless verbose."""

    def __init__(self, printer: StatusPrinter, verbose: bool) -> None:
        super().__init__()
        self.printer = printer
        self.verbose = verbose

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        text = f"tidegate: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if type(exc).__name__ in _ENVIRONMENT_ERRORS and not self.verbose:
                return
            text += ": " + (
                "\n" + _full_traceback(exc) if self.verbose else f"{type(exc).__name__}: {exc}"
            )
        self.printer.line(text.rstrip("\n"))


@contextlib.contextmanager
def _cli_logging(printer: StatusPrinter, verbose: bool) -> Iterator[None]:
    logger = logging.getLogger("tidegate")
    handler = _LogHandler(printer, verbose)
    old_level = logger.level
    logger.addHandler(handler)
    if verbose:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


# run ------------------------------------------------------------------------------------------
def _check_script(path: str) -> str:
    if not os.path.exists(path):
        raise CliError(f"job script {path} does not exist", "check the path of JOB.py")
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "__main__.py")):
        raise CliError(f"{path} is a directory, not a job script", "pass the job's .py file")
    return os.path.abspath(path)


def _check_restore_path(path: str, verbose: bool) -> tuple[str, dict[str, Any]]:
    """The checkpoint directory `path` names, and its validated metadata."""
    with _reported(verbose):
        directory = resolve_checkpoint_path(path)
        return directory, _read_metadata(directory)


def _read_metadata(directory: str) -> dict[str, Any]:
    path = f"{directory.rstrip('/')}/{METADATA_FILE_NAME}"
    fs, fs_path = url_to_fs(path)
    try:
        data = fs.cat_file(fs_path)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"{directory} holds no {METADATA_FILE_NAME}") from exc
    return decode_metadata(data, path)


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


def _user_frame(exc: BaseException, script: str, shown: str) -> str | None:
    """`at JOB.py:LINE in FUNCTION: SOURCE` for the last traceback frame inside the script."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == script]
    if not mine:
        return None
    f = mine[-1]
    return f"at {shown}:{f.lineno} in {f.name}" + (f": {f.line}" if f.line else "")


def _user_frame_in(detail: str, script: str, shown: str) -> str | None:
    """Like `_user_frame`, for a traceback a slot reported as text."""
    mine = [m for m in _TRACEBACK_FRAME.finditer(detail) if m["file"] == script]
    if not mine:
        return None
    m = mine[-1]
    return f"at {shown}:{m['line']} in {m['name']}: {m['src'].strip()}"


def _script_error(exc: BaseException, script: str, shown: str, verbose: bool) -> CliError:
    """The CliError for an exception the job script raised."""
    detail = _full_traceback(exc) if verbose else None
    hint = None if verbose else "rerun with --verbose for the full traceback"
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == script:
        return CliError(f"{shown}:{exc.lineno}: SyntaxError: {exc.msg}", None, EXIT_JOB_FAILED)
    message = f"{shown} raised {type(exc).__name__}: {_one_line(str(exc))}"
    frame = _user_frame(exc, script, shown)
    if frame is not None:
        message += f"\n  {frame}"
    return CliError(message, hint, EXIT_JOB_FAILED, detail)


def _job_failure(
    exc: JobExecutionException, monitor: JobMonitor, script: str, shown: str, verbose: bool
) -> CliError:
    """The CliError for a failed or cancelled job; environment problems exit with 2."""
    failure = monitor.failure_of(exc.job_id) or ""
    kind, _, message = failure.partition(": ")
    if kind in _ENVIRONMENT_ERRORS:
        detail = exc.detail if verbose else None
        return CliError(_one_line(message), _ENVIRONMENT_ERRORS[kind], EXIT_USAGE, detail)
    message = _one_line(str(exc))
    frame = _user_frame_in(exc.detail or "", script, shown)
    if frame is not None:
        message += f"\n  {frame}"
    if verbose:
        parts = [_full_traceback(exc)]
        if exc.detail:
            parts.append(f"The failing slot's traceback:\n{exc.detail}")
        return CliError(message, None, EXIT_JOB_FAILED, "\n".join(parts))
    hint = "rerun with --verbose to see the failing slot's traceback" if exc.detail else None
    return CliError(message, hint, EXIT_JOB_FAILED)


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
        error = _environment_error(exc, verbose)
        raise (error or _script_error(exc, script, shown, verbose)) from None
    monitor.summarize()
    if not monitor.jobs:
        monitor.printer.line(f"tidegate: note: {shown} submitted no job (no env.execute() call)")


# commands -------------------------------------------------------------------------------------
_verbose_option = click.option(
    "-v", "--verbose", is_flag=True, help="Show full tracebacks and more log messages."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """tidegate: stateful stream processing with Flink's checkpoints, on Spark."""


@cli.command()
@click.argument("job", metavar="JOB.py")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- JOB_ARGS...]")
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism.")
@click.option("--runner", type=click.Choice(["spark", "local"]), help="Where slots run.")
@click.option(
    "--spark-master", metavar="URL", help="spark.master, e.g. local[8] or spark://h:7077."
)
@click.option(
    "-s",
    "--from-checkpoint",
    metavar="PATH",
    help="Restore from a chk-<n> dir, its _metadata file, or a job dir (its latest checkpoint).",
)
@click.option(
    "--status-interval",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="How often to print the status line (0: only the summary).",
)
@_verbose_option
def run(
    job: str,
    job_args: tuple[str, ...],
    parallelism: int | None,
    runner: str | None,
    spark_master: str | None,
    from_checkpoint: str | None,
    status_interval: float,
    verbose: bool,
) -> None:
    """Run a job script, with live status on stderr.

    Runs JOB.py as `python JOB.py` would; its env.execute() calls submit the jobs, with the
    options given here overriding the script's settings. Arguments after `--` are passed to
    the script as sys.argv[1:].
    """
    script = _check_script(job)
    printer = StatusPrinter(sys.stderr)
    overrides: dict[str, Any] = {
        "parallelism": parallelism,
        "runner": runner,
        "spark_master": spark_master,
    }
    if from_checkpoint is not None:
        directory, metadata = _check_restore_path(from_checkpoint, verbose)
        overrides["restore_path"] = directory
        printer.line(f"restoring from checkpoint {metadata['checkpoint_id']} in {directory}")
    monitor = JobMonitor(printer, status_interval)
    overrides = {k: v for k, v in overrides.items() if v is not None} | {"on_submit": monitor}
    with _job_environment(script, [script, *job_args], overrides), _cli_logging(printer, verbose):
        _execute(script, job, monitor, verbose)


@cli.command()
@click.argument("directory", metavar="DIR")
@click.option("--id", "checkpoint_id", type=int, help="Show this checkpoint's metadata.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_verbose_option
def checkpoints(directory: str, checkpoint_id: int | None, as_json: bool, verbose: bool) -> None:
    """List completed checkpoints, or show one.

    DIR is a checkpoint directory holding job directories, or one job directory. To show one
    checkpoint's metadata, pass --id N, or a chk-<n> directory (or its _metadata file) as DIR.
    """
    with _reported(verbose):
        if _names_one_checkpoint(directory):
            if checkpoint_id is not None:
                raise CliError(f"{directory} is one checkpoint; --id needs a job directory")
            _show_checkpoint(
                _described(checkpoint_detail, resolve_checkpoint_path(directory)), as_json
            )
            return
        found = _find_checkpoints(directory)
        if checkpoint_id is None:
            _list_checkpoints(directory, found, as_json)
        else:
            _show_checkpoint(
                _described(checkpoint_detail, _pick(directory, found, checkpoint_id)), as_json
            )


# checkpoints: discovery -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Found:
    job_id: str
    checkpoint_id: int
    path: str


def _names_one_checkpoint(path: str) -> bool:
    """A `_metadata` file, a chk-<n> directory, or any directory holding `_metadata`."""
    fs, fs_path = url_to_fs(path)
    name = posixpath.basename(fs_path.rstrip("/"))
    if name == METADATA_FILE_NAME or _CHK_DIR.fullmatch(name):
        return True
    return fs.isfile(posixpath.join(fs_path, METADATA_FILE_NAME))


def _find_checkpoints(path: str) -> list[_Found]:
    """Completed checkpoints of the job directory `path`, or of every job directory in it."""
    fs, fs_path = url_to_fs(path)
    if not fs.isdir(fs_path):
        what = "is not a directory" if fs.exists(fs_path) else "does not exist"
        raise CheckpointNotFoundError(f"{path} {what}")
    uri = path.rstrip("/") if "://" in path else fs_path.rstrip("/") or "/"
    subdirs = [
        posixpath.basename(e["name"].rstrip("/"))
        for e in fs.ls(fs_path, detail=True)
        if e["type"] == "directory"
    ]
    if any(_CHK_DIR.fullmatch(name) for name in subdirs):
        parent, job_id = uri.rsplit("/", 1)
        jobs = [(parent or "/", job_id)]
    else:
        jobs = [(uri, name) for name in sorted(subdirs)]
    return [
        _Found(job_id, cid, chk)
        for base, job_id in jobs
        for cid, chk in CheckpointStorage(base, job_id).list_checkpoints()
    ]


def _pick(directory: str, found: list[_Found], checkpoint_id: int) -> str:
    matches = [f for f in found if f.checkpoint_id == checkpoint_id]
    if len(matches) == 1:
        return matches[0].path
    if not matches:
        ids = ", ".join(str(f.checkpoint_id) for f in found[-10:]) or "none"
        raise CliError(
            f"no completed checkpoint {checkpoint_id} under {directory} (completed: {ids})",
            f"list them with `tidegate checkpoints {directory}`",
        )
    jobs = ", ".join(posixpath.dirname(f.path) for f in matches)
    raise CliError(
        f"checkpoint {checkpoint_id} exists in {len(matches)} jobs under {directory}",
        f"pass one job directory: {jobs}",
    )


# checkpoints: output --------------------------------------------------------------------------
def _described(describe: Callable[[str, dict[str, Any]], T], path: str) -> T:
    """`describe(path, metadata)` of the checkpoint in `path`; content it cannot make sense of
    (a valid envelope around unexpected operators) is a CorruptCheckpointError."""
    metadata = _read_metadata(path)
    try:
        return describe(path, metadata)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"{path}/{METADATA_FILE_NAME} has unexpected content ({type(exc).__name__}: {exc}); "
            "it is damaged or was written by another tidegate version"
        ) from exc


def _summary_record(path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    completed = metadata.get("completed_ms", metadata["timestamp_ms"])
    return {
        "job_id": metadata["job_id"],
        "job_name": metadata.get("job_name"),
        "checkpoint_id": metadata["checkpoint_id"],
        "path": path,
        "completed_ms": completed,
        "completed": local_iso(completed),
        "size_bytes": metadata.get("size_bytes", _operators_size(metadata)),
        "duration_ms": metadata.get("duration_ms"),
        "operators": len(metadata["operators"]),
        "is_savepoint": bool(metadata.get("is_savepoint", False)),
    }


def _operators_size(metadata: dict[str, Any]) -> int:
    return sum(
        int(h.get("index", {}).get("size", 0))
        for op in metadata["operators"].values()
        for h in op.get("subtasks", {}).values()
    )


def _list_checkpoints(directory: str, found: list[_Found], as_json: bool) -> None:
    records = []
    for f in found:
        try:
            records.append(_described(_summary_record, f.path))
        except CheckpointError as exc:
            click.echo(f"warning: skipped {f.path}: {_one_line(str(exc))}", err=True)
            records.append(
                {
                    "job_id": f.job_id,
                    "checkpoint_id": f.checkpoint_id,
                    "path": f.path,
                    "error": _one_line(str(exc)),
                }
            )
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    if not found:
        click.echo(
            f"no completed checkpoints under {directory}. (A job that FINISHED deletes its "
            "checkpoints; externalized checkpoint retention keeps them after failure or cancel.)",
            err=True,
        )
        return
    headers = ["JOB ID", "CHECKPOINT", "COMPLETED", "SIZE", "DURATION MS", "OPERATORS", "JOB NAME"]
    rows = [
        [
            r["job_id"],
            r["checkpoint_id"],
            r["completed"],
            human_size(r["size_bytes"]),
            r["duration_ms"] if r["duration_ms"] is not None else "-",
            r["operators"],
            r["job_name"] or "-",
        ]
        for r in records
        if "error" not in r
    ]
    click.echo(format_table(headers, rows))


def checkpoint_detail(path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The JSON-ready description of one checkpoint (key groups as inclusive [first, last])."""
    operators = []
    for uid, op in sorted(metadata["operators"].items()):
        subtasks = []
        for index, handle in sorted(op.get("subtasks", {}).items(), key=lambda kv: int(kv[0])):
            info = handle.get("index", {})
            kg = handle.get("key_group_range")
            subtasks.append(
                {
                    "subtask": int(index),
                    "file": handle.get("file"),
                    "size_bytes": info.get("size"),
                    "key_groups": [kg[0], kg[1] - 1] if kg else None,
                    "non_empty_key_groups": len(info.get("key_groups") or []),
                    "state_kinds": info.get("state_kinds") or {},
                    "operator_state": bool(info.get("operator")),
                }
            )
        operators.append(
            {
                "uid": uid,
                "name": op.get("name", uid),
                "parallelism": op.get("parallelism"),
                "subtasks": subtasks,
            }
        )
    keys = (
        "job_id",
        "job_name",
        "checkpoint_id",
        "is_savepoint",
        "timestamp_ms",
        "completed_ms",
        "duration_ms",
        "size_bytes",
        "max_parallelism",
        "attempt",
    )
    return {"path": path, **{k: metadata.get(k) for k in keys}, "operators": operators}


def _show_checkpoint(detail: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    kind = "savepoint" if detail["is_savepoint"] else "checkpoint"
    name = f" ({detail['job_name']!r})" if detail["job_name"] else ""
    size = human_size(detail["size_bytes"]) if detail["size_bytes"] is not None else "-"
    duration = detail["duration_ms"] if detail["duration_ms"] is not None else "-"
    click.echo(f"{kind} {detail['checkpoint_id']} of job {detail['job_id']}{name}")
    click.echo(f"  path        {detail['path']}")
    click.echo(f"  triggered   {local_iso(detail['timestamp_ms'])}")
    click.echo(f"  completed   {local_iso(detail['completed_ms'])} (duration {duration} ms)")
    click.echo(
        f"  size        {size}, max parallelism {detail['max_parallelism']}, "
        f"attempt {detail['attempt']}"
    )
    for op in detail["operators"]:
        click.echo(f"\noperator {op['uid']}: {op['name']!r}, parallelism {op['parallelism']}")
        rows = [_subtask_row(s) for s in op["subtasks"]]
        headers = ["SUBTASK", "FILE", "SIZE", "KEY GROUPS", "STATE"]
        click.echo(format_table(headers, rows, indent="  "))


def _subtask_row(s: dict[str, Any]) -> list[Any]:
    kg = s["key_groups"]
    kinds = [f"{name}: {kind}" for name, kind in sorted(s["state_kinds"].items())]
    if s["operator_state"]:
        kinds.append("operator state")
    size = human_size(s["size_bytes"]) if s["size_bytes"] is not None else "-"
    return [
        s["subtask"],
        s["file"] or "-",
        size,
        f"[{kg[0]}, {kg[1]}]" if kg else "-",
        ", ".join(kinds) or "-",
    ]


def main() -> None:
    """Entry point of the `tidegate` command and of `python -m tidegate`."""
    cli(max_content_width=100)
