"""The exactly-once commit protocol of the Redis sinks (steps marked in the code):

1. Buffer: a sink subtask (writer index w) keeps the writes of its records in memory; nothing
   reaches Redis before the checkpoint that covers them completes.
2. Pre-commit (`prepare_commit`, checkpoint n): the buffer becomes one `RedisBatch` (job id,
   w, n, a random nonce, the writes), a committable stored in the checkpoint.
3. Commit (checkpoint n completed, or its batch restored): WATCH the batch's marker key
   `<prefix>:<job>:<w>:<n>:<nonce>`; if it exists the batch was committed before: skip it.
   Else MULTI, the writes, SET marker (with the marker TTL), EXEC; a concurrent commit of
   the same batch (a zombie of an earlier attempt) sets the marker, fails this EXEC, and the
   decision is taken again.

The nonce tells apart batches under the same (job, writer, checkpoint): those of several
Redis sinks of one job, and another run's (a job restored twice from one snapshot with a
fixed `pipeline.job-id`). Markers expire after the TTL (bounded growth): restoring a snapshot
older than the TTL can write its last batches again. The marker and the written keys are in
one transaction, so on a Redis Cluster they must hash to one slot (a `{hash tag}` in the
marker prefix and the keys).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tidegate.connectors.redis.connection import RedisConnection

#: one write: ("xadd", stream, fields, maxlen or None), ("set", key, value) or
#: ("hset", key, mapping)
Write = tuple


class CommitDecision(enum.Enum):
    WRITE = "write"
    SKIP = "skip"


def commit_decision(marker_exists: bool) -> CommitDecision:
    """Step 3's decision: a batch whose marker exists was committed."""
    return CommitDecision.SKIP if marker_exists else CommitDecision.WRITE


@dataclass(frozen=True, slots=True)
class RedisBatch:
    """The writes of one writer index for one checkpoint (a committable)."""

    job_id: str
    writer: int
    checkpoint_id: int
    nonce: str
    writes: tuple[Write, ...]


def marker_key(prefix: str, batch: RedisBatch) -> str:
    return f"{prefix}:{batch.job_id}:{batch.writer}:{batch.checkpoint_id}:{batch.nonce}"


def apply_writes(pipe: Any, writes: tuple[Write, ...]) -> None:
    """Queue `writes` on a redis-py pipeline (inside MULTI)."""
    for write in writes:
        match write:
            case ("xadd", stream, fields, maxlen):
                pipe.xadd(stream, fields, maxlen=maxlen, approximate=maxlen is not None)
            case ("set", key, value):
                pipe.set(key, value)
            case ("hset", key, mapping):
                pipe.hset(key, mapping=mapping)
            case _:
                raise ValueError(f"unknown Redis sink write {write!r}")


class RedisBatchCommitter:
    """Step 3 for every committable, idempotently (Committer)."""

    def __init__(self, connection: RedisConnection, prefix: str, marker_ttl_s: int) -> None:
        self._connection = connection
        self._prefix = prefix
        self._ttl_s = marker_ttl_s
        self._client: Any = None

    def commit(self, committables: list[RedisBatch]) -> None:
        if not committables:
            return
        if self._client is None:
            self._client = self._connection.open()
        for batch in committables:
            self._commit_one(batch)

    def _commit_one(self, batch: RedisBatch) -> None:
        import redis

        key = marker_key(self._prefix, batch)  # Step 3
        with self._client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    if commit_decision(pipe.exists(key) > 0) is CommitDecision.SKIP:
                        pipe.unwatch()
                        return
                    pipe.multi()
                    apply_writes(pipe, batch.writes)
                    pipe.set(key, 1, ex=self._ttl_s)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue  # the marker changed meanwhile: decide again
                except redis.ResponseError as e:
                    raise RuntimeError(
                        f"Redis refused a write of the batch of job {batch.job_id}, writer "
                        f"{batch.writer}, checkpoint {batch.checkpoint_id}: {e}. Redis "
                        f"transactions do not roll back, so its other writes and its marker "
                        f"{key} were applied; fix what the sink writes (e.g. a key of another "
                        f"type) before the job writes to it again"
                    ) from e

    def close(self) -> None:
        """Called when the sink operator closes (runtime/connector_operators.py)."""
        if self._client is not None:
            self._client.close()
            self._client = None
