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
and trimming, never for the position), `set_charset` and `set_deserializer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.connectors.base import Boundedness
from tidegate.connectors.redis.connection import RedisConnection
from tidegate.connectors.redis.ids import BEGINNING, id_after, split_finished

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


def fields_only(stream: str, entry_id: str, fields: dict[Any, Any]) -> Any:
    """The default deserializer: an entry becomes its field/value dict."""
    return fields


@dataclass(frozen=True, slots=True)
class RedisStreamSplit:
    """One stream, read after entry `last_id`; bounded splits end with entry `end_id`."""

    stream: str
    last_id: str = BEGINNING
    end_id: str | None = None


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
        last = _last_entry_id(client, stream) if client is not None else None
        if stream in self.starting_ids:
            start = self.starting_ids[stream]
        elif self.start_latest:
            start = last or BEGINNING
        else:
            start = BEGINNING
        end = (last or BEGINNING) if self.bounded else None
        return RedisStreamSplit(stream, start, end)

    def create_reader(
        self, splits: list[RedisStreamSplit], subtask_index: int, parallelism: int
    ) -> RedisStreamReader:
        return RedisStreamReader(self, splits)


def _last_entry_id(client: Any, stream: str) -> str | None:
    """The id of `stream`'s last entry (None: empty or missing)."""
    entries = client.xrevrange(stream, count=1)
    return entries[0][0].decode() if entries else None


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
        if source.consumer_group is not None:
            for split in self._splits.values():
                self._rewind_group(split)

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
            last = split.last_id
            for raw_id, fields in entries:
                entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
                if id_after(entry_id, split.end_id):
                    break
                last = entry_id
                if fields is None:  # deleted (XDEL) after delivery to the group
                    continue
                records.append(self._source.deserializer(stream, entry_id, self._decode(fields)))
            self._splits[stream] = split = replace(split, last_id=last)
            if split_finished(split.last_id, split.end_id):
                self._finished[stream] = self._splits.pop(stream)
        if not records:
            self._finish_drained_bounded_splits()
        return records

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
