"""How records carry their event-time timestamps through operators and channels.

Records travel in batches (DESIGN §8) and a per-record wrapper object would cost every job, so
a timestamp is never attached to a record itself:

* A batch of records **without** timestamps is a plain `list` of values (as before event time
  existed: the no-timestamp path is unchanged).
* A batch **with** timestamps is a `TimestampedBatch`: a `list` subclass holding the values,
  whose `timestamps` attribute is a parallel `list[int]` (milliseconds since the epoch), one per
  value, same order. Being a list, it goes wherever a batch goes (sinks write its values,
  `len`, iteration and slicing see only the values; a slice is a plain list).
* A batch is homogeneous: either every record has a timestamp or none has. Record writers
  keep it so (a writer flushes its buffers when the kind of the incoming batches changes).

The contract for operators (runtime/operators.py follows it; other operators must too):

* `process_batch(records)`: `timestamps_of(records)` is the timestamps or None.
* Outputs: map-like operators keep each input's timestamp (map: same; filter: the kept ones';
  flat_map and process: every output inherits its input's); build output batches with
  `with_timestamps(values, timestamps)` (which returns `values` itself when `timestamps` is
  None) and hand them to `emit`.
* Partitioners split the timestamps with the values (runtime/partitioners.py).
* Pickling keeps the timestamps (network frames, channel state of unaligned checkpoints):
  `TimestampedBatch` pickles as a list plus its `timestamps` slot.

Watermarks are not in batches: they are events between frames (runtime/events.py), handed to
operators through `StreamOperator.process_watermark`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["TimestampedBatch", "timestamps_of", "with_timestamps"]


class TimestampedBatch(list):
    """A batch of values with a parallel list of int timestamps (see the module docstring)."""

    __slots__ = ("timestamps",)

    def __init__(self, values: Iterable[Any] = (), timestamps: list[int] | None = None) -> None:
        super().__init__(values)
        self.timestamps: list[int] = [] if timestamps is None else timestamps

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (_rebuild, (list(self), self.timestamps))

    def __repr__(self) -> str:
        return f"TimestampedBatch({list(self)!r}, timestamps={self.timestamps!r})"


def _rebuild(values: list, timestamps: list[int]) -> TimestampedBatch:
    return TimestampedBatch(values, timestamps)


def timestamps_of(batch: list) -> list[int] | None:
    """The timestamps of `batch`, None for a batch without timestamps (a plain list)."""
    if type(batch) is list:
        return None
    return getattr(batch, "timestamps", None)


def with_timestamps(values: list, timestamps: list[int] | None) -> list:
    """`values` as a batch with `timestamps` (parallel), or `values` itself when None."""
    if timestamps is None:
        return values
    return TimestampedBatch(values, timestamps)
