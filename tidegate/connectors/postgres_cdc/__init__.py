"""PostgreSQL change data capture: snapshot + logical replication stream (source.py)."""
