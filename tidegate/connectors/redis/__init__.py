"""Redis connectors: a Redis Streams source (`source`) and exactly-once sinks writing stream
entries, strings or hashes (`sink`), by idempotent MULTI/EXEC batches marked per checkpoint.
The user-facing import path is `tidegate.datastream.connectors.redis`."""
