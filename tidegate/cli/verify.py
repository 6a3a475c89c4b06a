"""`tidegate checkpoints DIR --verify`: read every file of a checkpoint and compare its size and
checksum with `_metadata` (checkpoint/verification.py), report what is damaged, exit 1 if any."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from tidegate.checkpoint.storage import read_checkpoint_metadata
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.cli.errors import EXIT_DAMAGED, CliError
from tidegate.cli.formatting import human_size


def verification_of(path: str) -> dict[str, Any]:
    """The JSON-ready result of verifying the checkpoint in `path`."""
    report = verify_checkpoint(read_checkpoint_metadata(path), path)
    return {
        "ok": report.ok,
        "files": report.files,
        "bytes": report.bytes,
        "problems": [
            {
                "file": p.artifact.file,
                "kind": p.artifact.kind,
                "operator": p.artifact.uid,
                "subtask": p.artifact.subtask,
                "missing": p.missing,
                "problem": p.detail,
            }
            for p in report.problems
        ],
    }


def verification_summary(verification: dict[str, Any]) -> str:
    """`ok (6 files, 23.1 KiB)` or `DAMAGED (1 of 6 files)`."""
    files = verification["files"]
    if verification["ok"]:
        return f"ok ({files} files, {human_size(verification['bytes'])})"
    return f"DAMAGED ({len(verification['problems'])} of {files} files)"


def report_damage(records: Iterable[dict[str, Any]]) -> None:
    """Print each damaged file of the verified `records` (checkpoint descriptions with a
    `verification`, or an `error` when even `_metadata` is unreadable) to stderr, and raise a
    CliError with exit code 1 if there was any."""
    damaged = []
    for record in records:
        if "error" in record:
            damaged.append(record["path"])
            continue
        for problem in record["verification"]["problems"]:
            click.echo(
                f"damaged: {record['path']}/{problem['file']} ({problem['kind']} of operator "
                f"{problem['operator']!r}, subtask {problem['subtask']}) {problem['problem']}",
                err=True,
            )
        if not record["verification"]["ok"]:
            damaged.append(record["path"])
    if damaged:
        raise CliError(
            f"{len(damaged)} damaged checkpoint(s): {', '.join(damaged)}",
            "restore from an intact checkpoint (pass its chk-<n> directory), or let a restore "
            "from the job directory skip damaged ones with `tidegate run --restore-fallback`",
            EXIT_DAMAGED,
        )
