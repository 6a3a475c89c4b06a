"""Side outputs: extra output streams of one operator, told apart by an OutputTag's id.

`DataStream.get_side_output(tag)` adds a `SideOutputOperator(tag_id)` (runtime/operators.py)
chained to the operator
that produces the side output (the job graph always chains it: same parallelism, forward).
When the producing operator opens, `split_outputs` takes such operators out of its regular
outputs: `emit` sends only to the regular ones, `SideOutputCollector.flush` sends each tag's
batch to that tag's selectors. Records are collected per tag while a batch (or a firing round
of timers) is processed and sent after the regular output, with their timestamps.

A tag nobody reads (no `get_side_output` for it) is dropped, as in Flink.

A process function (and a window, join or timer function) emits to a side output with
`ctx.output(tag, value)`, or PyFlink's way, `yield tag, value`: operators that run such
functions (`tagged_outputs = True`) pass their output through `divert_tagged`, which moves
every `(OutputTag, value)` pair to the collector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidegate.runtime.records import timestamps_of, with_timestamps

__all__ = ["SideOutputCollector", "divert_tagged", "split_outputs"]


def split_outputs(outputs: Sequence[Any]) -> tuple[list[Any], dict[str, list[Any]]]:
    """(regular outputs, side-output selectors by tag id): a selector is an operator with a
    `side_output_tag` (SideOutputOperator)."""
    regular: list[Any] = []
    side: dict[str, list[Any]] = {}
    for out in outputs:
        tag_id = getattr(out, "side_output_tag", None)
        if tag_id is not None:
            side.setdefault(tag_id, []).append(out)
        else:
            regular.append(out)
    return regular, side


def _tag_id(tag: Any) -> str:
    tag_id = getattr(tag, "tag_id", None)
    if not isinstance(tag_id, str):
        raise TypeError(
            f"ctx.output(tag, value) expects an OutputTag as its tag, got {type(tag).__name__}; "
            "create one with OutputTag('name', type_info)"
        )
    return tag_id


def _is_tagged(value: Any) -> bool:
    """`(OutputTag, value)`: an OutputTag has a str `tag_id`."""
    return (
        type(value) is tuple
        and len(value) == 2
        and isinstance(getattr(value[0], "tag_id", None), str)
    )


def divert_tagged(records: list, side: SideOutputCollector) -> list:
    """`records` without the `(OutputTag, value)` pairs, which go to `side` with their
    record's timestamp (PyFlink's `yield output_tag, value`)."""
    if not any(map(_is_tagged, records)):
        return records
    timestamps = timestamps_of(records)
    kept: list = []
    kept_ts: list[int] | None = None if timestamps is None else []
    for i, record in enumerate(records):
        t = None if timestamps is None else timestamps[i]
        if _is_tagged(record):
            side.collect(record[0], record[1], t)
        else:
            kept.append(record)
            if kept_ts is not None:
                kept_ts.append(t)
    return with_timestamps(kept, kept_ts)


class SideOutputCollector:
    """Collects the side outputs of one operator between two flushes."""

    __slots__ = ("_pending", "_selectors")

    def __init__(self, selectors: dict[str, list[Any]]) -> None:
        self._selectors = selectors
        #: tag id -> (values, timestamps or None)
        self._pending: dict[str, tuple[list, list[int] | None]] = {}

    def collect(self, tag: Any, value: Any, timestamp: int | None) -> None:
        tag_id = _tag_id(tag)
        if tag_id not in self._selectors:
            return
        pending = self._pending.get(tag_id)
        if pending is None:
            pending = self._pending[tag_id] = ([], None if timestamp is None else [])
        values, timestamps = pending
        if (timestamps is None) != (timestamp is None):  # the kind changes: a new batch
            self.flush()
            self.collect(tag, value, timestamp)
            return
        values.append(value)
        if timestamps is not None:
            timestamps.append(timestamp)

    def discard(self) -> None:
        """Drop what was collected since the last flush (a failed record's side outputs)."""
        self._pending = {}

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for tag_id, (values, timestamps) in pending.items():
            batch = with_timestamps(values, timestamps)
            for out in self._selectors[tag_id]:
                out.process_batch(batch)

    def outputs(self) -> list[Any]:
        return [out for outs in self._selectors.values() for out in outs]
