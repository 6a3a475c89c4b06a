"""hashmap vs rocksdb state backend, in isolation on one core (no processes, no Spark):

1. keyed count throughput (state updates/s), 10k keys, batches of 512 records as in a job:
   `reduce` is KeyedStream.reduce (KeyedReduceOperator, the reducing state's add_for_key);
   `value state` is a KeyedProcessFunction reading and updating a ValueState per record.
   Compared with the bare Python loop doing the same work with a dict (bench/measure.py).
   `reduce 1M keys`: the same over 1M keys already in state, spread so that no key is
   updated twice between two flushes of the rocksdb backend's write buffer. Updates per
   wall-clock second and per CPU-second of this process (RocksDB's own threads included; less
   sensitive to other users of the machine); the rocksdb runs end with the write buffer flushed,
   as a checkpoint would.
2. full checkpoint of N keys (value state, int counts): the synchronous phase (`snapshot()`,
   on the processing loop), the asynchronous phase (writing the canonical state file, off the
   loop) and the file's size.
3. with `--spark`: W1 on Spark (keyed count, CountSink, checkpoints every second, p=2) per
   backend at 10k and 1M keys (`--w1-keys`), round-robin over `--w1-repeats` rounds: steady
   events/s, events per CPU-second of the job's processes (less sensitive to other users of
   the machine) and the exactly-once check.

    .venv/bin/python bench/state_backends.py [--records 300000] [--keys 100000,1000000]
                                              [--spark [--w1-records 4000000]]
                                              [--json bench/results/state_backends.json]
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

from bench import jobs
from bench.common import add_keys_argument, flat_keys, key_counts
from bench.jobs import JobParams, add_counts, first, to_pair
from bench.measure import bare_loop, run_job
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from tidegate.runtime.operators import KeyedReduceOperator, OperatorRuntime, ProcessOperator
from tidegate.state.snapshot_format import write_state_file


class _Null:
    def process_batch(self, records: list) -> None:
        pass


class _Count:
    """A KeyedProcessFunction's work: read the count, add one, update it, emit."""

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + value[1]
        self.count.update(c)
        return ((value[0], c),)


def _backends(local_dir: str) -> dict[str, object]:
    return {
        "hashmap": HashMapStateBackend(),
        "rocksdb": EmbeddedRocksDBStateBackend(local_dir=local_dir),
        "rocksdb+changelog": EmbeddedRocksDBStateBackend(
            local_dir=local_dir, enable_changelog=True
        ),
    }


#: W1's configuration per backend (`--spark`)
W1_BACKENDS = {
    "hashmap": {"state.backend.type": "hashmap"},
    "rocksdb": {"state.backend.type": "rocksdb"},
    "rocksdb+changelog": {
        "state.backend.type": "rocksdb",
        "state.backend.changelog.enabled": "true",
    },
}


def _operator(kind: str, backend) -> object:
    if kind == "reduce":
        op = KeyedReduceOperator(None, add_counts, first, uid="count", name="count")
    else:
        fn = _Count()
        op = ProcessOperator(fn, fn.process_element, first, uid="count", name="count")
    op.initialize_state(OperatorRuntime(0, 1, 128, 0, state_backend=backend), None)
    op.outputs = [_Null()]
    op.open()
    return op


def _batches(records: int, keys: int, stride: int = 1) -> list[list[tuple[int, int]]]:
    return [
        [to_pair(x * stride, keys) for x in range(i, min(i + 512, records))]
        for i in range(0, records, 512)
    ]


class _Checkpoints:
    """Checkpoints of a changelog backend, both phases (the changelog written into a real
    checkpoint storage, then confirmed), as a job takes them."""

    def __init__(self, local_dir: str) -> None:
        self.storage = CheckpointStorage(os.path.join(local_dir, "checkpoints"), "bench")
        self.taken = 0

    def take(self, keyed) -> None:
        self.taken += 1
        cid = self.taken
        snapshot = keyed.snapshot(cid)
        directory = self.storage.create_checkpoint_dir(cid)
        snapshot.upload(self.storage, directory, "count-0", cid)
        keyed.notify_checkpoint_complete(cid)


def _timed(op, batches: list[list[tuple[int, int]]], checkpoints=None) -> tuple[float, float]:
    """Wall and CPU seconds (this process: RocksDB's threads too) of processing `batches`,
    ending with the rocksdb backend's write buffer flushed (as a checkpoint would), or with
    a changelog backend's checkpoint (`checkpoints`: both phases)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        op.process_batch(batch)
    if checkpoints is not None:
        checkpoints.take(op.keyed_backend)
    else:
        buffer = getattr(op.keyed_backend, "buffer", None)
        if buffer is not None:
            buffer.flush()
    return time.perf_counter() - wall, time.process_time() - cpu


def _checkpoints(backend, local_dir: str) -> _Checkpoints | None:
    return _Checkpoints(local_dir) if getattr(backend, "enable_changelog", False) else None


def throughput(records: int, local_dir: str, rounds: int = 3) -> dict[str, dict[str, float]]:
    """Updates/s and updates per CPU-second per (operator kind, backend): median of `rounds`."""
    batches = _batches(records, 10_000)
    out: dict[str, dict[str, float]] = {}
    for kind in ("reduce", "value state"):
        for name, backend in _backends(local_dir).items():
            times = []
            for _ in range(rounds):
                op = _operator(kind, backend)
                times.append(_timed(op, batches, _checkpoints(backend, local_dir)))
                op.close()
            out[f"{kind} / {name}"] = {
                "wall": statistics.median(records / wall for wall, _ in times),
                "cpu": statistics.median(records / cpu for _, cpu in times),
            }
    big = 1_000_000
    fill, spread = _batches(big, big), _batches(records, big, stride=7919)
    for name, backend in _backends(local_dir).items():
        op = _operator("reduce", backend)
        checkpoints = _checkpoints(backend, local_dir)
        _timed(op, fill, checkpoints)
        wall, cpu = _timed(op, spread, checkpoints)
        out[f"reduce 1M keys / {name}"] = {"wall": records / wall, "cpu": records / cpu}
        op.close()
    return out


def checkpoint(keys: int, local_dir: str) -> dict[str, dict[str, float]]:
    """Sync ms, async ms and MB of a full checkpoint of `keys` keys, per backend (the changelog
    changes no full snapshot: a savepoint's is rocksdb's)."""
    out = {}
    for name, backend in _backends(local_dir).items():
        if name == "rocksdb+changelog":
            continue
        keyed = backend.create_keyed_state_backend(128, range(128), operator_uid=f"chk-{name}")
        try:
            state = keyed.get_state(ValueStateDescriptor("count"))
            for key in range(keys):
                keyed.current_key = key
                state.update(key)
            started = time.perf_counter()
            snapshot = keyed.snapshot()
            sync_s = time.perf_counter() - started
            with tempfile.NamedTemporaryFile(dir=local_dir) as f:
                started = time.perf_counter()
                index = write_state_file(f, snapshot, None)
                f.flush()
                async_s = time.perf_counter() - started
            del snapshot
        finally:
            if hasattr(keyed, "dispose"):
                keyed.dispose()
        out[name] = {"sync_ms": sync_s * 1000, "async_ms": async_s * 1000, "mb": index.size / 1e6}
    return out


def spark_w1(
    records: int, keys: list[int], repeats: int, backends: list[str]
) -> list[dict[str, object]]:
    """W1 on Spark at p=2 per (keys, backend), after a warm-up job: one row per run."""
    from tidegate.deploy.spark_session import get_spark

    jobs.register_by_value()
    spark = get_spark(None, 2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tidegate-w1-") as work:
        run_job(
            JobParams("keyed", 2, 1000, "count", 200_000),
            runner="spark",
            spark=spark,
            work_root=work,
            configuration={"state.backend.type": "rocksdb"},
        )
        for round_ in range(repeats):
            for n_keys in keys:
                for backend in backends:
                    n = max(records, 3 * n_keys)  # 1M keys: every key updated 3 times
                    r = run_job(
                        JobParams("keyed", 2, 1000, "count", n, keys=n_keys),
                        runner="spark",
                        spark=spark,
                        work_root=work,
                        configuration=W1_BACKENDS[backend],
                    )
                    cpu_s = (r["own_cores"] or 0) * r["wall_s"]
                    rows.append(
                        {
                            "round": round_ + 1,
                            "keys": n_keys,
                            "backend": backend,
                            "records": n,
                            "steady_rate": r["steady_rate"],
                            "per_cpu_second": n / cpu_s if cpu_s else None,
                            "wall_s": r["wall_s"],
                            "checkpoints": r["completed_checkpoints"],
                            "own_cores": r["own_cores"],
                            "other_cores": r["other_cores"],
                            "exactly_once_ok": r["exactly_once_ok"],
                            "error": r["error"],
                        }
                    )
    return rows


def print_w1(rows: list[dict[str, object]]) -> None:
    print("W1 on Spark, p=2, CountSink, checkpoints every 1 s (M events/s)")
    print(
        f"  {'keys':>9s} {'backend':17s} {'steady':>7s} {'per CPU-s':>9s} {'wall s':>6s} "
        f"{'ckpts':>5s} {'others':>6s} exact"
    )
    for r in rows:
        rate, per_cpu = r["steady_rate"] or 0, r["per_cpu_second"] or 0
        print(
            f"  {r['keys']:9,d} {r['backend']:17s} {rate / 1e6:7.3f} {per_cpu / 1e6:9.3f} "
            f"{r['wall_s']:6.1f} {r['checkpoints']:5d} {r['other_cores'] or 0:6.2f} "
            f"{r['exactly_once_ok']}{' ' + r['error'] if r['error'] else ''}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    add_keys_argument(ap, [100_000, 1_000_000])
    ap.add_argument("--spark", action="store_true", help="also W1 on Spark per backend")
    ap.add_argument("--w1-records", type=int, default=4_000_000)
    ap.add_argument(
        "--w1-keys", type=key_counts, default=[10_000, 1_000_000], help="keys of the W1 runs"
    )
    ap.add_argument("--w1-repeats", type=int, default=1)
    ap.add_argument(
        "--w1-backends",
        type=lambda text: [b for b in text.split(",") if b],
        default=list(W1_BACKENDS),
        help=f"backends of the W1 runs, comma-separated (of {', '.join(W1_BACKENDS)})",
    )
    ap.add_argument("--json", default="bench/results/state_backends.json")
    args = ap.parse_args(argv)
    args.keys = flat_keys(args.keys)
    w1 = []
    if args.spark:
        w1 = spark_w1(args.w1_records, args.w1_keys, args.w1_repeats, args.w1_backends)
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as local_dir:
        bare = statistics.median(bare_loop(args.records) for _ in range(3))
        cpu = time.process_time()
        bare_loop(args.records)
        bare_cpu = args.records / (time.process_time() - cpu)
        rates = throughput(args.records, local_dir)
        checkpoints = {n: checkpoint(n, local_dir) for n in args.keys}
    print(f"keyed count, 10k keys, {args.records} records, one core (median of 3)")
    print(f"  {'':34s} {'updates/s':>12s} {'x bare':>7s} {'per CPU-s':>12s} {'x bare':>7s}")
    print(f"  {'bare dict loop':34s} {bare:12,.0f} {1:7.2f} {bare_cpu:12,.0f} {1:7.2f}")
    for name, rate in rates.items():
        print(
            f"  {name:34s} {rate['wall']:12,.0f} {rate['wall'] / bare:7.2f} "
            f"{rate['cpu']:12,.0f} {rate['cpu'] / bare_cpu:7.2f}"
        )
    print("full checkpoint of N keys (value state): sync phase, async phase, file size")
    print(f"  {'keys':>10s} {'backend':8s} {'sync ms':>9s} {'async ms':>9s} {'MB':>7s}")
    for n, per_backend in checkpoints.items():
        for name, c in per_backend.items():
            print(f"  {n:10d} {name:8s} {c['sync_ms']:9.1f} {c['async_ms']:9.1f} {c['mb']:7.1f}")
    if w1:
        print_w1(w1)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {
                    "records": args.records,
                    "bare_updates_per_s": bare,
                    "bare_updates_per_cpu_s": bare_cpu,
                    "updates_per_s": rates,
                    "checkpoints": {str(n): c for n, c in checkpoints.items()},
                    "w1_spark": w1,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
