"""Exactly-once Redis sinks: `RedisStreamSink` (XADD entries) and `RedisKeyValueSink` (SET
strings or HSET hashes, upserts), both by the idempotent batch protocol of `commit.py`.

    sink = (
        RedisStreamSink.builder()
        .set_url("redis://127.0.0.1:6379/0")
        .set_stream("totals")
        .build()
    )
    stream.sink_to(sink)

Records become visible when the checkpoint that covers them completes. A writer keeps the
writes of one checkpoint interval in memory (the key-value sink only the last value per key),
and they are stored in the checkpoint as its committables.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.redis.commit import RedisBatch, RedisBatchCommitter, Write
from tidegate.connectors.redis.connection import RedisConnection

__all__ = [
    "RedisKeyValueSink",
    "RedisSink",
    "RedisStreamSink",
    "as_fields",
]

#: markers older than this expire (seconds): a week
DEFAULT_MARKER_TTL_S = 7 * 24 * 3600
DEFAULT_MARKER_PREFIX = "tidegate:commit"


def as_fields(record: Any) -> dict[Any, Any]:
    """The default stream-entry serializer: a dict as is, anything else as `{"value": str}`."""
    return record if isinstance(record, dict) else {"value": str(record)}


@dataclass(frozen=True)
class StreamWrites:
    """Records -> XADD of `serializer(record)` to `stream` (a name or a function of the
    record), trimmed to about `maxlen` entries if given."""

    stream: str | Callable[[Any], str]
    serializer: Callable[[Any], dict[Any, Any]] = as_fields
    maxlen: int | None = None
    upserts = False

    def writes(self, records: list[Any]) -> list[Write]:
        stream, serialize, maxlen = self.stream, self.serializer, self.maxlen
        if isinstance(stream, str):
            return [("xadd", stream, serialize(r), maxlen) for r in records]
        return [("xadd", stream(r), serialize(r), maxlen) for r in records]


@dataclass(frozen=True)
class KeyValueWrites:
    """Records -> SET key value (`command` "set") or HSET key mapping ("hset")."""

    command: str
    key: Callable[[Any], str]
    value: Callable[[Any], Any]
    upserts = True

    def writes(self, records: list[Any]) -> list[Write]:
        command, key, value = self.command, self.key, self.value
        return [(command, key(r), value(r)) for r in records]


@dataclass(frozen=True)
class RedisSink:
    """A two-phase-commit sink (connectors/base.py) of idempotent Redis batches."""

    records: StreamWrites | KeyValueWrites
    connection: RedisConnection = RedisConnection()
    marker_prefix: str = DEFAULT_MARKER_PREFIX
    marker_ttl_s: int = DEFAULT_MARKER_TTL_S
    job_id: str = ""

    def for_job(self, job_id: str) -> RedisSink:
        """Batches are marked with the running job's id (connectors/base.py UsesJobId)."""
        return replace(self, job_id=job_id)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> RedisSinkWriter:
        if not self.job_id:
            raise RuntimeError("a RedisSink runs only inside a job (its job id is not set)")
        return RedisSinkWriter(self, subtask_index)

    def create_committer(self) -> RedisBatchCommitter:
        return RedisBatchCommitter(self.connection, self.marker_prefix, self.marker_ttl_s)

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Nothing to clean up: writers write nothing before their batch is committed."""


class RedisSinkWriter:
    """Steps 1-2 of commit.py for writer index `writer`."""

    def __init__(self, sink: RedisSink, writer: int) -> None:
        self._sink = sink
        self._writer = writer
        self._list: list[Write] = []
        self._latest: dict[tuple[str, str], Any] = {}  # upserts: (command, key) -> value

    def write_batch(self, records: list[Any]) -> None:
        writes = self._sink.records.writes(records)  # Step 1: buffered
        if not self._sink.records.upserts:
            self._list.extend(writes)
            return
        latest = self._latest
        for command, key, value in writes:
            if command == "hset" and (command, key) in latest:
                latest[(command, key)] = {**latest[(command, key)], **value}
            else:
                latest.pop((command, key), None)  # keep the order of the last writes
                latest[(command, key)] = value

    def prepare_commit(self, checkpoint_id: int) -> list[RedisBatch]:
        # Step 2: the buffer becomes the checkpoint's committable
        writes = self._list or [(c, k, v) for (c, k), v in self._latest.items()]
        self._list, self._latest = [], {}
        if not writes:
            return []
        batch = RedisBatch(
            self._sink.job_id, self._writer, checkpoint_id, uuid.uuid4().hex, tuple(writes)
        )
        return [batch]

    def close(self) -> None:
        """Unwritten records are dropped: the restore re-reads them."""


class RedisStreamSink:
    """PyFlink-style entry point: `RedisStreamSink.builder()...build()` -> RedisSink."""

    @staticmethod
    def builder() -> RedisSinkBuilder:
        return RedisSinkBuilder("stream")


class RedisKeyValueSink:
    """`RedisKeyValueSink.builder().set_string_writes(key_fn, value_fn)` (SET) or
    `.set_hash_writes(key_fn, fields_fn)` (HSET, fields merged) ...`.build()` -> RedisSink."""

    @staticmethod
    def builder() -> RedisSinkBuilder:
        return RedisSinkBuilder("key-value")


class RedisSinkBuilder:
    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._connection = RedisConnection()
        self._records: StreamWrites | KeyValueWrites | None = None
        self._serializer: Callable[[Any], dict[Any, Any]] = as_fields
        self._maxlen: int | None = None
        self._stream: str | Callable[[Any], str] | None = None
        self._marker_prefix = DEFAULT_MARKER_PREFIX
        self._marker_ttl_s = DEFAULT_MARKER_TTL_S

    def set_url(self, url: str) -> RedisSinkBuilder:
        self._connection = replace(self._connection, url=url)
        return self

    def set_stream(self, stream: str | Callable[[Any], str]) -> RedisSinkBuilder:
        """The stream to XADD to: a name, or a function of the record."""
        self._stream = stream
        return self

    def set_serializer(self, serializer: Callable[[Any], dict[Any, Any]]) -> RedisSinkBuilder:
        """Record -> the entry's field/value dict (default `as_fields`)."""
        self._serializer = serializer
        return self

    def set_max_len(self, maxlen: int) -> RedisSinkBuilder:
        """Trim the stream to about `maxlen` entries (XADD MAXLEN ~)."""
        self._maxlen = maxlen
        return self

    def set_string_writes(
        self, key: Callable[[Any], str], value: Callable[[Any], Any]
    ) -> RedisSinkBuilder:
        self._records = KeyValueWrites("set", key, value)
        return self

    def set_hash_writes(
        self, key: Callable[[Any], str], fields: Callable[[Any], dict[Any, Any]]
    ) -> RedisSinkBuilder:
        self._records = KeyValueWrites("hset", key, fields)
        return self

    def set_marker_prefix(self, prefix: str) -> RedisSinkBuilder:
        """Where commit markers live (`<prefix>:<job>:<writer>:<checkpoint>`)."""
        self._marker_prefix = prefix
        return self

    def set_marker_ttl(self, seconds: int) -> RedisSinkBuilder:
        """How long a commit marker is kept: a restore from a snapshot older than this can
        write that snapshot's last batches again."""
        if seconds <= 0:
            raise ValueError(f"marker TTL must be > 0 seconds, got {seconds}")
        self._marker_ttl_s = seconds
        return self

    def build(self) -> RedisSink:
        if self._kind == "stream":
            if self._stream is None:
                raise ValueError("a RedisStreamSink needs a stream: call set_stream(name)")
            records: StreamWrites | KeyValueWrites = StreamWrites(
                self._stream, self._serializer, self._maxlen
            )
        elif self._records is None:
            raise ValueError(
                "a RedisKeyValueSink needs set_string_writes(key, value) or "
                "set_hash_writes(key, fields)"
            )
        else:
            records = self._records
        return RedisSink(records, self._connection, self._marker_prefix, self._marker_ttl_s)
