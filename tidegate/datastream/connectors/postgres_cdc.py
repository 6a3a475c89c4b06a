"""The PostgreSQL change data capture source (Flink CDC's postgres-cdc connector, which PyFlink
does not ship: tidegate's own path): a snapshot of the chosen tables, then their changes from
a logical replication slot, as Rows with RowKind, exactly once."""

from tidegate.connectors.postgres_cdc.server import PostgresCdcError
from tidegate.connectors.postgres_cdc.source import (
    PostgresSource,
    PostgresSourceBuilder,
    StartupOptions,
)

__all__ = ["PostgresCdcError", "PostgresSource", "PostgresSourceBuilder", "StartupOptions"]
