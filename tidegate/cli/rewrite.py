"""`tidegate rewrite-savepoint SRC --max-parallelism M --output DST [--parallelism P]`: write a
copy of a savepoint (or full checkpoint) whose keyed state is re-hashed to M key groups
(checkpoint/rewrite.py). A hyphenated verb like `trigger-checkpoint`: `tidegate savepoint JOB`
already triggers a savepoint of a running job."""

from __future__ import annotations

import json

import click

from tidegate.checkpoint.rewrite import RewriteError, rewrite_max_parallelism
from tidegate.cli.errors import CliError, one_line, reported, verbose_option


@click.command("rewrite-savepoint")
@click.argument("source", metavar="SRC")
@click.option(
    "-m",
    "--max-parallelism",
    type=int,
    required=True,
    help="The new max parallelism (number of key groups), 1 to 32768.",
)
@click.option(
    "-o", "--output", required=True, metavar="DST", help="New savepoint directory (must not exist)."
)
@click.option(
    "-p",
    "--parallelism",
    type=click.IntRange(min=1),
    help="Subtasks to split the keyed state over (default: the old parallelism, capped at M).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@verbose_option
def rewrite_savepoint_command(
    source: str,
    max_parallelism: int,
    output: str,
    parallelism: int | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Rewrite a savepoint to another max parallelism, re-hashing its keys.

    SRC is a savepoint or chk-<n> directory (a canonical, full snapshot; not an incremental
    or unaligned checkpoint), its _metadata file, or a job directory (its latest checkpoint).
    The result in DST is a self-contained savepoint; restore a job from it with
    set_max_parallelism(M), or with no max parallelism set. SRC is never modified.
    """
    with reported(verbose):
        try:
            result = rewrite_max_parallelism(source, output, max_parallelism, parallelism)
        except RewriteError as exc:
            raise CliError(one_line(str(exc)), _hint(exc)) from None
    if as_json:
        click.echo(
            json.dumps(result.__dict__ | {"copied_operators": list(result.copied_operators)})
        )
        return
    click.echo(
        f"rewrote {source} (max parallelism {result.old_max_parallelism}) to {result.path} "
        f"(max parallelism {result.max_parallelism}): {result.keys} keyed entries"
    )
    for uid, p in sorted(result.keyed_operators.items()):
        click.echo(f"  {uid}: keyed state re-hashed into {p} subtask file(s)")
    for uid in result.copied_operators:
        click.echo(f"  {uid}: copied unchanged (no keyed state)")
    click.echo(f"restore with: tidegate run JOB.py --from-savepoint {result.path}")


def _hint(exc: RewriteError) -> str:
    text = str(exc)
    if "Take a savepoint" in text:
        return "`tidegate savepoint JOB DIR` takes a savepoint of a running job"
    return "`tidegate rewrite-savepoint --help` describes the arguments"
