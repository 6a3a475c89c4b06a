"""The `tidegate` command: run a job script with live status, and inspect checkpoints.

    tidegate run JOB.py [--parallelism N] [--runner spark|local] [--spark-master URL]
                        [--from-savepoint PATH] [--allow-non-restored-state]
                        [--claim-mode no_claim|claim] [--restore-fallback] [-- job args...]
    tidegate checkpoints DIR [--id N] [--json] [--verify]
    tidegate checkpoints --job JOB [--id N] [--json]
    tidegate list | trigger-checkpoint JOB | savepoint JOB [DIR] | cancel JOB
    tidegate stop JOB [--savepoint DIR] [--drain]
    tidegate check-restore JOB.py --from PATH [--parallelism N] [--allow-non-restored-state]
                           [--verify] [--json] [-- job args...]
    tidegate chaos JOB.py [--faults N] [--seed S] [--kinds K,...] [--schedule every:N]
                   [--json PATH] [-- job args...]
    tidegate rewrite-savepoint SRC --max-parallelism M --output DST [--parallelism P]
    tidegate transactions list|commit|abort JOB_DIR [ID...] [--postgres URL [--user NAME]]
                          [--kafka BOOTSTRAP]
    tidegate --version

The job commands talk to the drivers' REST API (`--address URL`, default: every driver
running on this machine).

Errors are reported as one line plus a hint, never as an internal traceback (`--verbose`
shows the tracebacks). Exit codes: 0 success, 1 the job or the script failed (or `--verify`
found a damaged checkpoint, or check-restore found that the restore would be refused), 2 a
usage or path error (a missing script, a wrong checkpoint path, no Spark), 130 interrupted.

Modules: `run` (the run command), `status` (its live status output), `checkpoints` (the
checkpoints command), `chaos` and `chaos_report` (the fault-injection harness and its
comparison of outputs), `check_restore` and `rewrite` (the offline check-restore and
rewrite-savepoint commands), `transactions` (sink transactions a job left open), `jobs` (the
commands on running jobs), `errors` (error lines and exit codes), `formatting` (shared text
helpers).
"""

from __future__ import annotations

import click

from tidegate import __version__
from tidegate.cli.chaos import chaos_command
from tidegate.cli.check_restore import check_restore_command
from tidegate.cli.checkpoints import checkpoint_detail, checkpoints_command
from tidegate.cli.errors import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_USAGE, CliError
from tidegate.cli.formatting import format_table, human_size, local_iso
from tidegate.cli.jobs import (
    cancel_command,
    list_command,
    savepoint_command,
    stop_command,
    trigger_checkpoint_command,
)
from tidegate.cli.rewrite import rewrite_savepoint_command
from tidegate.cli.run import run_command
from tidegate.cli.status import JobMonitor, StatusPrinter, format_status, format_summary
from tidegate.cli.transactions import transactions_command

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_JOB_FAILED",
    "EXIT_USAGE",
    "CliError",
    "JobMonitor",
    "StatusPrinter",
    "checkpoint_detail",
    "cli",
    "format_status",
    "format_summary",
    "format_table",
    "human_size",
    "local_iso",
    "main",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", "-V", prog_name="tidegate", message="%(prog)s %(version)s"
)
def cli() -> None:
    """tidegate: stateful stream processing with Flink's checkpoints, on Spark."""


cli.add_command(run_command)
cli.add_command(checkpoints_command)
cli.add_command(check_restore_command)
cli.add_command(chaos_command)
cli.add_command(rewrite_savepoint_command)
cli.add_command(transactions_command)
for command in (
    list_command,
    trigger_checkpoint_command,
    savepoint_command,
    stop_command,
    cancel_command,
):
    cli.add_command(command)


def main() -> None:
    """Entry point of the `tidegate` command and of `python -m tidegate`."""
    cli(max_content_width=100)
