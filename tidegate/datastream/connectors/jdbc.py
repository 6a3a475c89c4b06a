"""PyFlink's `pyflink.datastream.connectors.jdbc` (PostgreSQL only), and the exactly-once sink
of Flink's Java API (`JdbcSink.exactly_once_sink`, `JdbcExactlyOnceOptions`)."""

from tidegate.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)

__all__ = ["JdbcConnectionOptions", "JdbcExactlyOnceOptions", "JdbcExecutionOptions", "JdbcSink"]
