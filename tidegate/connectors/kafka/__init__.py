"""Kafka connector: KafkaSource (partitions as checkpointed splits) and KafkaSink (NONE,
AT_LEAST_ONCE, EXACTLY_ONCE by transactions bound to checkpoints), on confluent-kafka
(`pip install tidegate[kafka]`)."""

from tidegate.connectors.delivery import DeliveryGuarantee
from tidegate.connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from tidegate.connectors.kafka.records import (
    ConsumerRecord,
    KafkaRecordDeserializationSchema,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaTopicSelector,
)
from tidegate.connectors.kafka.sink import KafkaSink, KafkaSinkBuilder
from tidegate.connectors.kafka.source import KafkaSource, KafkaSourceBuilder

__all__ = [
    "ConsumerRecord",
    "DeliveryGuarantee",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordDeserializationSchema",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "KafkaTopicSelector",
]
