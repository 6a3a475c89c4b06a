"""Exactly-once NATS JetStream sink: messages are published on checkpoint completion, each
with a `Nats-Msg-Id` that JetStream deduplicates within the stream's duplicate window.

    sink = (
        NatsJetStreamSink.builder()
        .set_servers("nats://127.0.0.1:4222")
        .set_stream("TOTALS")          # the stream that must capture the subjects
        .set_subject("totals.all")     # or a function of the record
        .build()
    )
    stream.sink_to(sink)

The protocol (steps marked in the code):

1. Buffer: a sink subtask (writer index w) keeps its messages in memory; nothing is published
   before the checkpoint that covers them completes.
2. Pre-commit (checkpoint n): the buffer becomes one `NatsBatch` (job id, w, n, a random
   nonce, the time, the messages), a committable stored in the checkpoint.
3. Commit (n completed, or its batch restored): publish message i of the batch with
   `Nats-Msg-Id: <job>/<w>/<n>/<i>/<nonce>` and the expected stream, and wait for every
   acknowledgement. A batch committed again (after a failure between publishing and the
   notification) is dropped by JetStream as duplicates.

The duplicate window decides: JetStream remembers message ids for the stream's
`duplicate_window` (2 minutes by default). A batch committed again later than that after it
was prepared would be stored twice, so the committer checks the window (when the stream is
set) and logs a warning for such a batch; keep the window longer than the time a restore can
take (failure detection + restart + the checkpoint interval), e.g. `duplicate_window=600`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.nats.connection import NatsClient, NatsConnection

__all__ = ["NatsBatch", "NatsJetStreamSink", "message_id", "outside_window"]

log = logging.getLogger(__name__)


def message_id(job_id: str, writer: int, checkpoint_id: int, index: int, nonce: str) -> str:
    return f"{job_id}/{writer}/{checkpoint_id}/{index}/{nonce}"


def outside_window(prepared_at_s: float, now_s: float, window_s: float) -> bool:
    """Whether a batch prepared at `prepared_at_s` may no longer be deduplicated at `now_s`
    (a window of 0 is unknown: never said to be outside)."""
    return window_s > 0 and now_s - prepared_at_s >= window_s


def utf8(record: Any) -> bytes:
    """The default serializer: bytes as they are, anything else `str(record)` in UTF-8."""
    return record if isinstance(record, bytes) else str(record).encode("utf-8")


@dataclass(frozen=True, slots=True)
class NatsBatch:
    """The messages `(subject, payload)` of one writer index for one checkpoint."""

    job_id: str
    writer: int
    checkpoint_id: int
    nonce: str
    prepared_at_s: float
    messages: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class NatsJetStreamSink:
    subject: str | Callable[[Any], str]
    stream: str | None = None
    serializer: Callable[[Any], bytes] = utf8
    connection: NatsConnection = NatsConnection()
    job_id: str = ""

    @staticmethod
    def builder() -> NatsJetStreamSinkBuilder:
        return NatsJetStreamSinkBuilder()

    def for_job(self, job_id: str) -> NatsJetStreamSink:
        """Message ids name the running job (connectors/base.py UsesJobId)."""
        return replace(self, job_id=job_id)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> NatsWriter:
        if not self.job_id:
            raise RuntimeError("a NatsJetStreamSink runs only inside a job (no job id set)")
        return NatsWriter(self, subtask_index)

    def create_committer(self) -> NatsCommitter:
        return NatsCommitter(self.connection, self.stream)

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Nothing to clean up: writers publish nothing before their batch is committed."""


class NatsWriter:
    """Steps 1-2 for writer index `writer`."""

    def __init__(self, sink: NatsJetStreamSink, writer: int) -> None:
        self._sink = sink
        self._writer = writer
        self._messages: list[tuple[str, bytes]] = []

    def write_batch(self, records: list[Any]) -> None:
        subject, serialize = self._sink.subject, self._sink.serializer
        if isinstance(subject, str):
            self._messages.extend((subject, serialize(r)) for r in records)
        else:
            self._messages.extend((subject(r), serialize(r)) for r in records)

    def prepare_commit(self, checkpoint_id: int) -> list[NatsBatch]:
        messages, self._messages = self._messages, []
        if not messages:
            return []
        nonce = uuid.uuid4().hex[:12]
        batch = NatsBatch(
            self._sink.job_id, self._writer, checkpoint_id, nonce, time.time(), tuple(messages)
        )
        return [batch]

    def close(self) -> None:
        """Unpublished messages are dropped: the restore produces them again."""


class NatsCommitter:
    """Step 3, idempotent within the duplicate window."""

    def __init__(self, connection: NatsConnection, stream: str | None) -> None:
        self._connection = connection
        self._stream = stream
        self._client: NatsClient | None = None
        self._window_s = 0.0

    def commit(self, committables: list[NatsBatch]) -> None:
        if not committables:
            return
        if self._client is None:
            self._client = NatsClient(self._connection)
            if self._stream is not None:
                info = self._client.run(self._client.js.stream_info(self._stream))
                self._window_s = float(info.config.duplicate_window or 0)
        for batch in committables:
            if outside_window(batch.prepared_at_s, time.time(), self._window_s):
                log.warning(
                    "committing NATS batch of job %s writer %d checkpoint %d %.0f s after it "
                    "was prepared, beyond stream %s's duplicate window of %.0f s: if it was "
                    "published before, its messages are now stored twice (raise the stream's "
                    "duplicate_window)",
                    batch.job_id,
                    batch.writer,
                    batch.checkpoint_id,
                    time.time() - batch.prepared_at_s,
                    self._stream,
                    self._window_s,
                )
            self._client.run(self._publish(batch), None)

    async def _publish(self, batch: NatsBatch) -> None:
        js = self._client.js
        futures = []
        for i, (subject, payload) in enumerate(batch.messages):
            msg_id = message_id(batch.job_id, batch.writer, batch.checkpoint_id, i, batch.nonce)
            futures.append(
                await js.publish_async(
                    subject, payload, stream=self._stream, headers={"Nats-Msg-Id": msg_id}
                )
            )
        timeout = self._connection.request_timeout_s
        await asyncio.wait_for(asyncio.gather(*futures), timeout + len(futures) / 1000)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class NatsJetStreamSinkBuilder:
    def __init__(self) -> None:
        self._connection = NatsConnection()
        self._subject: str | Callable[[Any], str] | None = None
        self._stream: str | None = None
        self._serializer: Callable[[Any], bytes] = utf8

    def set_servers(self, servers: str) -> NatsJetStreamSinkBuilder:
        self._connection = replace(self._connection, servers=servers)
        return self

    def set_subject(self, subject: str | Callable[[Any], str]) -> NatsJetStreamSinkBuilder:
        """The subject to publish to: a name, or a function of the record."""
        self._subject = subject
        return self

    def set_stream(self, stream: str) -> NatsJetStreamSinkBuilder:
        """The stream that must store the messages (publishes to subjects it does not capture
        fail) and whose duplicate window the committer checks."""
        self._stream = stream
        return self

    def set_serializer(self, serializer: Callable[[Any], bytes]) -> NatsJetStreamSinkBuilder:
        """Record -> payload bytes (default: UTF-8 of `str(record)`)."""
        self._serializer = serializer
        return self

    def build(self) -> NatsJetStreamSink:
        if self._subject is None:
            raise ValueError("a NatsJetStreamSink needs a subject: call set_subject(subject)")
        return NatsJetStreamSink(self._subject, self._stream, self._serializer, self._connection)
