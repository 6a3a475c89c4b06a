"""Text formatting shared by the commands: sizes, times, durations and tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any


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


def duration(seconds: float) -> str:
    """`12.3s`, or `M:SS.S` from a minute on."""
    minutes, secs = divmod(seconds, 60)
    return f"{int(minutes)}:{secs:04.1f}" if minutes else f"{secs:.1f}s"


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
