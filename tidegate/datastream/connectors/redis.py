"""Redis connectors at the path PyFlink would give them (`pyflink.datastream.connectors.redis`
does not exist: tidegate's own): the Redis Streams source and the exactly-once sinks."""

from tidegate.connectors.redis.sink import RedisKeyValueSink, RedisSink, RedisStreamSink
from tidegate.connectors.redis.source import RedisStreamSource

__all__ = ["RedisKeyValueSink", "RedisSink", "RedisStreamSink", "RedisStreamSource"]
