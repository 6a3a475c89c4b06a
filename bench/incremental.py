"""Full vs incremental checkpoints of the rocksdb backend after touching 1% of the keys, in
isolation on one core (no processes, no Spark), with real files in a local checkpoint storage:

1. fill N keys (value state, int counts) and take a first checkpoint (full, or the first
   incremental one, which uploads every SST file);
2. update 1% of the keys (spread over the whole key space) and take the next checkpoint;
3. `--steps` more rounds of step 2 (other keys each time): their mean, which includes the
   checkpoints after a RocksDB compaction rewrote SST files (they upload the rewritten files).

For each, the synchronous phase (`snapshot()`: flush + hard links, on the processing loop), the
asynchronous phase (full: writing the canonical state file; incremental: uploading new SST
files and the private files) and the bytes written to the storage.

    .venv/bin/python bench/incremental.py [--keys 100000,1000000] [--repeats 3]
                                          [--json bench/results/incremental.json]
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

from bench.common import add_keys_argument, flat_keys
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.rocksdb_incremental import upload_snapshot
from tidegate.state.rocksdb_instance import RocksDBOptions
from tidegate.state.snapshot_format import write_state_file

M = 128
COUNT = ValueStateDescriptor("count")


def _update(backend: RocksDBKeyedStateBackend, keys, delta: int) -> None:
    state = backend.get_state(COUNT)
    for k in keys:
        backend.current_key = k
        state.update((state.value() or 0) + delta)


def _checkpoint(backend, storage: CheckpointStorage, cid: int, incremental: bool) -> dict:
    directory = storage.create_checkpoint_dir(cid)
    started = time.perf_counter()
    snapshot = backend.snapshot()
    sync_s = time.perf_counter() - started
    started = time.perf_counter()
    if incremental:
        inc = upload_snapshot(snapshot, storage, directory, "count-0", cid)
        written = inc.uploaded_bytes
    else:
        with storage.create_artifact(directory, "count-0", ".state") as f:
            write_state_file(f, snapshot, None)
        written = f.size
    async_s = time.perf_counter() - started
    if incremental:
        backend.notify_checkpoint_complete(cid)
    return {"sync_ms": sync_s * 1000, "async_ms": async_s * 1000, "bytes": written}


def run(keys: int, incremental: bool, root: str, steps: int) -> dict:
    storage = CheckpointStorage(os.path.join(root, "checkpoints"), f"job-{keys}-{incremental}")
    backend = RocksDBKeyedStateBackend(
        M, range(M), RocksDBOptions(local_dir=os.path.join(root, "local")), incremental=incremental
    )
    try:
        _update(backend, range(keys), 1)
        first = _checkpoint(backend, storage, 1, incremental)
        _update(backend, range(0, keys, 100), 1)  # 1% of the keys
        second = _checkpoint(backend, storage, 2, incremental)
        later = []
        for step in range(1, steps + 1):
            _update(backend, range(step, keys, 100), 1)
            later.append(_checkpoint(backend, storage, 2 + step, incremental))
        mean = {f: statistics.mean(c[f] for c in later) for f in later[0]} if later else second
        return {"first": first, "after_1pct": second, "steady_1pct": mean}
    finally:
        backend.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_keys_argument(parser, [100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", default="bench/results/incremental.json")
    args = parser.parse_args()
    args.keys = flat_keys(args.keys)
    results = []
    print(f"{'keys':>9} {'mode':>11} {'checkpoint':>11} {'sync ms':>8} {'async ms':>9} {'MB':>8}")
    for keys in args.keys:
        for incremental in (False, True):
            samples = []
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as root:
                    samples.append(run(keys, incremental, root, args.steps))
            mode = "incremental" if incremental else "full"
            for which in ("first", "after_1pct", "steady_1pct"):
                row = {
                    field: statistics.median(s[which][field] for s in samples)
                    for field in ("sync_ms", "async_ms", "bytes")
                }
                results.append({"keys": keys, "mode": mode, "checkpoint": which, **row})
                print(
                    f"{keys:>9} {mode:>11} {which:>11} {row['sync_ms']:>8.1f} "
                    f"{row['async_ms']:>9.1f} {row['bytes'] / 1e6:>8.3f}"
                )
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"repeats": args.repeats, "steps": args.steps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
