"""Helpers shared by the tests, one module a concept (see issue 12):

- waiting: `wait_until` / `wait_for_checkpoints`, polling with a timeout;
- output: `committed_files` / `committed_lines`, what a file sink committed;
- environments: `job_environment` / `file_sink`, a configured job environment and sink;
- references: reference computations (the keyed running count, multiset equality);
- snapshots: checkpoint metadata, checkpoint directories and their fingerprints;
- ipv6: `requires_ipv6`, skipping tests where the machine has no `::1`;
- cluster: a Spark standalone cluster whose workers are hosts of their own (namespaces);
- s3: a private S3-compatible server (SeaweedFS) for the `s3_server` fixture."""
