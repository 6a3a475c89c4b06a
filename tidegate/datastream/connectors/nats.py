"""NATS JetStream connectors at the path PyFlink would give them (tidegate's own): the
JetStream source and the exactly-once sink."""

from tidegate.connectors.nats.sink import NatsJetStreamSink
from tidegate.connectors.nats.source import NatsJetStreamSource

__all__ = ["NatsJetStreamSink", "NatsJetStreamSource"]
