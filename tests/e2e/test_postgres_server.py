"""The private PostgreSQL server the connector tests use is set up as they need it."""

from __future__ import annotations

import psycopg


def test_the_test_server_allows_prepared_transactions_and_logical_decoding(postgres_server):
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings "
                "WHERE name IN ('max_prepared_transactions', 'wal_level', 'listen_addresses')"
            ).fetchall()
        )
        assert int(settings["max_prepared_transactions"]) > 0
        assert settings["wal_level"] == "logical"
        assert settings["listen_addresses"] == "127.0.0.1"
