"""Checkpoint metadata for tests, written as the JSON content a `_metadata` file holds, and what
a snapshot says its sources had read."""

from __future__ import annotations

import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.waiting import resolved, wait_for_checkpoints
from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata, encode_metadata
from tidegate.connectors.number_seq import split_range
from tidegate.state_processor.snapshot import SnapshotView


def metadata_of(**content: Any) -> CheckpointMetadata:
    """The typed metadata of `content` (the keys of a `_metadata` document: `operators`,
    `max_parallelism` ...); the required facts a test does not care about get defaults."""
    document = {"job_id": "job", "checkpoint_id": 1, "timestamp_ms": 0, "generation": 1}
    return CheckpointMetadata.from_json({**document, "operators": {}, **content})


def edit_metadata(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Let `change` edit the JSON document of `directory`'s `_metadata`, then write it back
    through the typed model, with a valid checksum (a snapshot as a job could have written it)."""
    path = directory / METADATA_FILE_NAME
    document = json.loads(path.read_text())
    change(document)
    content = {k: v for k, v in document.items() if k not in ("format", "version", "checksum")}
    path.write_bytes(encode_metadata(CheckpointMetadata.from_json(content)))


def checkpoint_dirs(job_dir: str | Path) -> list[str]:
    """The `chk-<n>` directories of a job's checkpoint directory, oldest (lowest n) first."""
    return sorted(glob.glob(f"{job_dir}/chk-*"), key=lambda p: int(p.rsplit("-", 1)[1]))


def fingerprint(directory: str | Path) -> dict[str, bytes]:
    """Every file under `directory` (relative name -> bytes): compare two to show that a
    snapshot was neither modified nor deleted from."""
    root = Path(directory)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def stop_with_savepoint(
    job, directory: str | Path | None = None, *, after_checkpoints: int = 1, drain: bool = False
) -> str:
    """Once `job` (a JobClient) is running and completed `after_checkpoints` more checkpoints,
    stop it with a savepoint in `directory` (None: the job's default savepoint directory;
    `drain`: end the input first) and wait until the job finished; returns the savepoint's
    path."""
    wait_for_checkpoints(job, after_checkpoints)
    target = None if directory is None else str(directory)
    path = resolved(job.stop_with_savepoint(drain, target), "the stop with a savepoint")
    resolved(job.get_job_execution_result(), "the job to finish")
    return path


def records_read_at(
    snapshot: str, n: int, parallelism: int = 2, uid: str = "numbers"
) -> list[list[int]]:
    """The values each split of a `DataGeneratorSource(lambda i: i, count=n)` (uid `uid`, at
    `parallelism`) had read when `snapshot` (a checkpoint or savepoint) was taken, by split:
    exactly what the output a savepoint commits is made of."""
    bounds = split_range(0, n - 1, parallelism)
    read = []
    for _subtask, states in SnapshotView.open(snapshot).operator_state(uid):
        for split in states["__splits__"][1]:
            low, _high = bounds[int(split.split_id)]
            read.append(list(range(low, split.next_index)))
    return read
