"""Sources and sinks. `base` is the contract between the runtime and a connector (when each
method is called and what it must guarantee); every other module implements it: generated
data, collections, number sequences, files (source and exactly-once sink), print, Redis
Streams and NATS JetStream (packages `redis` and `nats`: sources with positions in the
checkpoint, exactly-once sinks by idempotent batches and message ids). The runtime
drives connectors through `runtime.connector_operators`; connectors import only `common`.
The user-facing import paths are PyFlink's, in `tidegate.datastream.connectors`.
"""
