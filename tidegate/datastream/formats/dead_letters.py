"""Dead letters: messages a format cannot read go to a side output instead of failing the job
(or being dropped silently, as `ignore_parse_errors` does). A tidegate addition built only of
PyFlink's own parts, so a PyFlink program can define the same function.

Why an operator and not an option of the source: a deserialization schema runs inside the
source reader, which has no side outputs; side outputs belong to process functions. So the
source reads raw messages (`SimpleStringSchema` / `ByteArraySchema`, or a FileSource's lines)
and the chained operator right behind it parses them. Chaining keeps it in the source's task,
without serialisation in between:

    dead = OutputTag("dead-letters")
    rows = raw.process(DeserializeOrDeadLetter(schema, dead), schema.get_produced_type())
    rows.get_side_output(dead).sink_to(...)   # DeadLetter records: record, error, field, ...
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidegate.common.serialization import DeserializationSchema
from tidegate.datastream.core_functions import ProcessFunction
from tidegate.datastream.output_tag import OutputTag
from tidegate.formats.base import FormatError
from tidegate.runtime.dead_letters import DeadLetter, dead_letter

__all__ = ["DeadLetter", "DeserializeOrDeadLetter"]


class DeserializeOrDeadLetter(ProcessFunction):
    """Emits `schema.deserialize(message)` for each message (nothing when that is None) and a
    DeadLetter on `dead_letter_tag` for each message the schema raises FormatError on (the
    message is its `record`).

    Build the schema without `ignore_parse_errors`, or nothing ever reaches the side output.
    Other errors (a bug in a user schema) still fail the job."""

    def __init__(self, schema: DeserializationSchema, dead_letter_tag: OutputTag) -> None:
        if not callable(getattr(schema, "deserialize", None)):
            raise TypeError(f"expected a deserialization schema, got {schema!r}")
        if not isinstance(dead_letter_tag, OutputTag):
            raise TypeError(f"dead_letter_tag must be an OutputTag, got {dead_letter_tag!r}")
        self.schema = schema
        self.dead_letter_tag = dead_letter_tag

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        try:
            record = self.schema.deserialize(value)
        except FormatError as e:
            ctx.output(self.dead_letter_tag, dead_letter(value, "DeserializeOrDeadLetter", e))
            return None
        return None if record is None else (record,)
