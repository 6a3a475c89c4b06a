"""Checkpoint metadata for tests, written as the JSON content a `_metadata` file holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata, encode_metadata


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
