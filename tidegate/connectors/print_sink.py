"""A sink that prints records to stdout or stderr in the format of Flink's `print()`."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["PrintSink", "PrintSinkWriter", "print_prefix"]


def print_prefix(sink_identifier: str | None, subtask_index: int, parallelism: int) -> str:
    """Flink's prefix: `id:n> ` or `n> ` (n = subtask + 1) if parallel, else `id> ` or ''."""
    if parallelism > 1:
        task = str(subtask_index + 1)
        return f"{sink_identifier}:{task}> " if sink_identifier else f"{task}> "
    return f"{sink_identifier}> " if sink_identifier else ""


class PrintSink:
    """Prints `str(record)` per line when written (not transactional: commits are no-ops)."""

    def __init__(self, sink_identifier: str | None = None, to_stderr: bool = False) -> None:
        self.sink_identifier = sink_identifier
        self.to_stderr = to_stderr

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> PrintSinkWriter:
        prefix = print_prefix(self.sink_identifier, subtask_index, parallelism)
        return PrintSinkWriter(prefix, self.to_stderr)

    def create_committer(self) -> PrintSink:
        return self

    def commit(self, committables: list[Any]) -> None:
        """Nothing to commit: records were printed when written."""

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Nothing to recover."""

    def __repr__(self) -> str:
        return f"PrintSink({self.sink_identifier!r}, to_stderr={self.to_stderr})"


class PrintSinkWriter:
    def __init__(self, prefix: str, to_stderr: bool) -> None:
        self.prefix = prefix
        self.to_stderr = to_stderr

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        stream = sys.stderr if self.to_stderr else sys.stdout  # looked up late: redirects work
        prefix = self.prefix
        stream.write("".join(f"{prefix}{record}\n" for record in records))
        stream.flush()

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return []

    def close(self) -> None:
        """Nothing to release."""
