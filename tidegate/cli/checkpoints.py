"""`tidegate checkpoints DIR [--id N] [--json] [--verify]`: list completed checkpoints, or show
one; `--verify` also checks their files (cli/verify.py). With `--job JOB` instead of DIR, a
running job's checkpoint statistics (tidegate/cli/jobs.py)."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from tidegate.checkpoint.errors import (
    CheckpointError,
    CheckpointNotFoundError,
)
from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata
from tidegate.checkpoint.storage import (
    CHECKPOINT_DIR,
    CheckpointStorage,
    read_checkpoint_metadata,
    resolve_checkpoint_path,
)
from tidegate.cli.errors import CliError, one_line, reported, verbose_option
from tidegate.cli.formatting import format_table, human_size, local_iso
from tidegate.cli.jobs import address_options, show_job_checkpoints
from tidegate.cli.verify import report_damage, verification_of, verification_summary
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.state.handles import StateHandle


@click.command("checkpoints")
@click.argument("directory", metavar="[DIR]", required=False)
@click.option("--job", metavar="JOB", help="A running job's checkpoint statistics (REST API).")
@click.option("--id", "checkpoint_id", type=int, help="Show this checkpoint only.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--verify",
    is_flag=True,
    help="Also read every file and check its size and checksum; exit 1 if one is damaged.",
)
@address_options
@verbose_option
def checkpoints_command(
    directory: str | None,
    job: str | None,
    checkpoint_id: int | None,
    as_json: bool,
    verify: bool,
    address: str | None,
    token: str | None,
    verbose: bool,
) -> None:
    """List completed checkpoints, or show one.

    DIR is a checkpoint directory holding job directories, or one job directory. To show one
    checkpoint's metadata, pass --id N, or a chk-<n> directory (or its _metadata file) as DIR.

    With --job JOB instead of DIR: the checkpoint statistics of a running job (counts, summary,
    latest, history) from its driver; with --id N, that checkpoint's per-subtask statistics.
    """
    if (directory is None) == (job is None):
        raise CliError(
            "give either DIR (checkpoints on disk) or --job JOB (a running job's statistics)",
            "`tidegate checkpoints --help` shows both forms",
        )
    if job is not None:
        show_job_checkpoints(job, checkpoint_id, as_json, address, token, verbose)
        return
    with reported(verbose):
        if _names_one_checkpoint(directory):
            if checkpoint_id is not None:
                raise CliError(f"{directory} is one checkpoint; --id needs a job directory")
            path = resolve_checkpoint_path(directory)
        else:
            found = find_checkpoints(directory)
            if checkpoint_id is None:
                _list_checkpoints(directory, found, as_json, verify)
                return
            path = _pick(directory, found, checkpoint_id)
        detail = checkpoint_detail(path, read_metadata(path))
        if verify:
            detail["verification"] = verification_of(path)
        _show_checkpoint(detail, as_json)
        if verify:
            report_damage([detail])


def read_metadata(directory: str, filesystems: FileSystems = NO_OPTIONS) -> CheckpointMetadata:
    """The validated `_metadata` of the checkpoint directory `directory`."""
    return read_checkpoint_metadata(directory.rstrip("/"), filesystems)


# discovery ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Found:
    job_id: str
    checkpoint_id: int
    path: str


def _names_one_checkpoint(path: str) -> bool:
    """A `_metadata` file, a chk-<n> directory, or any directory holding `_metadata`."""
    fs, fs_path = NO_OPTIONS.resolve(path)
    name = posixpath.basename(fs_path.rstrip("/"))
    if name == METADATA_FILE_NAME or CHECKPOINT_DIR.fullmatch(name):
        return True
    return fs.isfile(posixpath.join(fs_path, METADATA_FILE_NAME))


def find_checkpoints(path: str) -> list[_Found]:
    """Completed checkpoints of the job directory `path`, or of every job directory in it."""
    fs, fs_path = NO_OPTIONS.resolve(path)
    if not fs.isdir(fs_path):
        what = "is not a directory" if fs.exists(fs_path) else "does not exist"
        raise CheckpointNotFoundError(f"{path} {what}")
    uri = path.rstrip("/") if "://" in path else fs_path.rstrip("/") or "/"
    subdirs = [
        posixpath.basename(e["name"].rstrip("/"))
        for e in fs.ls(fs_path, detail=True)
        if e["type"] == "directory"
    ]
    if any(CHECKPOINT_DIR.fullmatch(name) for name in subdirs):
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


# description ----------------------------------------------------------------------------------
def _summary_record(path: str, metadata: CheckpointMetadata) -> dict[str, Any]:
    completed = metadata.completed_or_triggered_ms
    return {
        "job_id": metadata.job_id,
        "job_name": metadata.job_name,
        "checkpoint_id": metadata.checkpoint_id,
        "path": path,
        "completed_ms": completed,
        "completed": local_iso(completed),
        "size_bytes": (
            metadata.size_bytes if metadata.size_bytes is not None else metadata.written_bytes()
        ),
        "duration_ms": metadata.duration_ms,
        "operators": len(metadata.operators),
        "is_savepoint": metadata.is_savepoint,
    }


def checkpoint_detail(path: str, metadata: CheckpointMetadata) -> dict[str, Any]:
    """The JSON-ready description of one checkpoint (key groups as inclusive [first, last])."""
    operators = [
        {
            "uid": uid,
            "name": op.name,
            "parallelism": op.parallelism,
            "subtasks": [_subtask_detail(i, h) for i, h in sorted(op.subtasks.items())],
        }
        for uid, op in sorted(metadata.operators.items())
    ]
    channel_state = [
        {
            "uid": uid,
            "parallelism": entry.parallelism,
            "subtasks": [
                {
                    "subtask": index,
                    "file": handle.file,
                    "size_bytes": handle.size,
                    "checksum": handle.checksum,
                    "frames": handle.frames,
                }
                for index, handle in sorted(entry.subtasks.items())
            ],
        }
        for uid, entry in sorted(metadata.channel_state.items())
    ]
    facts = {
        "job_id": metadata.job_id,
        "job_name": metadata.job_name,
        "checkpoint_id": metadata.checkpoint_id,
        "is_savepoint": metadata.is_savepoint,
        "timestamp_ms": metadata.timestamp_ms,
        "completed_ms": metadata.completed_ms,
        "duration_ms": metadata.duration_ms,
        "size_bytes": metadata.size_bytes,
        "max_parallelism": metadata.max_parallelism,
        "attempt": metadata.attempt,
        "generation": metadata.generation,
    }
    return {"path": path, **facts, "operators": operators, "channel_state": channel_state}


def _subtask_detail(index: int, handle: StateHandle) -> dict[str, Any]:
    info = handle.index
    kg = handle.key_group_range
    return {
        "subtask": index,
        "file": handle.file,
        "size_bytes": handle.size if handle.size is not None else (info.size if info else None),
        "checksum": handle.checksum,
        "key_groups": [kg.start, kg.stop - 1] if kg is not None else None,
        "non_empty_key_groups": len(info.key_group_offsets) if info is not None else 0,
        "state_kinds": dict(handle.state_kinds),
        "operator_state": info is not None and info.operator_offset is not None,
    }


# output ---------------------------------------------------------------------------------------
def _list_checkpoints(directory: str, found: list[_Found], as_json: bool, verify: bool) -> None:
    records = []
    for f in found:
        try:
            record = _summary_record(f.path, read_metadata(f.path))
            if verify:
                record["verification"] = verification_of(f.path)
            records.append(record)
        except CheckpointError as exc:
            error = one_line(str(exc))
            click.echo(f"warning: skipped {f.path}: {error}", err=True)
            records.append(
                {
                    "job_id": f.job_id,
                    "checkpoint_id": f.checkpoint_id,
                    "path": f.path,
                    "error": error,
                }
            )
    if as_json:
        click.echo(json.dumps(records, indent=2))
    else:
        _print_checkpoint_table(directory, found, records, verify)
    if verify:
        report_damage(records)


def _print_checkpoint_table(
    directory: str, found: list[_Found], records: list[dict[str, Any]], verify: bool
) -> None:
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
            _or_dash(r["duration_ms"]),
            r["operators"],
            r["job_name"] or "-",
        ]
        + ([verification_summary(r["verification"])] if verify else [])
        for r in records
        if "error" not in r
    ]
    if verify:
        headers.append("VERIFIED")
    click.echo(format_table(headers, rows))


def _show_checkpoint(detail: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    kind = "savepoint" if detail["is_savepoint"] else "checkpoint"
    name = f" ({detail['job_name']!r})" if detail["job_name"] else ""
    size = _or_dash(detail["size_bytes"], human_size)
    duration = _or_dash(detail["duration_ms"])
    click.echo(f"{kind} {detail['checkpoint_id']} of job {detail['job_id']}{name}")
    click.echo(f"  path        {detail['path']}")
    click.echo(f"  triggered   {local_iso(detail['timestamp_ms'])}")
    click.echo(f"  completed   {local_iso(detail['completed_ms'])} (duration {duration} ms)")
    click.echo(
        f"  size        {size}, max parallelism {detail['max_parallelism']}, "
        f"attempt {detail['attempt']}, generation {detail['generation']}"
    )
    if "verification" in detail:
        click.echo(f"  verified    {verification_summary(detail['verification'])}")
    for op in detail["operators"]:
        click.echo(f"\noperator {op['uid']}: {op['name']!r}, parallelism {op['parallelism']}")
        rows = [_subtask_row(s) for s in op["subtasks"]]
        headers = ["SUBTASK", "FILE", "SIZE", "KEY GROUPS", "STATE"]
        click.echo(format_table(headers, rows, indent="  "))
    for entry in detail["channel_state"]:
        click.echo(
            f"\nin-flight records (unaligned) into {entry['uid']!r}, "
            f"parallelism {entry['parallelism']}"
        )
        rows = [
            [s["subtask"], s["file"] or "-", _or_dash(s["size_bytes"], human_size), s["frames"]]
            for s in entry["subtasks"]
        ]
        click.echo(format_table(["SUBTASK", "FILE", "SIZE", "FRAMES"], rows, indent="  "))


def _subtask_row(s: dict[str, Any]) -> list[Any]:
    kg = s["key_groups"]
    kinds = [f"{name}: {kind}" for name, kind in sorted(s["state_kinds"].items())]
    if s["operator_state"]:
        kinds.append("operator state")
    return [
        s["subtask"],
        s["file"] or "-",
        _or_dash(s["size_bytes"], human_size),
        f"[{kg[0]}, {kg[1]}]" if kg else "-",
        ", ".join(kinds) or "-",
    ]


def _or_dash(value: Any, show: Callable[[Any], Any] = lambda v: v) -> Any:
    """`show(value)`, or `-` for a missing (None) value."""
    return "-" if value is None else show(value)
