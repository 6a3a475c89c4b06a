"""Whether entries after a split's position were trimmed away before the source read them.

A Redis stream trimmed (XTRIM, XADD MAXLEN/MINID) past a checkpointed id hands XREAD its first
remaining entry without notice, and entry ids do not tell whether entries lay between. So a
split also counts its position: `offset`, the number of entries the stream had added up to
and including its last id. XINFO STREAM gives `entries-added` (every entry ever added) and the
length, so when the stream's first entry lies after the position, the entries added after it
that the stream no longer holds are `entries-added - offset - length`.

The reader counts one per entry it reads and sets the count from XINFO STREAM whenever it has
caught up with a stream (the stream's last generated id is its position). Entries deleted with
XDEL before the reader saw them make it count too few until then: such entries may be reported
as missing too (the error says "trimmed or deleted").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidegate.connectors.redis.ids import parse_id

__all__ = ["StreamInfo", "missing_entries", "stream_info"]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What XINFO STREAM tells about a stream at one moment."""

    first_id: str | None  # None: empty
    last_id: str | None
    last_generated_id: str
    entries_added: int
    length: int


def stream_info(client: Any, stream: str) -> StreamInfo | None:
    """XINFO STREAM of `stream` (None: the key does not exist). Needs Redis 7 (entries-added)."""
    import redis

    try:
        reply = client.xinfo_stream(stream)
    except redis.ResponseError as e:
        if "no such key" in str(e):
            return None
        raise
    if "entries-added" not in reply:
        raise RuntimeError(
            f"the Redis server behind {stream!r} does not report entries-added in XINFO STREAM: "
            f"the Redis Streams source needs Redis 7 or newer"
        )
    first, last = reply["first-entry"], reply["last-entry"]
    return StreamInfo(
        first[0].decode() if first else None,
        last[0].decode() if last else None,
        reply["last-generated-id"].decode(),
        int(reply["entries-added"]),
        int(reply["length"]),
    )


def missing_entries(position: str, offset: int | None, end_id: str | None, info: StreamInfo) -> int:
    """How many entries added after `position` (counted as `offset`) the stream no longer
    holds although its first entry lies after the position (trimmed or deleted); 0 when none
    are, when the count is unknown (`offset` None) or a bounded split's end was reached."""
    if offset is None or (end_id is not None and parse_id(position) >= parse_id(end_id)):
        return 0
    if info.first_id is not None and parse_id(info.first_id) <= parse_id(position):
        return 0  # trimming removes the oldest entries: nothing after the position went
    return max(0, info.entries_added - offset - info.length)
