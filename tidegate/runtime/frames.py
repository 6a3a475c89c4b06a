"""Frames on a channel: `(channel index, payload)` pairs as bytes, for the network and for the
channel state of unaligned checkpoints.

Two encodings, told apart by the first byte:

* a pickle (protocol 5, so it starts with 0x80): any payload — an event, or a batch of a stream
  without a declared type;
* a typed frame (0x01): a batch of an edge whose stream declared its type, encoded by that
  type's codec (common/record_codec.py)::

      0x01 | u32 channel | u32 edge id | u32 records | u8 has timestamps
           | [records x i64 timestamps] | the codec's bytes

  The receiver decodes it with the codec of the edge it names. Channel state stores pickles
  only (the gate re-pickles a typed frame it records), so restoring never needs a codec.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle

from tidegate.common import pickling
from tidegate.common.record_codec import BatchCodec
from tidegate.common.type_format import RecordTypeError
from tidegate.runtime.records import TimestampedBatch, timestamps_of

TYPED = 0x01
_TYPED_HEADER = struct.Struct("<BIIIB")


def encode_frame(frame: Any, plain: bool = True) -> tuple[bytes, bool]:
    """Pickle a frame (with cloudpickle when `plain` is False: records of classes defined in
    the job script only cloudpickle can carry). Returns the bytes and whether plain pickle
    still works, so a transport stops retrying it after the first such frame."""
    if plain:
        try:
            return pickle.dumps(frame, protocol=5), True
        except pickling.REFUSED:
            pass
    return cloudpickle.dumps(frame, protocol=5), False


@dataclass(frozen=True)
class TypedEdge:
    """An edge whose records have a declared type: its id (typed frames name it), its codec, and
    the operator that declared the type (a misfit names it)."""

    edge: int
    codec: BatchCodec
    operator: str

    def misfit(self, error: RecordTypeError) -> RecordTypeError:
        return RecordTypeError(
            f"{self.operator} emitted a record that does not fit its declared output type "
            f"{self.codec.type_info!r}: {error}"
        )


def encode_typed_frame(channel: int, edge: TypedEdge, batch: list) -> bytes:
    """A typed frame of `batch`; its records are checked when the receiver decodes it."""
    timestamps = timestamps_of(batch)
    n = len(batch)
    parts = [_TYPED_HEADER.pack(TYPED, channel, edge.edge, n, timestamps is not None)]
    if timestamps is not None:
        parts.append(struct.pack(f"<{n}q", *timestamps))
    try:
        parts.append(edge.codec.encode(batch))
    except RecordTypeError as e:
        raise edge.misfit(e) from None
    return b"".join(parts)


def decode_frame(data: bytes, edges: Mapping[int, TypedEdge]) -> tuple[tuple[int, Any], bool]:
    """The `(channel, payload)` of `data` and whether `data` is a pickle (kept as it is for
    channel state) rather than a typed frame. A record of a typed frame that does not fit its
    type is a RecordTypeError naming the operator that emitted it."""
    if data[0] != TYPED:
        return pickle.loads(data), True
    _marker, channel, edge_id, n, has_timestamps = _TYPED_HEADER.unpack_from(data)
    view = memoryview(data)[_TYPED_HEADER.size :]
    timestamps = None
    if has_timestamps:
        timestamps = list(struct.unpack_from(f"<{n}q", view))
        view = view[8 * n :]
    edge = edges[edge_id]
    try:
        values = edge.codec.decode(view, n)
    except RecordTypeError as e:
        raise edge.misfit(e) from None
    if timestamps is not None:
        values = TimestampedBatch(values, timestamps)
    return (channel, values), False
