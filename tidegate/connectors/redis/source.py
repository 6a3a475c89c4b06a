"""Redis Streams source: one split per stream, read with XREAD from the last entry id kept in
the checkpoint, so a restore (also at another parallelism) resumes exactly after the last
entry emitted.

Build it like a PyFlink source:

    source = (
        RedisStreamSource.builder()
        .set_url("redis://127.0.0.1:6379/0")
        .set_streams("orders", "payments")
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "redis")

Options: where new splits start (`set_starting_ids`, earliest by default), `set_bounded()`
(stop at each stream's last entry when the split is first planned), `set_consumer_group`
(XACK entries once the checkpoint that covers them completed: for XINFO/XPENDING monitoring
and trimming, never for the position), `set_fail_on_data_loss`, `set_charset` and
`set_deserializer`.

When a reader starts, it checks that no entry after each split's position was trimmed away
before it was read (`trimming.py`): a DataLossError names the stream, the position and the
first entry still present, unless `set_fail_on_data_loss(False)` (then a warning).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.connectors.base import Boundedness, DataLossError
from tidegate.connectors.redis.connection import RedisConnection
from tidegate.connectors.redis.ids import BEGINNING, id_after, split_finished
from tidegate.connectors.redis.trimming import missing_entries, stream_info

__all__ = [
    "RedisStreamReader",
    "RedisStreamSource",
    "RedisStreamSourceBuilder",
    "RedisStreamSplit",
    "fields_only",
]

#: the longest XREAD BLOCK of one poll (SourceReader.poll_batch must return within ~50 ms)
MAX_BLOCK_MS = 50
#: the entries one XPENDING page acknowledges
ACK_PAGE = 1000
#: how often a reader that caught up with a stream counts its position anew (trimming.py)
OFFSET_COUNT_S = 1.0

log = logging.getLogger(__name__)


def fields_only(stream: str, entry_id: str, fields: dict[Any, Any]) -> Any:
    """The default deserializer: an entry becomes its field/value dict."""
    return fields


@dataclass(frozen=True, slots=True)
class RedisStreamSplit:
    """One stream, read after entry `last_id`; bounded splits end with entry `end_id`. A split
    that has read nothing (`last_id` 0-0) starts with the stream's first entry still present."""

    stream: str
    last_id: str = BEGINNING
    end_id: str | None = None
    #: entries the stream had added up to and including `last_id` (trimming.py; None: not
    #: counted yet)
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """XREADGROUP as `consumer` of `group`, acknowledged on checkpoint completion."""

    group: str
    consumer: str = "tidegate"


@dataclass(frozen=True)
class RedisStreamSource:
    """Reads `streams` (one split each, assigned round-robin to the source subtasks)."""

    streams: tuple[str, ...]
    connection: RedisConnection = RedisConnection()
    starting_ids: dict[str, str] = field(default_factory=dict)
    start_latest: bool = False
    bounded: bool = False
    consumer_group: ConsumerGroup | None = None
    charset: str | None = "utf-8"
    deserializer: Callable[[str, str, dict[Any, Any]], Any] = fields_only
    block_ms: int = 20
    fail_on_data_loss: bool = True

    @property
    def boundedness(self) -> Boundedness:  # type: ignore[override]
        return Boundedness.BOUNDED if self.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    @staticmethod
    def builder() -> RedisStreamSourceBuilder:
        return RedisStreamSourceBuilder()

    def create_splits(self, parallelism: int) -> list[RedisStreamSplit]:
        """One split per stream, in the order given. Where a split starts (`$`: the stream's
        last entry now) and where a bounded one ends are read from the server here: at the
        start of the first attempt (and again if it fails before its first checkpoint)."""
        need_server = self.bounded or self.start_latest
        client = self.connection.open() if need_server else None
        try:
            return [self._plan(stream, client) for stream in self.streams]
        finally:
            if client is not None:
                client.close()

    def _plan(self, stream: str, client: Any) -> RedisStreamSplit:
        info = stream_info(client, stream) if client is not None else None
        offset: int | None = None  # counted from the server when the reader starts
        if stream in self.starting_ids:
            start = self.starting_ids[stream]
        elif self.start_latest and info is not None:
            start, offset = info.last_generated_id, info.entries_added
        else:
            start = BEGINNING
        last = info.last_id if info is not None else None
        end = (last or BEGINNING) if self.bounded else None
        return RedisStreamSplit(stream, start, end, offset)

    def create_reader(
        self, splits: list[RedisStreamSplit], subtask_index: int, parallelism: int
    ) -> RedisStreamReader:
        return RedisStreamReader(self, splits)


class RedisStreamSourceBuilder:
    """PyFlink-style builder of a RedisStreamSource."""

    def __init__(self) -> None:
        self._options: dict[str, Any] = {}
        self._connection = RedisConnection()

    def set_url(self, url: str) -> RedisStreamSourceBuilder:
        self._connection = replace(self._connection, url=url)
        return self

    def set_timeouts(self, socket_s: float, connect_s: float) -> RedisStreamSourceBuilder:
        self._connection = replace(
            self._connection, socket_timeout_s=socket_s, connect_timeout_s=connect_s
        )
        return self

    def set_streams(self, *streams: str) -> RedisStreamSourceBuilder:
        self._options["streams"] = tuple(streams)
        return self

    def set_starting_ids(self, ids: dict[str, str]) -> RedisStreamSourceBuilder:
        """Start these streams after the given entry ids (`0-0`: from the first entry)."""
        self._options["starting_ids"] = dict(ids)
        return self

    def set_start_from_latest(self) -> RedisStreamSourceBuilder:
        """Start after each stream's last entry when the split is first planned."""
        self._options["start_latest"] = True
        return self

    def set_bounded(self) -> RedisStreamSourceBuilder:
        """End each stream at its last entry when the split is first planned."""
        self._options["bounded"] = True
        return self

    def set_consumer_group(
        self, group: str, consumer: str = "tidegate"
    ) -> RedisStreamSourceBuilder:
        """Read as `consumer` of `group` (created if missing) and XACK entries once a
        checkpoint covering them completed."""
        self._options["consumer_group"] = ConsumerGroup(group, consumer)
        return self

    def set_charset(self, charset: str | None) -> RedisStreamSourceBuilder:
        """Decode field names and values with `charset` (None: keep bytes)."""
        self._options["charset"] = charset
        return self

    def set_deserializer(
        self, deserializer: Callable[[str, str, dict[Any, Any]], Any]
    ) -> RedisStreamSourceBuilder:
        """`deserializer(stream, entry_id, fields)` makes the record of an entry."""
        self._options["deserializer"] = deserializer
        return self

    def set_block_ms(self, block_ms: int) -> RedisStreamSourceBuilder:
        """How long one poll waits for new entries (at most MAX_BLOCK_MS)."""
        if not 0 <= block_ms <= MAX_BLOCK_MS:
            raise ValueError(f"block_ms must be within 0..{MAX_BLOCK_MS}, got {block_ms}")
        self._options["block_ms"] = block_ms
        return self

    def set_fail_on_data_loss(self, fail: bool) -> RedisStreamSourceBuilder:
        """Whether a reader fails (True, the default) when entries after its checkpointed
        position were trimmed before it read them, or logs a warning and continues with the
        first entry still present (False)."""
        self._options["fail_on_data_loss"] = fail
        return self

    def build(self) -> RedisStreamSource:
        streams = self._options.get("streams")
        if not streams:
            raise ValueError("a RedisStreamSource needs streams: call set_streams('name', ...)")
        if len(set(streams)) != len(streams):
            raise ValueError(f"streams are named twice: {streams}")
        unknown = set(self._options.get("starting_ids", {})) - set(streams)
        if unknown:
            raise ValueError(f"starting ids for streams that are not read: {sorted(unknown)}")
        return RedisStreamSource(connection=self._connection, **self._options)


class RedisStreamReader:
    """Reads its splits with one XREAD (or XREADGROUP) per poll over all unfinished streams."""

    def __init__(self, source: RedisStreamSource, splits: list[RedisStreamSplit]) -> None:
        self._source = source
        self._client = source.connection.open()
        self._splits = {s.stream: s for s in splits}
        self._finished = {s.stream: s for s in splits if split_finished(s.last_id, s.end_id)}
        for stream in self._finished:
            del self._splits[stream]
        #: when each stream's offset was last set from the server (monotonic seconds)
        self._counted: dict[str, float] = dict.fromkeys(self._splits, time.monotonic())
        try:  # a failure here must not leave the connection open
            for stream, split in list(self._splits.items()):
                self._splits[stream] = self._check_trimmed(split)
                if source.consumer_group is not None:
                    self._rewind_group(self._splits[stream])
        except BaseException:
            self._client.close()
            raise

    def _check_trimmed(self, split: RedisStreamSplit) -> RedisStreamSplit:
        """`split`, checked when the reader starts: entries after its position that the
        stream no longer holds (trimming.py) raise a DataLossError or, with
        fail_on_data_loss False, are logged and skipped. A split that has read nothing
        starts with the first entry present: its offset counts the removed ones."""
        info = stream_info(self._client, split.stream)
        if info is None:  # no stream (yet)
            return split
        if split.last_id == BEGINNING:
            return replace(split, offset=info.entries_added - info.length)
        missing = missing_entries(split.last_id, split.offset, split.end_id, info)
        if not missing:
            return split
        first = info.first_id or "none (the stream is empty)"
        what = (
            f"{missing} entries of Redis stream {split.stream!r} added after this source's "
            f"checkpointed position {split.last_id} were trimmed (XTRIM, XADD MAXLEN/MINID) or "
            f"deleted before it read them; the first entry still present is {first}"
        )
        if self._source.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Trim the stream less (e.g. by the ids a consumer group acknowledged, "
                f"see set_consumer_group) so it keeps what the job has not read; to accept the "
                f"loss and continue with the first entry present, build the source with "
                f"set_fail_on_data_loss(False)"
            )
        log.warning("%s; continuing with it (fail_on_data_loss is off)", what)
        return replace(split, offset=info.entries_added - info.length)

    def _rewind_group(self, split: RedisStreamSplit) -> None:
        """The group delivers from the split's position on: created there if missing, else
        moved there (entries after it are delivered again: the checkpoint decides)."""
        group = self._source.consumer_group
        assert group is not None
        try:
            self._client.xgroup_create(split.stream, group.group, split.last_id, mkstream=True)
        except Exception as e:
            if "BUSYGROUP" not in str(e):
                raise
            self._client.xgroup_setid(split.stream, group.group, split.last_id)

    def poll_batch(self, max_records: int) -> list[Any] | None:
        if not self._splits:
            return None
        count = max(1, max_records // len(self._splits))
        reply = self._read(count)
        records: list[Any] = []
        for raw_stream, entries in _stream_items(reply):
            stream = raw_stream.decode() if isinstance(raw_stream, bytes) else raw_stream
            split = self._splits[stream]
            last, read = split.last_id, 0
            for raw_id, fields in entries:
                entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
                if id_after(entry_id, split.end_id):
                    break
                last = entry_id
                read += 1
                if fields is None:  # deleted (XDEL) after delivery to the group
                    continue
                records.append(self._source.deserializer(stream, entry_id, self._decode(fields)))
            offset = None if split.offset is None else split.offset + read
            self._splits[stream] = split = replace(split, last_id=last, offset=offset)
            if split_finished(split.last_id, split.end_id):
                self._finished[stream] = self._splits.pop(stream)
        if not records:
            self._finish_drained_bounded_splits()
        self._count_caught_up(count, reply)
        return records

    def _count_caught_up(self, count: int, reply: Any) -> None:
        """Every OFFSET_COUNT_S, set the offset of each stream this poll caught up with (it
        returned fewer than `count` entries of it) from XINFO STREAM, if its last generated
        id is still the split's position (trimming.py)."""
        now = time.monotonic()
        returned = {
            (s.decode() if isinstance(s, bytes) else s): len(e) for s, e in _stream_items(reply)
        }
        for stream, split in self._splits.items():
            if returned.get(stream, 0) >= count or now - self._counted[stream] < OFFSET_COUNT_S:
                continue
            self._counted[stream] = now
            info = stream_info(self._client, stream)
            if info is not None and info.last_generated_id == split.last_id:
                self._splits[stream] = replace(split, offset=info.entries_added)

    def _finish_drained_bounded_splits(self) -> None:
        """Bounded splits whose stream holds nothing more up to their end are finished (the
        end entry may have been deleted or trimmed)."""
        for stream, split in list(self._splits.items()):
            if split.end_id is None:
                continue
            after = self._client.xrange(stream, min=f"({split.last_id}", max=split.end_id, count=1)
            if not after:
                self._finished[stream] = self._splits.pop(stream)

    def _read(self, count: int) -> Any:
        streams = list(self._splits)
        block = self._source.block_ms or None
        group = self._source.consumer_group
        if group is None:
            ids = {s: self._splits[s].last_id for s in streams}
            return self._client.xread(ids, count=count, block=block)
        return self._client.xreadgroup(
            group.group, group.consumer, dict.fromkeys(streams, ">"), count=count, block=block
        )

    def _decode(self, fields: dict[Any, Any]) -> dict[Any, Any]:
        charset = self._source.charset
        if charset is None:
            return fields
        return {k.decode(charset): v.decode(charset) for k, v in fields.items()}

    def snapshot_splits(self) -> list[RedisStreamSplit]:
        return [*self._splits.values(), *self._finished.values()]

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        """In consumer-group mode, XACK every pending entry up to each split's checkpointed
        position (a page of XPENDING at a time)."""
        group = self._source.consumer_group
        if group is None:
            return
        for split in splits:
            while True:
                pending = self._client.xpending_range(
                    split.stream, group.group, min="-", max=split.last_id, count=ACK_PAGE
                )
                if not pending:
                    break
                self._client.xack(split.stream, group.group, *[p["message_id"] for p in pending])
                if len(pending) < ACK_PAGE:
                    break

    def close(self) -> None:
        self._client.close()


def _stream_items(reply: Any) -> list[tuple[Any, list]]:
    """XREAD's RESP2 reply (the connection speaks RESP2) as (stream, entries) pairs."""
    return [(stream, entries) for stream, entries in reply or ()]
