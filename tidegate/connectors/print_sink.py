"""A sink that prints records to stdout or stderr in the format of Flink's `print()`: each
record as PyFlink prints a record of the stream's declared type (common/type_format.py)."""

from __future__ import annotations

import sys
from typing import Any

from tidegate.common.type_format import RecordTypeError, printer
from tidegate.common.typeinfo import TypeInformation

__all__ = ["PrintSink", "PrintSinkWriter", "print_prefix"]


def print_prefix(sink_identifier: str | None, subtask_index: int, parallelism: int) -> str:
    """Flink's prefix: `id:n> ` or `n> ` (n = subtask + 1) if parallel, else `id> ` or ''."""
    if parallelism > 1:
        task = str(subtask_index + 1)
        return f"{sink_identifier}:{task}> " if sink_identifier else f"{task}> "
    return f"{sink_identifier}> " if sink_identifier else ""


class PrintSink:
    """Prints one line per record when written (not transactional: commits are no-ops): the
    record as PyFlink prints one of `type_info`, the type the operator `declared_by` declared
    (None: undeclared, `str(record)`)."""

    def __init__(
        self,
        sink_identifier: str | None = None,
        to_stderr: bool = False,
        type_info: TypeInformation | None = None,
        declared_by: str | None = None,
    ) -> None:
        self.sink_identifier = sink_identifier
        self.to_stderr = to_stderr
        self.type_info = type_info
        self.declared_by = declared_by

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> PrintSinkWriter:
        prefix = print_prefix(self.sink_identifier, subtask_index, parallelism)
        return PrintSinkWriter(prefix, self.to_stderr, self.type_info, self.declared_by)

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
    def __init__(
        self,
        prefix: str,
        to_stderr: bool,
        type_info: TypeInformation | None = None,
        declared_by: str | None = None,
    ) -> None:
        self.prefix = prefix
        self.to_stderr = to_stderr
        self.type_info = type_info
        self.declared_by = declared_by
        self._format = printer(type_info)

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        stream = sys.stderr if self.to_stderr else sys.stdout  # looked up late: redirects work
        prefix, fmt = self.prefix, self._format
        try:
            text = "".join([f"{prefix}{fmt(record)}\n" for record in records])
        except RecordTypeError as e:
            raise self._mismatch(records, e) from None
        stream.write(text)
        stream.flush()

    def _mismatch(self, records: list[Any], error: RecordTypeError) -> RecordTypeError:
        """The error naming the operator, its declared type and the record that does not fit."""
        record = next(r for r in records if not self._fits(r))
        return RecordTypeError(
            f"print() cannot write a record of {self.declared_by!r}: it does not match the type "
            f"declared for that operator's output, {self.type_info!r} ({error}); the record: "
            f"{record!r}. Declare the type the function returns (output_type=...), or return "
            "records of the declared type"
        )

    def _fits(self, record: Any) -> bool:
        try:
            self._format(record)
        except RecordTypeError:
            return False
        return True

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return []

    def close(self) -> None:
        """Nothing to release."""
