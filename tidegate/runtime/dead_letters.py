"""Dead letters: records a user function fails on, routed to a side output instead of failing
the job (a poison-record policy; the default stays Flink's: the exception fails the task).

An operator whose dead-letter side output is read (`stream.get_side_output(DEAD_LETTERS)`,
datastream/dead_letters.py) processes each batch record by record through its own
`process_batch`, with its regular outputs collected rather than sent, so that a record's
exception is caught before anything of that record leaves the operator: its outputs and side
outputs are dropped and a `DeadLetter` goes to the side output, with the record's timestamp.
The other records' outputs leave as one batch, in order, as without the policy. Changes the
failing call made to state before raising are kept (state has no per-record transactions, as in
Flink). Per-record processing costs more than the batch loops, so the policy is per operator,
only where a user asks for it.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from tidegate.formats.base import FormatError
from tidegate.runtime.faults import InjectedFault
from tidegate.runtime.records import TimestampedBatch, timestamps_of, with_timestamps

log = logging.getLogger(__name__)

#: the id of the dead-letter side output's OutputTag
DEAD_LETTER_TAG_ID = "tidegate.dead-letters"
_TAG = SimpleNamespace(tag_id=DEAD_LETTER_TAG_ID)

#: errors that say nothing about the record: they fail the job under any policy (a chaos run's
#: injected exception among them: it stands for a failure, not a bad record)
_NOT_POISON = (MemoryError, RecursionError, InjectedFault)


@dataclass(frozen=True)
class DeadLetter:
    """A record a function raised on, and what it raised. The one dead-letter type: routed
    by the policy above and by DeserializeOrDeadLetter (datastream/formats/dead_letters.py)."""

    #: the record (a message, for a format) as the function received it
    record: Any
    #: `str(exception)`
    error: str
    #: the exception's class name, e.g. "ValueError"
    error_type: str = ""
    #: the operator's name, e.g. "Map" or the name given with `.name(...)`
    operator: str = ""
    #: the formatted traceback, innermost frame last
    traceback: str = ""
    #: a FormatError's field (dotted path) and position (`char 23`, `column 3`), else None
    field: str | None = None
    position: str | None = None


def dead_letter(record: Any, operator: str, error: Exception) -> DeadLetter:
    """The DeadLetter of `record`, on which `operator`'s function raised `error`."""
    format_error = isinstance(error, FormatError)
    return DeadLetter(
        record=record,
        error=str(error),
        error_type=type(error).__name__,
        operator=operator,
        traceback="".join(traceback.format_exception(error)),
        field=error.field if format_error else None,
        position=error.position if format_error else None,
    )


class _Collect:
    """Stands in for an operator's regular outputs: keeps what it emits."""

    def __init__(self) -> None:
        self.values: list = []
        self.timestamps: list[int] | None = None

    def process_batch(self, records: list) -> None:
        timestamps = timestamps_of(records)
        if timestamps is not None:
            if self.timestamps is None:
                self.timestamps = []
            self.timestamps.extend(timestamps)
        self.values.extend(records)

    def truncate(self, n: int) -> None:
        """Back to the first `n` records (an input batch's outputs are all timestamped or none
        are, so the timestamps run parallel to them)."""
        del self.values[n:]
        if self.timestamps is not None:
            del self.timestamps[n:]

    def batch(self) -> list:
        return with_timestamps(self.values, self.timestamps)


def route_dead_letters(operator: Any) -> None:
    """Make `operator` (opening: its outputs split, a selector of the dead-letter side output
    among its side outputs) route the records its function raises on there as DeadLetters."""
    process_batch = operator.process_batch
    side = operator.side_outputs
    name = operator.name or type(operator).__name__
    counted = [0]

    def process_batch_routing_dead_letters(records: list) -> None:
        timestamps = timestamps_of(records)
        regular, collect = operator.outputs, _Collect()
        operator.outputs = [collect]
        dead: list[tuple[DeadLetter, int | None]] = []
        try:
            for i, record in enumerate(records):
                t = None if timestamps is None else timestamps[i]
                n = len(collect.values)
                try:
                    process_batch([record] if t is None else TimestampedBatch([record], [t]))
                except _NOT_POISON:
                    raise
                except Exception as e:
                    collect.truncate(n)
                    side.discard()  # the failing record's side outputs
                    dead.append((dead_letter(record, name, e), t))
        finally:
            operator.outputs = regular
        out = collect.batch()
        if out:  # as emit() sends it (its side outputs were taken out, record by record)
            for o in regular:
                o.process_batch(out)
        if dead:
            counted[0] += len(dead)
            if counted[0] == len(dead):  # the operator's first: say so once, not per record
                letter = dead[0][0]
                log.warning(
                    "%s: a record raised %s: %s; routed to the dead-letter side output "
                    "(later ones are not logged)",
                    name,
                    letter.error_type,
                    letter.error,
                )
            for letter, t in dead:
                side.collect(_TAG, letter, t)
            side.flush()

    operator.process_batch = process_batch_routing_dead_letters
