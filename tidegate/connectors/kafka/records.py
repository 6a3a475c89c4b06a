"""Record (de)serialization for Kafka: PyFlink's KafkaRecordSerializationSchema (value, key,
topic selector, headers) and KafkaRecordDeserializationSchema.

A schema is any object with `serialize(value) -> bytes` (sink) or `deserialize(bytes)`
(source), such as `SimpleStringSchema` or the JSON/CSV/Avro row schemas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConsumerRecord",
    "KafkaRecordDeserializationSchema",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaTopicSelector",
    "ProducerRecord",
]


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record as read from Kafka, handed to a KafkaRecordDeserializationSchema."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A serialized record to write: what a committable of the exactly-once sink holds.
    `timestamp`: the Kafka record timestamp (ms since the epoch; None: the producer's time)."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None
    timestamp: int | None = None


class KafkaRecordDeserializationSchema:
    """Turns a ConsumerRecord into the value the source emits. Subclass and override
    `deserialize`, or use `value_only(schema)`."""

    #: set by `value_only`: the source then calls its `deserialize(bytes)` directly
    value_schema: Any = None

    def deserialize(self, record: ConsumerRecord) -> Any:
        raise NotImplementedError("override deserialize(record) or use value_only(schema)")

    @staticmethod
    def value_only(deserialization_schema: Any) -> KafkaRecordDeserializationSchema:
        """Only the record's value, through `deserialization_schema.deserialize(bytes)`."""
        return _ValueOnly(deserialization_schema)


class _ValueOnly(KafkaRecordDeserializationSchema):
    def __init__(self, schema: Any) -> None:
        if not callable(getattr(schema, "deserialize", None)):
            raise TypeError(f"a value deserializer needs deserialize(bytes): {schema!r}")
        self.value_schema = schema

    def deserialize(self, record: ConsumerRecord) -> Any:
        return self.value_schema.deserialize(record.value)


class KafkaTopicSelector:
    """Chooses the topic of a record (PyFlink's KafkaTopicSelector): override `apply`."""

    def apply(self, data: Any) -> str:
        raise NotImplementedError


class KafkaRecordSerializationSchema:
    """Turns a value into a ProducerRecord: topic (fixed or selected), value, optional key and
    headers. Build with `KafkaRecordSerializationSchema.builder()`."""

    def __init__(
        self,
        topic: str | None,
        topic_selector: Callable[[Any], str] | None,
        value_schema: Any,
        key_schema: Any | None,
        headers: Callable[[Any], Any] | None,
        partitioner: Callable[[Any], int] | None,
    ) -> None:
        self.topic = topic
        self.topic_selector = topic_selector
        self.value_schema = value_schema
        self.key_schema = key_schema
        self.headers = headers
        self.partitioner = partitioner

    @staticmethod
    def builder() -> KafkaRecordSerializationSchemaBuilder:
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, element: Any, timestamp: int | None = None) -> ProducerRecord:
        """The record to write for `element`; `timestamp` is the stream record's timestamp
        (None if it has none): the Kafka record gets it, as in Flink, unless it is negative
        (Kafka has no such timestamps; the producer's time is used instead)."""
        topic = self.topic if self.topic_selector is None else self.topic_selector(element)
        key = None if self.key_schema is None else self.key_schema.serialize(element)
        headers = () if self.headers is None else tuple(self.headers(element))
        partition = None if self.partitioner is None else self.partitioner(element)
        if timestamp is not None and timestamp < 0:
            timestamp = None
        return ProducerRecord(
            topic, self.value_schema.serialize(element), key, headers, partition, timestamp
        )


class KafkaRecordSerializationSchemaBuilder:
    """PyFlink's builder: a topic or a topic selector, and a value serialization schema are
    required; a key schema, a headers function (value -> [(name, bytes)]) and a partitioner
    (value -> partition) are optional (without one, Kafka's partitioner places by key)."""

    def __init__(self) -> None:
        self._topic: str | None = None
        self._selector: Callable[[Any], str] | None = None
        self._value: Any = None
        self._key: Any = None
        self._headers: Callable[[Any], Any] | None = None
        self._partitioner: Callable[[Any], int] | None = None

    def set_topic(self, topic: str) -> KafkaRecordSerializationSchemaBuilder:
        self._topic, self._selector = topic, None
        return self

    def set_topic_selector(
        self, topic_selector: Callable[[Any], str] | KafkaTopicSelector
    ) -> KafkaRecordSerializationSchemaBuilder:
        if isinstance(topic_selector, KafkaTopicSelector):
            topic_selector = topic_selector.apply
        self._selector, self._topic = topic_selector, None
        return self

    def set_key_serialization_schema(self, schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._key = _serializer(schema, "key")
        return self

    def set_value_serialization_schema(self, schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._value = _serializer(schema, "value")
        return self

    def set_headers(self, headers: Callable[[Any], Any]) -> KafkaRecordSerializationSchemaBuilder:
        """tidegate's addition: `headers(value)` returns (name, bytes) pairs for the record."""
        self._headers = headers
        return self

    def set_partitioner(
        self, partitioner: Callable[[Any], int]
    ) -> KafkaRecordSerializationSchemaBuilder:
        """`partitioner(value)` returns the partition to write the value to."""
        self._partitioner = partitioner
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if self._topic is None and self._selector is None:
            raise ValueError("KafkaRecordSerializationSchema needs set_topic or set_topic_selector")
        if self._value is None:
            raise ValueError("KafkaRecordSerializationSchema needs set_value_serialization_schema")
        return KafkaRecordSerializationSchema(
            self._topic, self._selector, self._value, self._key, self._headers, self._partitioner
        )


def _serializer(schema: Any, what: str) -> Any:
    if not callable(getattr(schema, "serialize", None)):
        raise TypeError(f"a {what} serialization schema needs serialize(value): {schema!r}")
    return schema
