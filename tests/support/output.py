"""Reading what a job's file sink committed: the visible part files (in-progress and pending
files are hidden, dot-prefixed) and their lines."""

from __future__ import annotations

import glob
import os
from pathlib import Path


def committed_files(out: Path | str) -> list[str]:
    """The committed (visible) part files below `out`, in any bucket."""
    return [
        path
        for path in glob.glob(f"{out}/**/*", recursive=True)
        if os.path.isfile(path) and not os.path.basename(path).startswith(".")
    ]


def committed_lines(*outs: Path | str) -> list[str]:
    """The lines of every committed part file below each of `outs` (no trailing newlines);
    nothing of an in-progress file."""
    lines = []
    for out in outs:
        for path in committed_files(out):
            with open(path) as f:
                lines.extend(line.rstrip("\n") for line in f)
    return lines
