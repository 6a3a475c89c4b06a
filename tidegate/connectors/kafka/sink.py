"""Kafka sink (PyFlink's KafkaSink) with DeliveryGuarantee NONE, AT_LEAST_ONCE, EXACTLY_ONCE.

NONE: records are produced as they come; nothing is awaited at checkpoints.
AT_LEAST_ONCE: `prepare_commit` flushes the producer and fails the checkpoint (and the job) if
a record was not acknowledged, so a completed checkpoint covers only written records; a restart
writes the records after the checkpoint again (duplicates possible).

Every guarantee writes each record with its stream record's timestamp as the Kafka timestamp
(as Flink's KafkaRecordSerializationSchema; records without one get the producer's time).

EXACTLY_ONCE, per sink subtask (writer index k, transactional ids `<prefix>-<k>-<slot>`,
transactions.py):

1. Write: the first record after a checkpoint begins a transaction on a free slot's producer;
   records are produced into it, and kept (serialized) for step 4.
2. Pre-commit (`prepare_commit(n)`, synchronous phase of checkpoint n): flush; any delivery
   error fails the checkpoint. The committable is (id, k, n, the records); the producer with its
   open transaction stays alive in this process until step 3.
3. Commit (`Committer.commit`, when checkpoint n completed, in checkpoint order): in the
   transaction, commit the offset n for the writer instance's marker group
   (`send_offsets_to_transaction`; one group per writer instance, transactions.py), then
   commit it. The records and the marker become visible atomically, and the marker only grows.
4. Recover (a restore: `Sink.recover`, then `commit` of the restored committables): fence
   every id of the writer indexes this subtask takes over (`init_transactions` aborts a
   transaction left open by a dead process), every slot up to the largest pool size of this
   run and the restored one (the committables record it: a restore with a smaller
   `transaction.pool.size` or fewer writers still fences every id the old run used), then for
   each restored committable ask its marker group: if its offset is n or more, n was
   committed: nothing to do (idempotent); else re-produce its records in a new transaction on
   the same id, with the marker, and commit.

Why the records are kept in the committable. Flink commits a
transaction after a restore by resuming it with its producer id and epoch; confluent-kafka
(librdkafka) cannot resume a transaction it did not start, and `init_transactions` on its id
aborts it. A pre-committed transaction of checkpoint n that was not committed before a crash
(the crash fell between the completion of n and the commit) cannot be committed by the new
process, and its records are not replayed by the sources either: the restore rewinds them to
checkpoint n, which is after those records. So the only way to keep them is to have them in
the checkpoint: the committable carries the serialized records, and recovery re-produces them
exactly once (the marker, committed atomically with the transaction, tells whether the
original commit happened). Cost: the checkpoint holds every record written between two
checkpoints (each subtask's share). Records of checkpoints that did not complete are in
transactions that are aborted (fenced) on restore; the sources replay them.

A transaction must not outlive `transaction.timeout.ms` (the broker aborts it): the writer
fails with an error naming the property if a transaction stayed open longer, i.e. if
checkpoints are further apart than the timeout allows.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tidegate.connectors.base import writer_subtask
from tidegate.connectors.delivery import DeliveryGuarantee
from tidegate.connectors.kafka.records import KafkaRecordSerializationSchema, ProducerRecord
from tidegate.connectors.kafka.transactions import (
    ids_to_fence,
    marker_group,
    taken_over_indexes,
    transactional_id,
)

__all__ = ["KafkaCommittable", "KafkaSink", "KafkaSinkBuilder"]

log = logging.getLogger(__name__)

#: how long closing a writer waits for its open transaction to be aborted
ABORT_TIMEOUT_S = 5.0
#: transactions a writer may have pre-committed and not yet committed, plus the open one
DEFAULT_POOL_SIZE = 5
#: Kafka's producer default (ms); the broker caps it at transaction.max.timeout.ms
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
FLUSH_TIMEOUT_S = 60.0
_SINK_KEYS = ("transaction.pool.size",)

#: the producers (by transactional id) whose transaction is pre-committed and waits for the
#: committer, in this process: the writer hands them over in step 2, the committer takes them
_PRECOMMITTED: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class KafkaCommittable:
    """A pre-committed transaction (`records` empty and `txn_id` None: nothing was written).
    Every writer makes one at every checkpoint, so a restore knows each writer index of the
    restored run and its `pool_size` (the ids `<prefix>-<writer_index>-<slot < pool_size>` it
    may have left transactions open on)."""

    writer_index: int
    checkpoint_id: int
    txn_id: str | None
    marker_group: str | None
    marker_topic: str | None
    records: tuple[ProducerRecord, ...]
    pool_size: int


class KafkaSink:
    """Writes records to Kafka. Build with `KafkaSink.builder()`."""

    def __init__(
        self,
        properties: dict[str, str],
        serializer: KafkaRecordSerializationSchema,
        guarantee: DeliveryGuarantee,
        prefix: str | None,
    ) -> None:
        self.properties = properties
        self.serializer = serializer
        self.guarantee = guarantee
        self.prefix = prefix
        self.pool_size = int(properties.get("transaction.pool.size", DEFAULT_POOL_SIZE))

    @staticmethod
    def builder() -> KafkaSinkBuilder:
        return KafkaSinkBuilder()

    def producer_config(self, **extra: Any) -> dict[str, Any]:
        config: dict[str, Any] = {k: v for k, v in self.properties.items() if k not in _SINK_KEYS}
        if self.guarantee is not DeliveryGuarantee.NONE:
            config.setdefault("enable.idempotence", True)
        config.update(extra)
        return config

    @property
    def transaction_timeout_ms(self) -> int:
        return int(self.properties.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))

    def check_checkpoint_interval(self, interval_ms: int | None) -> None:
        """On submission (connectors/base.py ChecksCheckpointing): an EXACTLY_ONCE sink's
        transactions stay open for a checkpoint interval at least, so the interval must be
        below `transaction.timeout.ms` (the broker aborts older transactions)."""
        if self.guarantee is not DeliveryGuarantee.EXACTLY_ONCE or interval_ms is None:
            return
        timeout = self.transaction_timeout_ms
        if interval_ms >= timeout:
            raise ValueError(
                f"the checkpoint interval ({interval_ms} ms) is not below the EXACTLY_ONCE "
                f"KafkaSink's transaction.timeout.ms ({timeout} ms): the broker would abort "
                "its transactions before their checkpoints complete. Checkpoint more often, or "
                "set_property('transaction.timeout.ms', ...) on the sink well above the "
                "interval (at most the broker's transaction.max.timeout.ms)"
            )

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> Any:
        if self.guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            return TransactionalWriter(self, subtask_index)
        return PlainWriter(self)

    def create_committer(self) -> KafkaCommitter:
        return KafkaCommitter(self)

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Step 4, first half: fence every transactional id of the writer indexes this subtask
        takes over (aborting transactions a dead writer left open); the runtime then commits
        `restored` (the committer re-produces what was not committed)."""
        if self.guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        indexes = taken_over_indexes(subtask_index, parallelism, (c.writer_index for c in restored))
        assert all(writer_subtask(k, parallelism) == subtask_index for k in indexes)
        pool_size = max([self.pool_size, *(c.pool_size for c in restored)])
        for txn_id in ids_to_fence(self.prefix, indexes, pool_size):
            _PRECOMMITTED.pop(txn_id, None)  # of an earlier attempt in this (reused) process
            self.fence(txn_id)

    def fence(self, txn_id: str) -> None:
        """Abort the transaction a dead producer left open on `txn_id`, if any
        (`init_transactions` bumps the id's epoch; a no-op for an id without one). Called by
        `recover`, and by `tidegate transactions abort`."""
        from confluent_kafka import Producer

        Producer(self.producer_config(**{"transactional.id": txn_id})).init_transactions(30)

    def __repr__(self) -> str:
        return f"KafkaSink({self.guarantee.name}, prefix={self.prefix!r})"


def _check_delivery(errors: list[str]) -> None:
    if errors:
        raise RuntimeError(
            f"Kafka did not acknowledge {len(errors)} record(s); first error: {errors[0]}"
        )


class PlainWriter:
    """NONE and AT_LEAST_ONCE (see the module docstring)."""

    def __init__(self, sink: KafkaSink) -> None:
        from confluent_kafka import Producer

        self._sink = sink
        self._errors: list[str] = []
        self._producer = Producer(sink.producer_config())

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def write_batch(self, records: list[Any]) -> None:
        _check_delivery(self._errors)
        _produce_all(self._producer, _serialized(self._sink.serializer, records), self._on_delivery)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if self._sink.guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            _flush(self._producer)
        _check_delivery(self._errors)
        return []

    def close(self) -> None:
        self._producer.flush(FLUSH_TIMEOUT_S)


def _serialized(serializer: KafkaRecordSerializationSchema, records: list[Any]) -> Any:
    """The ProducerRecords of a batch, each with its stream record's timestamp if the batch
    has timestamps (a runtime TimestampedBatch: a list with a parallel `timestamps`)."""
    timestamps = None if type(records) is list else getattr(records, "timestamps", None)
    if timestamps is None:
        return map(serializer.serialize, records)
    return map(serializer.serialize, records, timestamps)


def _produce_all(producer: Any, records: Any, on_delivery: Any) -> list[ProducerRecord]:
    """Produce every record (waiting for room when the local queue is full)."""
    written = []
    for r in records:
        kwargs: dict[str, Any] = {"key": r.key, "on_delivery": on_delivery}
        if r.headers:
            kwargs["headers"] = list(r.headers)
        if r.partition is not None:
            kwargs["partition"] = r.partition
        if r.timestamp is not None:
            kwargs["timestamp"] = r.timestamp
        while True:
            try:
                producer.produce(r.topic, r.value, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        written.append(r)
    producer.poll(0)
    return written


def _flush(producer: Any) -> None:
    try:
        left = producer.flush(FLUSH_TIMEOUT_S)
    except SystemError as e:
        raise _fatal_error(e) from None
    if left:
        raise RuntimeError(
            f"{left} record(s) not delivered to Kafka within {FLUSH_TIMEOUT_S:g} s of a checkpoint"
        )


def _fatal_error(e: SystemError) -> Exception:
    """The error to raise for the SystemError confluent-kafka raises from `flush` when the
    producer has a fatal error (fenced by a newer instance: the KafkaException is its cause).
    confluent-kafka keeps a reference to that SystemError for good, so its traceback would keep
    the raising frames alive, and with them the producer and its connections: the leaked
    errors lose their tracebacks, and a new KafkaException with the same KafkaError is raised."""
    from confluent_kafka import KafkaException

    cause = e.__cause__ or e.__context__
    e.__traceback__ = None
    if isinstance(cause, KafkaException):
        cause.__traceback__ = None
        return KafkaException(*cause.args)
    return RuntimeError(f"the Kafka producer failed: {e}")


class TransactionalWriter:
    """EXACTLY_ONCE, steps 1 and 2 (see the module docstring)."""

    def __init__(self, sink: KafkaSink, subtask_index: int) -> None:
        self._sink = sink
        self._index = subtask_index
        self._producers: dict[int, Any] = {}  # slot -> its producer (initialised once)
        self._slot: int | None = None  # the slot of the open transaction
        self._records: list[ProducerRecord] = []
        self._began = 0.0
        self._errors: list[str] = []
        self._marker = marker_group(sink.prefix, subtask_index, uuid.uuid4().hex[:12])
        # Every id of the pool is initialised now, while this attempt is surely current: a
        # writer of a failed attempt that lingers (its slot not yet stopped) can then only use
        # producers the next attempt's `recover` fenced. Were an id first initialised later,
        # after that fence, it would take the newest epoch and could leave a transaction open
        # that nothing aborts, stalling read_committed consumers.
        for slot in range(sink.pool_size):
            txn_id = transactional_id(sink.prefix, subtask_index, slot)
            if txn_id not in _PRECOMMITTED:
                self._producers[slot] = self._new_producer(txn_id)

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def _new_producer(self, txn_id: str) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            self._sink.producer_config(
                **{
                    "transactional.id": txn_id,
                    "transaction.timeout.ms": self._sink.transaction_timeout_ms,
                }
            )
        )
        producer.init_transactions(30)
        return producer

    def _begin(self) -> Any:
        prefix = self._sink.prefix
        for slot in range(self._sink.pool_size):
            txn_id = transactional_id(prefix, self._index, slot)
            if txn_id in _PRECOMMITTED:
                continue
            producer = self._producers.get(slot)
            if producer is None:  # an id an earlier attempt in this process had pre-committed
                producer = self._producers[slot] = self._new_producer(txn_id)
            producer.begin_transaction()
            self._slot, self._began = slot, time.monotonic()
            return producer
        raise RuntimeError(
            f"all {self._sink.pool_size} transactional ids of Kafka sink writer {self._index} "
            "hold pre-committed transactions whose checkpoints have not completed: raise the "
            "sink property 'transaction.pool.size' (or let checkpoints complete)"
        )

    def _check_age(self) -> None:
        age_ms = (time.monotonic() - self._began) * 1000
        timeout = self._sink.transaction_timeout_ms
        if age_ms > timeout:
            raise RuntimeError(
                f"a Kafka transaction of sink writer {self._index} stayed open {age_ms:.0f} ms, "
                f"longer than transaction.timeout.ms = {timeout}: the broker has aborted it. "
                "Checkpoint more often than the transaction timeout (its interval must be well "
                "below it), or raise 'transaction.timeout.ms' on the sink (up to the broker's "
                "transaction.max.timeout.ms)"
            )

    def write_batch(self, records: list[Any]) -> None:
        _check_delivery(self._errors)
        if not records:
            return
        if self._slot is None:
            producer = self._begin()
        else:
            producer = self._producers[self._slot]
            self._check_age()
        serialized = _serialized(self._sink.serializer, records)
        self._records.extend(_produce_all(producer, serialized, self._on_delivery))

    def prepare_commit(self, checkpoint_id: int) -> list[KafkaCommittable]:
        pool_size = self._sink.pool_size
        if self._slot is None:
            return [KafkaCommittable(self._index, checkpoint_id, None, None, None, (), pool_size)]
        producer = self._producers[self._slot]
        self._check_age()
        _flush(producer)
        _check_delivery(self._errors)
        txn_id = transactional_id(self._sink.prefix, self._index, self._slot)
        records = tuple(self._records)
        _PRECOMMITTED[txn_id] = producer
        self._slot, self._records = None, []
        return [
            KafkaCommittable(
                self._index,
                checkpoint_id,
                txn_id,
                self._marker,
                records[0].topic,
                records,
                pool_size,
            )
        ]

    def close(self) -> None:
        """Abort the open transaction (records after the last checkpoint: a restore replays
        them), so it does not hold back read_committed consumers until it times out.
        Pre-committed transactions stay: a restore fences them (and re-produces those of
        completed checkpoints), or the broker aborts them after transaction.timeout.ms."""
        from confluent_kafka import KafkaException

        if self._slot is not None:
            try:
                self._producers[self._slot].abort_transaction(ABORT_TIMEOUT_S)
            except KafkaException as e:  # closing after a failure: the broker may be gone
                log.warning(
                    "Kafka sink writer %d could not abort its open transaction (a restore "
                    "fences it, or the broker aborts it after transaction.timeout.ms): %s",
                    self._index,
                    e,
                )
            self._slot = None
        self._producers.clear()
        self._records = []


class KafkaCommitter:
    """EXACTLY_ONCE, steps 3 and 4 (no-op for the other guarantees: they have no
    committables)."""

    def __init__(self, sink: KafkaSink) -> None:
        self._sink = sink
        self._group_metadata: dict[str, Any] = {}  # marker group -> its metadata

    def commit(self, committables: list[Any]) -> None:
        for c in sorted(committables, key=lambda c: c.checkpoint_id):
            if c.txn_id is None:
                continue
            producer = _PRECOMMITTED.pop(c.txn_id, None)
            if producer is not None:
                self._commit(producer, c)
            elif not self.is_committed(c):
                self._reproduce(c)

    def is_committed(self, c: KafkaCommittable) -> bool:
        """Whether the marker group says checkpoint `c.checkpoint_id` was committed on its id
        (also asked by `tidegate transactions list`)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self._sink.properties["bootstrap.servers"],
                "group.id": c.marker_group,
                "enable.auto.commit": False,
                # librdkafka then asks for stable offsets only (KIP-447): an offset of a
                # transaction still open is not an answer, its outcome is awaited
                "isolation.level": "read_committed",
            }
        )
        try:
            tp = consumer.committed([TopicPartition(c.marker_topic, 0)], timeout=30)[0]
        finally:
            consumer.close()
        return tp.offset >= c.checkpoint_id

    def _reproduce(self, c: KafkaCommittable) -> None:
        from confluent_kafka import Producer

        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        producer = Producer(self._sink.producer_config(**{"transactional.id": c.txn_id}))
        producer.init_transactions(30)
        producer.begin_transaction()
        _produce_all(producer, c.records, on_delivery)
        _flush(producer)
        _check_delivery(errors)
        self._commit(producer, c)

    def _commit(self, producer: Any, c: KafkaCommittable) -> None:
        """Commit the marker offset `c.checkpoint_id` and the transaction, atomically."""
        from confluent_kafka import Consumer, TopicPartition

        group = c.marker_group
        metadata = self._group_metadata.get(group)
        if metadata is None:  # a consumer only to name the group; it never joins it
            consumer = Consumer(
                {
                    "bootstrap.servers": self._sink.properties["bootstrap.servers"],
                    "group.id": group,
                    "enable.auto.commit": False,
                }
            )
            try:
                metadata = self._group_metadata[group] = consumer.consumer_group_metadata()
            finally:
                consumer.close()
        producer.send_offsets_to_transaction(
            [TopicPartition(c.marker_topic, 0, c.checkpoint_id)], metadata, 30
        )
        producer.commit_transaction(30)


class KafkaSinkBuilder:
    """PyFlink's KafkaSinkBuilder."""

    def __init__(self) -> None:
        self._properties: dict[str, str] = {}
        self._serializer: KafkaRecordSerializationSchema | None = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix: str | None = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSinkBuilder:
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> KafkaSinkBuilder:
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> KafkaSinkBuilder:
        """The prefix of the transactional ids (EXACTLY_ONCE): unique per job on the cluster,
        and the same across restores of the job (the restore fences the ids it finds)."""
        self._prefix = transactional_id_prefix
        return self

    def set_record_serializer(
        self, record_serializer: KafkaRecordSerializationSchema
    ) -> KafkaSinkBuilder:
        self._serializer = record_serializer
        return self

    def set_property(self, key: str, value: str) -> KafkaSinkBuilder:
        self._properties[key] = str(value)
        return self

    def build(self) -> KafkaSink:
        if "bootstrap.servers" not in self._properties:
            raise ValueError("KafkaSink needs set_bootstrap_servers")
        if self._serializer is None:
            raise ValueError("KafkaSink needs set_record_serializer")
        if self._guarantee is DeliveryGuarantee.EXACTLY_ONCE and not self._prefix:
            raise ValueError(
                "an EXACTLY_ONCE KafkaSink needs set_transactional_id_prefix (unique per job)"
            )
        if "transactional.id" in self._properties:
            raise ValueError(
                "do not set 'transactional.id' on a KafkaSink: it derives the ids from "
                "set_transactional_id_prefix"
            )
        return KafkaSink(dict(self._properties), self._serializer, self._guarantee, self._prefix)
