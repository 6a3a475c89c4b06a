"""Transactional ids of the exactly-once KafkaSink, as lingering transactions
(`--kafka BOOTSTRAP`). The id is the transactional id `<prefix>-<writer>-<slot>`
(connectors/kafka/transactions.py).

Covered: a committable of a completed checkpoint whose commit marker (the sink's marker group,
sink.py step 3) says it was not committed: its transaction is pre-committed (or was aborted by
the broker's transaction timeout, or fenced). `commit` runs the sink's own committer, which
re-produces the committable's records in a new transaction on that id and commits it with the
marker (idempotent: it checks the marker first). Its age is the time since its checkpoint
completed (the transaction began before).

Uncovered: every other id of the sink's prefix range (each writer index of the committables,
each slot of the largest pool size they record): any of them may hold a transaction a dead
writer left open (records after the last completed checkpoint, which hold back read_committed
consumers until the broker's transaction timeout). Whether one does, the client cannot ask:
confluent-kafka's AdminClient has no ListTransactions / DescribeTransactions. `abort` fences
the id as the sink's recovery does (`init_transactions` on it aborts an open transaction; a
no-op for one without).

The job must not be running: fencing or committing an id it uses breaks its transactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidegate.cli.errors import CliError, one_line
from tidegate.cli.transactions.model import Covered, JobCommittables, LingeringTransaction
from tidegate.connectors.delivery import DeliveryGuarantee
from tidegate.connectors.kafka.sink import KafkaCommittable, KafkaCommitter, KafkaSink
from tidegate.connectors.kafka.transactions import ids_to_fence, prefix_of

__all__ = ["KafkaTransactions", "lingering_kafka"]

KIND = "kafka"
#: how long the broker may take to answer when the command starts
CONNECT_TIMEOUT_S = 10.0


def _by_sink(covered: list[Covered]) -> dict[str, list[Covered]]:
    sinks: dict[str, list[Covered]] = {}
    for c in covered:
        sinks.setdefault(c.uid, []).append(c)
    return sinks


def _prefix(covered: list[Covered]) -> str | None:
    """The sink's id prefix, None if no committable of it holds a transaction."""
    return next((prefix_of(c.committable.txn_id) for c in covered if c.committable.txn_id), None)


def lingering_kafka(
    covered: list[Covered], committed: Callable[[Covered], bool], now_ms: int
) -> list[LingeringTransaction]:
    """The lingering transactional ids of the KafkaSinks whose committables `covered` holds;
    `committed(c)`: whether the marker says `c`'s transaction was committed."""
    found: dict[str, LingeringTransaction] = {}
    for sink in _by_sink(covered).values():
        prefix = _prefix(sink)
        if prefix is None:
            continue
        for c in sink:
            txn_id = c.committable.txn_id
            if txn_id is None or txn_id in found or committed(c):
                continue
            age = round((now_ms - c.completed_ms) / 1000, 1)
            found[txn_id] = LingeringTransaction(
                KIND, txn_id, c.writer, c.checkpoint_id, None, age, c.covered_by, "pre-committed"
            )
        writers = {c.committable.writer_index for c in sink}
        pool_size = max(c.committable.pool_size for c in sink)
        for txn_id in ids_to_fence(prefix, writers, pool_size):
            if txn_id not in found:
                writer = int(txn_id.rsplit("-", 2)[1])
                found[txn_id] = LingeringTransaction(
                    KIND, txn_id, writer, None, None, None, None, "may be open"
                )
    return list(found.values())


def _check_reachable(bootstrap: str) -> None:
    """A clear error if no broker at `bootstrap` answers (early once librdkafka reports every
    broker down)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            admin.list_topics(timeout=0.5)
            return
        except KafkaException as e:
            admin.poll(0)  # serves error_cb
            down = any(err.code() == KafkaError._ALL_BROKERS_DOWN for err in errors)
            if down or time.monotonic() > deadline:
                why = errors[0].str() if errors else e.args[0].str()
                raise CliError(
                    f"cannot reach Kafka at {bootstrap}: {one_line(why)}",
                    "check --kafka (host:port of the sink's bootstrap servers)",
                ) from e


class KafkaTransactions:
    """The transactional ids of the job's exactly-once KafkaSinks, at the brokers
    `bootstrap`."""

    kind = KIND

    def __init__(self, job: JobCommittables, bootstrap: str) -> None:
        _check_reachable(bootstrap)
        self._covered = job.of_type(KafkaCommittable)
        self._committers: dict[str, KafkaCommitter] = {}
        self._sinks: dict[str, KafkaSink] = {}
        for uid, covered in _by_sink(self._covered).items():
            prefix = _prefix(covered)
            if prefix is not None:
                sink = KafkaSink(
                    {"bootstrap.servers": bootstrap},
                    None,  # type: ignore[arg-type]  # no writer: nothing is serialized
                    DeliveryGuarantee.EXACTLY_ONCE,
                    prefix,
                )
                self._sinks[uid], self._committers[uid] = sink, sink.create_committer()

    def _committed(self, c: Covered) -> bool:
        return self._committers[c.uid].is_committed(c.committable)

    def lingering(self) -> list[LingeringTransaction]:
        return lingering_kafka(self._covered, self._committed, int(time.time() * 1000))

    def _pending(self) -> list[Covered]:
        return [c for c in self._covered if c.committable.txn_id is not None]

    def commit(self, t: LingeringTransaction) -> bool:
        mine = [c for c in self._pending() if c.committable.txn_id == t.id]
        todo = [c for c in mine if not self._committed(c)]
        for c in todo:
            self._committers[c.uid].commit([c.committable])
        return bool(todo)

    def abort(self, t: LingeringTransaction) -> bool:
        sink = next(s for s in self._sinks.values() if t.id.startswith(f"{s.prefix}-"))
        sink.fence(t.id)
        return True

    def close(self) -> None:
        pass
