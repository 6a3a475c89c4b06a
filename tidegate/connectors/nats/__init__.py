"""NATS JetStream connectors: a source reading a stream from checkpointed sequence numbers
(`source`) and an exactly-once sink publishing with message ids on checkpoint completion
(`sink`). nats-py is asyncio: each reader and committer runs its client on an event loop
thread of its own (`connection`). The user-facing path is `tidegate.datastream.connectors.nats`."""
