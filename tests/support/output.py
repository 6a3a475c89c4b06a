"""Reading what a job's file sink committed: the visible part files (in-progress and pending
files are hidden, dot-prefixed) and their lines, on a local path or any fsspec URL (read with
the filesystem options the job had, e.g. an S3 server's endpoint and keys)."""

from __future__ import annotations

import posixpath
from pathlib import Path

from tidegate.common.filesystems import NO_OPTIONS, FileSystems


def committed_files(out: Path | str, filesystems: FileSystems = NO_OPTIONS) -> list[str]:
    """The committed (visible) part files below `out`, in any bucket, sorted: paths on `out`'s
    filesystem (without a URL's protocol)."""
    fs, root = filesystems.resolve(str(out))
    if not fs.isdir(root):
        return []
    root = root.rstrip("/")
    return [
        path
        for path in sorted(fs.find(root))
        if not any(part.startswith(".") for part in posixpath.relpath(path, root).split("/"))
    ]


def committed_lines(*outs: Path | str, filesystems: FileSystems = NO_OPTIONS) -> list[str]:
    """The lines of every committed part file below each of `outs` (no trailing newlines);
    nothing of an in-progress file."""
    lines = []
    for out in outs:
        fs, _ = filesystems.resolve(str(out))
        for path in committed_files(out, filesystems):
            text = fs.cat_file(path).decode()
            lines.extend(text.removesuffix("\n").split("\n") if text else [])
    return lines
