"""NATS JetStream source: a stream, one split per subject filter, read by an ephemeral
ordered pull consumer (no acknowledgements) from the stream sequence kept in the checkpoint:
a restore, also at another parallelism, resumes after the last message emitted.

    source = (
        NatsJetStreamSource.builder()
        .set_servers("nats://127.0.0.1:4222")
        .set_stream("ORDERS")
        .set_subjects("orders.eu", "orders.us")   # one split each; none: the whole stream
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "orders")

JetStream acknowledgements play no part: the consumers use AckPolicy NONE, are created anew
from the checkpointed sequence whenever a reader starts, and are removed by the server after
`INACTIVE_THRESHOLD_S` without a reader (e.g. after a failure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.base import Boundedness
from tidegate.connectors.nats.connection import NatsClient, NatsConnection

__all__ = [
    "NatsJetStreamReader",
    "NatsJetStreamSource",
    "NatsJetStreamSourceBuilder",
    "NatsSplit",
    "decoded_payload",
]

#: how long one poll waits for messages (SourceReader.poll_batch must return within ~50 ms)
FETCH_TIMEOUT_S = 0.04
#: an ephemeral consumer without a reader for this long is deleted by the server
INACTIVE_THRESHOLD_S = 60.0
#: how often an unbounded split that fetched nothing checks that its consumer still exists
#: (a reader held back longer than INACTIVE_THRESHOLD_S, e.g. by backpressure, lost it)
CONSUMER_CHECK_S = 5.0


def decoded_payload(subject: str, sequence: int, data: bytes) -> Any:
    """The default deserializer: the payload decoded as UTF-8."""
    return data.decode("utf-8")


@dataclass(frozen=True, slots=True)
class NatsSplit:
    """The messages of `stream` matching `subject` (None: all) after sequence `last_seq`;
    a bounded split ends with sequence `end_seq`."""

    stream: str
    subject: str | None
    last_seq: int = 0
    end_seq: int | None = None

    @property
    def split_id(self) -> str:
        return f"{self.stream}/{self.subject or '>'}"

    @property
    def finished(self) -> bool:
        return self.end_seq is not None and self.last_seq >= self.end_seq


@dataclass(frozen=True)
class NatsJetStreamSource:
    stream: str
    subjects: tuple[str, ...] = ()
    connection: NatsConnection = NatsConnection()
    start_sequence: int | None = None  # None: from the first message
    start_latest: bool = False
    bounded: bool = False
    deserializer: Callable[[str, int, bytes], Any] = decoded_payload

    @property
    def boundedness(self) -> Boundedness:  # type: ignore[override]
        return Boundedness.BOUNDED if self.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    @staticmethod
    def builder() -> NatsJetStreamSourceBuilder:
        return NatsJetStreamSourceBuilder()

    def create_splits(self, parallelism: int) -> list[NatsSplit]:
        """One split per subject filter. The stream's last sequence (for `start_latest` and
        the end of a bounded split) is read here: at the start of the first attempt (and
        again if it fails before its first checkpoint)."""
        last = 0
        if self.bounded or self.start_latest:
            client = NatsClient(self.connection)
            try:
                info = client.run(client.js.stream_info(self.stream))
                last = info.state.last_seq
            finally:
                client.close()
        start = last if self.start_latest else max(0, (self.start_sequence or 1) - 1)
        end = last if self.bounded else None
        return [NatsSplit(self.stream, s, start, end) for s in self.subjects or (None,)]

    def create_reader(
        self, splits: list[NatsSplit], subtask_index: int, parallelism: int
    ) -> NatsJetStreamReader:
        return NatsJetStreamReader(self, splits)


class NatsJetStreamSourceBuilder:
    def __init__(self) -> None:
        self._options: dict[str, Any] = {}
        self._connection = NatsConnection()

    def set_servers(self, servers: str) -> NatsJetStreamSourceBuilder:
        self._connection = replace(self._connection, servers=servers)
        return self

    def set_stream(self, stream: str) -> NatsJetStreamSourceBuilder:
        self._options["stream"] = stream
        return self

    def set_subjects(self, *subjects: str) -> NatsJetStreamSourceBuilder:
        """Subject filters (wildcards allowed), one split each; they must not overlap, or a
        message matching two is read twice."""
        self._options["subjects"] = tuple(subjects)
        return self

    def set_start_sequence(self, sequence: int) -> NatsJetStreamSourceBuilder:
        """Start new splits at stream sequence `sequence` (1: the first message)."""
        if sequence < 1:
            raise ValueError(f"stream sequences start at 1, got {sequence}")
        self._options["start_sequence"] = sequence
        return self

    def set_start_from_latest(self) -> NatsJetStreamSourceBuilder:
        """Start new splits after the stream's last message when they are planned."""
        self._options["start_latest"] = True
        return self

    def set_bounded(self) -> NatsJetStreamSourceBuilder:
        """End each split at the stream's last message when it is planned."""
        self._options["bounded"] = True
        return self

    def set_deserializer(
        self, deserializer: Callable[[str, int, bytes], Any]
    ) -> NatsJetStreamSourceBuilder:
        """`deserializer(subject, stream_sequence, payload)` makes the record of a message."""
        self._options["deserializer"] = deserializer
        return self

    def build(self) -> NatsJetStreamSource:
        if not self._options.get("stream"):
            raise ValueError("a NatsJetStreamSource needs a stream: call set_stream(name)")
        subjects = self._options.get("subjects", ())
        if len(set(subjects)) != len(subjects):
            raise ValueError(f"subjects are named twice: {subjects}")
        return NatsJetStreamSource(connection=self._connection, **self._options)


class NatsJetStreamReader:
    """Fetches from one ephemeral pull consumer per unfinished split, all at once per poll."""

    def __init__(self, source: NatsJetStreamSource, splits: list[NatsSplit]) -> None:
        self._source = source
        self._splits = {s.split_id: s for s in splits}
        self._subs: dict[str, Any] = {}
        #: consumer sequence of the last message received, per split (its consumer's count)
        self._received: dict[str, int] = {}
        #: when each split last made sure its consumer exists (monotonic seconds)
        self._checked: dict[str, float] = {}
        self._client = (
            NatsClient(source.connection) if any(not s.finished for s in splits) else None
        )
        if self._client is not None:
            for split in splits:
                if not split.finished:
                    self._start_consumer(split)

    async def _subscribe(self, split: NatsSplit) -> Any:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=split.last_seq + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=INACTIVE_THRESHOLD_S,
            mem_storage=True,
            num_replicas=1,
        )
        # the subject passed becomes the consumer's filter ("": every subject of the stream)
        return await self._client.js.pull_subscribe(
            split.subject or "", stream=split.stream, config=config
        )

    def poll_batch(self, max_records: int) -> list[Any] | None:
        if not self._subs:
            return None
        count = max(1, max_records // len(self._subs))
        fetched = self._client.run(self._fetch_all(count))
        records: list[Any] = []
        deserialize = self._source.deserializer
        for split_id, messages in fetched.items():
            split = self._splits[split_id]
            last, beyond_end = split.last_seq, False
            for msg in messages:
                self._received[split_id] = msg.metadata.sequence.consumer
                seq = msg.metadata.sequence.stream
                if split.end_seq is not None and seq > split.end_seq:
                    beyond_end = True
                    break
                if seq > last:  # (a message delivered twice is skipped)
                    last = seq
                    records.append(deserialize(msg.subject, seq, msg.data))
            split = self._splits[split_id] = replace(split, last_seq=last)
            if split.finished or beyond_end or (not messages and self._drained(split)):
                self._finish(split_id)
        return records

    def _start_consumer(self, split: NatsSplit) -> None:
        """A new consumer for `split`, delivering from the message after its position."""
        self._subs[split.split_id] = self._client.run(self._subscribe(split))
        self._received[split.split_id] = 0
        self._checked[split.split_id] = time.monotonic()

    def _consumer_info(self, split: NatsSplit) -> Any | None:
        """The info of the split's consumer; None if the server deleted it (inactive), in
        which case a new one is started at the split's position."""
        from nats.js.errors import NotFoundError

        self._checked[split.split_id] = time.monotonic()
        try:
            return self._client.run(self._subs[split.split_id].consumer_info())
        except NotFoundError:
            self._start_consumer(split)
            return None

    async def _fetch_all(self, count: int) -> dict[str, list[Any]]:
        from nats.errors import TimeoutError as NatsTimeoutError

        async def fetch(sub: Any) -> list[Any]:
            try:
                return await sub.fetch(count, timeout=FETCH_TIMEOUT_S)
            except (TimeoutError, NatsTimeoutError):
                return []

        ids = list(self._subs)
        results = await asyncio.gather(*(fetch(self._subs[i]) for i in ids))
        return dict(zip(ids, results, strict=True))

    def _drained(self, split: NatsSplit) -> bool:
        """Whether a split that fetched nothing is finished: bounded, its consumer has
        nothing pending and delivered nothing this reader has not received (the consumer's
        delivered *stream* sequence runs ahead over messages of other subjects, so its count
        of delivered messages is compared). An unbounded one is never finished, but checks
        every CONSUMER_CHECK_S that its consumer still exists."""
        if split.end_seq is None:
            if time.monotonic() - self._checked[split.split_id] >= CONSUMER_CHECK_S:
                self._consumer_info(split)
            return False
        info = self._consumer_info(split)
        return info is not None and (
            info.num_pending == 0 and info.delivered.consumer_seq <= self._received[split.split_id]
        )

    def _finish(self, split_id: str) -> None:
        sub = self._subs.pop(split_id)
        split = self._splits[split_id]
        if split.end_seq is not None:
            self._splits[split_id] = replace(split, last_seq=max(split.last_seq, split.end_seq))
        self._client.run(sub.unsubscribe())

    def snapshot_splits(self) -> list[NatsSplit]:
        return list(self._splits.values())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
