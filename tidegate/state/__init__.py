"""Working state and its files: key groups (`keygroups`), state descriptors, keyed state backends
(`heap`: hashmap; `rocksdb_*`: RocksDB, incremental snapshots, local recovery), operator and
broadcast state, TTL (`ttl/`, `ttl_config`), and the on-disk formats of state files and channel
state with their checksums (`snapshot_format`, `channel_state`, `checksums`), plus the handles
and shared-file registry of incremental snapshots. The lowest layer above `common`: it knows
nothing of checkpoints' coordination, tasks or Spark.
"""
