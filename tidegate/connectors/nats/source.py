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

JetStream acknowledgements play no part in the position: the consumers that read use AckPolicy
NONE, are created anew from the checkpointed sequence whenever a reader starts, and are removed
by the server after `INACTIVE_THRESHOLD_S` without a reader (e.g. after a failure). An optional
durable consumer per split (`set_durable_consumer`, `progress.py`) is acknowledged up to each
completed checkpoint's sequence, for monitoring only.

When a reader starts, it checks that the stream still holds the messages after each split's
position: messages removed by the stream's limits before they were read fail the reader with
a DataLossError (or, with `set_fail_on_data_loss(False)`, are skipped after a warning).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.base import Boundedness, DataLossError
from tidegate.connectors.nats.connection import NatsClient, NatsConnection
from tidegate.connectors.nats.progress import ProgressConsumer, check_durable_base, durable_name

__all__ = [
    "NatsJetStreamReader",
    "NatsJetStreamSource",
    "NatsJetStreamSourceBuilder",
    "NatsSplit",
    "decoded_payload",
    "removed_range",
]

log = logging.getLogger(__name__)

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


def removed_range(split: NatsSplit, first_seq: int) -> tuple[int, int] | None:
    """The sequences after `split`'s position (up to its end) that a stream whose first
    message is `first_seq` no longer holds (None: nothing is missing). A split that has read
    nothing from the first message on (position 0) starts with the first message present."""
    if split.last_seq == 0:
        return None
    last = first_seq - 1 if split.end_seq is None else min(first_seq - 1, split.end_seq)
    return (split.last_seq + 1, last) if last > split.last_seq else None


@dataclass(frozen=True)
class NatsJetStreamSource:
    stream: str
    subjects: tuple[str, ...] = ()
    connection: NatsConnection = NatsConnection()
    start_sequence: int | None = None  # None: from the first message
    start_latest: bool = False
    bounded: bool = False
    deserializer: Callable[[str, int, bytes], Any] = decoded_payload
    durable_consumer: str | None = None
    fail_on_data_loss: bool = True

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

    def set_durable_consumer(self, name: str) -> NatsJetStreamSourceBuilder:
        """Keep a durable consumer per split (`name`, or `name_<subject>` with `.*>` replaced
        by `_+#`), acknowledged up to each completed checkpoint: for monitoring only (its ack
        floor and pending count show the job's progress), never for the position."""
        check_durable_base(name)
        self._options["durable_consumer"] = name
        return self

    def set_fail_on_data_loss(self, fail: bool) -> NatsJetStreamSourceBuilder:
        """Whether a reader fails (True, the default) when messages after its checkpointed
        position were removed by the stream's limits before it read them, or logs a warning
        and continues with the first message still present (False)."""
        self._options["fail_on_data_loss"] = fail
        return self

    def build(self) -> NatsJetStreamSource:
        if not self._options.get("stream"):
            raise ValueError("a NatsJetStreamSource needs a stream: call set_stream(name)")
        subjects = self._options.get("subjects", ())
        if len(set(subjects)) != len(subjects):
            raise ValueError(f"subjects are named twice: {subjects}")
        durable = self._options.get("durable_consumer")
        if durable is not None:
            names = [durable_name(durable, s) for s in subjects or (None,)]
            if len(set(names)) != len(names):
                raise ValueError(
                    f"subjects {subjects} give durable consumers of one name {names}: "
                    f"name subjects that differ in more than '.', '*', '>' vs '_', '+', '#'"
                )
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
        #: the durable consumers acknowledged on checkpoint completion (set_durable_consumer)
        self._progress: dict[str, ProgressConsumer] = {}
        reading = [s for s in splits if not s.finished]
        self._client = NatsClient(source.connection) if reading else None
        if self._client is None:
            return
        try:  # a failure here must not leave the client open
            streams = {s.stream for s in reading}
            first_seqs = {name: self._first_seq(name) for name in streams}
            for split in reading:
                split = self._skip_removed(split, first_seqs[split.stream])
                self._splits[split.split_id] = split
                self._start_consumer(split)
                if source.durable_consumer is not None:
                    self._start_progress(split, source.durable_consumer)
        except BaseException:
            try:
                self.close()
            except Exception:  # the start's failure is the one to report
                log.exception("could not close the NATS client of a reader that failed to start")
            raise

    def _first_seq(self, stream: str) -> int:
        from nats.js.errors import NotFoundError

        try:
            return self._client.run(self._client.js.stream_info(stream)).state.first_seq
        except NotFoundError:
            raise LookupError(
                f"NATS JetStream has no stream {stream!r} on {self._source.connection.servers}: "
                f"create it (e.g. `nats stream add`) or name an existing one in set_stream"
            ) from None

    def _skip_removed(self, split: NatsSplit, first_seq: int) -> NatsSplit:
        """`split`, checked against the stream's first sequence when the reader starts:
        messages after its position that the stream no longer holds raise a DataLossError, or
        (fail_on_data_loss False) are logged and skipped."""
        removed = removed_range(split, first_seq)
        if removed is None:
            return split
        where = f"stream {split.stream}" + (f" (subject {split.subject})" if split.subject else "")
        what = (
            f"messages {removed[0]}..{removed[1]} of {where} were removed (the stream's limits "
            f"max_age, max_msgs or max_bytes, or a purge) before this source read them: its "
            f"checkpointed position is sequence {split.last_seq}, the first message still "
            f"present is sequence {first_seq}"
        )
        if split.subject is not None:
            what += " (some of the removed messages may have been of other subjects)"
        if self._source.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Give the stream limits that keep what the job has not read yet; to "
                f"accept the loss and continue with sequence {first_seq}, build the source with "
                f"set_fail_on_data_loss(False)"
            )
        log.warning("%s; continuing with sequence %d (fail_on_data_loss is off)", what, first_seq)
        return replace(split, last_seq=removed[1])

    def _start_progress(self, split: NatsSplit, base: str) -> None:
        name = durable_name(base, split.subject)
        start = ProgressConsumer.start(
            self._client.js, split.stream, name, split.subject, split.last_seq
        )
        self._progress[split.split_id] = self._client.run(start)

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
        """Whether a split that fetched nothing is finished: bounded, and its consumer caught
        up (`_caught_up`). An unbounded one is never finished, but checks every
        CONSUMER_CHECK_S that its consumer still exists, and when it caught up moves the
        split's position to the consumer's delivered stream sequence: that runs ahead over
        messages of other subjects, so a quiet subject's position follows the stream (and the
        check for removed messages at the next start does not mistake those for its own)."""
        if split.end_seq is None:
            if time.monotonic() - self._checked[split.split_id] >= CONSUMER_CHECK_S:
                info = self._consumer_info(split)
                if info is not None and self._caught_up(split, info):
                    scanned = max(split.last_seq, info.delivered.stream_seq)
                    self._splits[split.split_id] = replace(split, last_seq=scanned)
            return False
        info = self._consumer_info(split)
        return info is not None and self._caught_up(split, info)

    def _caught_up(self, split: NatsSplit, info: Any) -> bool:
        """The consumer has nothing pending and delivered nothing this reader has not received
        (its count of delivered messages is compared: its delivered stream sequence runs
        ahead over messages of other subjects)."""
        return (
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

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        """With a durable consumer, acknowledge each split's durable consumer up to the
        checkpoint's sequence (monitoring only: a failure is logged, the job goes on)."""
        for split in splits:
            progress = self._progress.get(split.split_id)
            if progress is None:
                continue
            try:
                self._client.run(progress.ack_through(split.last_seq))
            except Exception as e:
                log.warning(
                    "could not acknowledge the durable consumer of %s up to sequence %d "
                    "(checkpoint %d): %r",
                    split.split_id,
                    split.last_seq,
                    checkpoint_id,
                    e,
                )

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()
