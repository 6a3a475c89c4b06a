"""How the commands report errors: one `Error:` line, an optional `Hint:` line, and (with
`--verbose`) the full traceback before them; plus the exit codes."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import click

from tidegate.checkpoint.errors import CheckpointError
from tidegate.deploy.spark_session import SparkUnavailableError

EXIT_JOB_FAILED = 1
#: `tidegate checkpoints --verify` found a damaged checkpoint
EXIT_DAMAGED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: failures the JobMaster reports as "<type>: <message>" that are the environment's, not the job's
ENVIRONMENT_ERRORS = {
    "SparkUnavailableError": "use --runner local to run without Spark, or install Java 17+",
    "CheckpointNotFoundError": "`tidegate checkpoints DIR` lists the completed checkpoints",
    "CorruptCheckpointError": "`tidegate checkpoints DIR` lists the completed checkpoints",
    "UnsupportedFormatVersionError": "restore with the tidegate version that wrote it",
    "ChecksumMismatchError": "`tidegate checkpoints DIR --verify` checks every checkpoint",
    "MissingCheckpointFileError": "`tidegate checkpoints DIR --verify` checks every checkpoint",
    "FencedWriterError": "run one driver per job id",
    "IncompatibleCheckpointError": "operators are matched by uid: keep the uids they had",
    "CheckpointStorageError": "check the checkpoint directory setting and its permissions",
}

verbose_option = click.option(
    "-v", "--verbose", is_flag=True, help="Show full tracebacks and more log messages."
)


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


def full_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def verbose_detail(exc: BaseException, verbose: bool) -> str | None:
    """The `detail` of a CliError for `exc`: its full traceback if verbose, else none."""
    return full_traceback(exc) if verbose else None


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def environment_error(exc: BaseException, verbose: bool) -> CliError | None:
    """A CliError for checkpoint and Spark problems, or None if `exc` is something else."""
    if not isinstance(exc, SparkUnavailableError | CheckpointError):
        return None
    hint = ENVIRONMENT_ERRORS.get(type(exc).__name__, "check the checkpoint path")
    return CliError(one_line(str(exc)), hint, EXIT_USAGE, verbose_detail(exc, verbose))


def _path_error(exc: BaseException, verbose: bool) -> CliError | None:
    """Like `environment_error`, plus filesystem errors (permissions, unknown protocols)."""
    error = environment_error(exc, verbose)
    if error is None and isinstance(exc, OSError | ValueError):
        message = f"{type(exc).__name__}: {one_line(str(exc))}"
        error = CliError(message, "check the path", EXIT_USAGE, verbose_detail(exc, verbose))
    return error


@contextlib.contextmanager
def reported(verbose: bool) -> Iterator[None]:
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
            f"internal error: {type(exc).__name__}: {one_line(str(exc))}",
            "this is a bug in tidegate; rerun with --verbose and report the traceback",
            EXIT_JOB_FAILED,
            verbose_detail(exc, verbose),
        ) from exc
