"""Restore time of an incremental rocksdb checkpoint from the task-local copy vs the checkpoint
storage, in isolation on one core (no processes, no Spark), with real files:

1. fill N keys (value state, int counts) into a rocksdb backend with incremental checkpoints
   and task-local recovery, and take one checkpoint (the upload; the snapshot's RocksDB
   checkpoint is kept as the local copy);
2. restore it into a fresh backend (same key groups: the files become its database) with the
   local copy (each file checked, SST files hard-linked) and without (each file copied from
   the storage), alternating, `--repeats` times each.

The storage is a local directory too, so "remote" costs a local copy: the difference is the
cost of copying every byte vs reading it once for its checksum and hard-linking it, not the
download time saved when the storage is remote. Nothing is asserted.

    .venv/bin/python bench/local_incremental.py [--keys 100000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.deploy.restore import keyed_restore_handle
from tidegate.runtime.restore import RestoredOperatorState
from tidegate.state.handles import StateHandle
from tidegate.state.local_recovery import LocalStateStore
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_incremental import upload_snapshot
from tidegate.state.rocksdb_instance import RocksDBOptions

M = 128
COUNT = ValueStateDescriptor("count")


def measure(keys: int, repeats: int, work: str) -> dict:
    options = RocksDBOptions(local_dir=os.path.join(work, "rocksdb"))
    storage = CheckpointStorage(os.path.join(work, "checkpoints"), "job")
    local = LocalStateStore(os.path.join(work, "task-local"), "job")
    backend = RocksDBKeyedStateBackend(M, range(M), options, incremental=True)
    state = backend.get_state(COUNT)
    for k in range(keys):
        backend.current_key = k
        state.update(k)
    directory = storage.create_checkpoint_dir(1)
    inc = upload_snapshot(backend.snapshot(), storage, directory, "count-0", 1, local)
    backend.dispose()
    handle = keyed_restore_handle(
        "", StateHandle(file="", index=None, incremental=inc), range(M), directory, 1, True
    )
    size = sum(f.size for f in inc.files)
    times: dict[str, list[float]] = {"local": [], "remote": []}
    for _ in range(repeats):
        for name, store in (("local", local), ("remote", None)):
            again = RocksDBKeyedStateBackend(M, range(M), options, incremental=True)
            started = time.perf_counter()
            reads = RestoredOperatorState(keyed=(handle,)).restore_keyed(again, store)
            times[name].append(time.perf_counter() - started)
            assert reads[0 if name == "local" else 1] > 0 and 0 in reads, reads
            again.dispose()
    return {
        "keys": keys,
        "bytes": size,
        "files": len(inc.files),
        **{f"{name}_s": statistics.median(ts) for name, ts in times.items()},
        "runs": times,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args()
    results = []
    print(f"{'keys':>10}{'files':>7}{'MB':>8}{'local (s)':>11}{'remote (s)':>12}")
    for keys in args.keys:
        with tempfile.TemporaryDirectory(prefix="tidegate-bench-li-") as work:
            r = measure(keys, args.repeats, work)
        results.append(r)
        print(
            f"{keys:>10,}{r['files']:>7}{r['bytes'] / 1e6:>8.1f}"
            f"{r['local_s']:>11.3f}{r['remote_s']:>12.3f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
