"""PostgreSQL sinks with PyFlink's JDBC names (public at tidegate.datastream.connectors.jdbc)."""

from tidegate.connectors.jdbc.options import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
)
from tidegate.connectors.jdbc.sink import JdbcSink

__all__ = ["JdbcConnectionOptions", "JdbcExactlyOnceOptions", "JdbcExecutionOptions", "JdbcSink"]
