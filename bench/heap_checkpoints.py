"""hashmap backend: checkpoints off vs full vs incremental, side by side in one run, in isolation
on one core (no processes, no Spark), with real files in a local checkpoint storage:

1. fill N keys (KeyedStream.reduce's running count, KeyedReduceOperator, 1 record per key), one
   operator per mode (`--modes`; off always runs);
2. `--intervals` checkpoint intervals of `--records` records (about a second of processing)
   spread over a `--fraction` of the keys (another slice of the key space each interval): the
   modes take turns every CHUNK batches on the same records, the order rotating, so that the
   load of other processes falls on all of them alike; then each mode with checkpoints takes
   one: the synchronous phase (`snapshot`) and the asynchronous phase (writing the state file,
   or the incremental chain's new file) one after the other on this thread (in a job the
   asynchronous phase runs on another thread of the same process, sharing the GIL);
3. a later, warm materialization of the incremental mode's state (what the policy's next one
   costs), and a restore of each mode's last checkpoint into a fresh backend (incremental: the
   materialization and every changelog of its chain, merged key group by key group).

Per mode: CPU seconds of processing and of checkpoints; the overhead per event over checkpoints
off (the same records): of the processing alone (change tracking), as run, and in the steady
state (a warm materialization spread over the changelogs its chain holds,
heap_changelog.MAX_CHANGELOG_*); bytes per checkpoint, sync/async ms of checkpoints, changelogs
and materializations; the restore's CPU seconds, files and bytes.

    .venv/bin/python bench/heap_checkpoints.py [--keys 1000000] [--intervals 12]
        [--records 1500000] [--fraction 0.01] [--modes off,full,incremental]
        [--json bench/results/heap_checkpoints.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import add_keys_argument, flat_keys
from bench.jobs import add_counts, first
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.datastream.state_backend import HashMapStateBackend
from tidegate.runtime.operators import KeyedReduceOperator, OperatorRuntime
from tidegate.state.heap_changelog import (
    CHANGELOG_BYTES_FLOOR,
    MAX_CHANGELOG_FILES,
    MAX_CHANGELOG_RATIO,
)
from tidegate.state.heap_incremental import HeapIncrementalSnapshot
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle
from tidegate.state.rocksdb_restore import restore_keyed_incremental
from tidegate.state.snapshot_format import read_key_groups, write_state_file

M = 128
BATCH = 512
MODES = ("off", "full", "incremental")
#: batches a mode processes before the next mode's turn
CHUNK = 64


class _Null:
    def process_batch(self, records: list) -> None:
        pass


def _operator(incremental: bool) -> KeyedReduceOperator:
    op = KeyedReduceOperator(None, add_counts, first, uid="count", name="count")
    backend = HashMapStateBackend(enable_incremental_checkpointing=incremental)
    op.initialize_state(OperatorRuntime(0, 1, M, 0, state_backend=backend), None)
    op.outputs = [_Null()]
    op.open()
    return op


def _batches(keys: int, records: int, fraction: float, interval: int) -> list[list[tuple]]:
    """`records` records over `fraction` of the keys: the slice of interval `interval`."""
    hot = max(1, int(keys * fraction))
    start = (interval * hot) % keys
    pairs = [((start + i % hot) * 7919 % keys, 1) for i in range(records)]
    return [pairs[i : i + BATCH] for i in range(0, records, BATCH)]


def _checkpoint(op, storage: CheckpointStorage, cid: int) -> tuple[dict, object]:
    """Checkpoint `cid` of `op`'s keyed state, completed; (measurements, what restores it)."""
    directory = storage.create_checkpoint_dir(cid)
    started = time.process_time()
    snapshot = op.keyed_backend.snapshot(cid)
    sync_s = time.process_time() - started
    started = time.process_time()
    if isinstance(snapshot, HeapIncrementalSnapshot):
        inc = snapshot.upload(storage, directory, "count-0", cid)
        written, kind = inc.uploaded_bytes, "materialized" if snapshot.materialized else "changelog"
        restore = IncrementalKeyedStateHandle(directory, cid, inc, range(M))
    else:
        with storage.create_artifact(directory, "count-0", ".state") as f:
            index = write_state_file(f, snapshot, None)
        written, kind = f.size, "full"
        restore = (f"{directory}/{f.name}", index)
    async_s = time.process_time() - started
    del snapshot
    op.keyed_backend.notify_checkpoint_complete(cid)
    return {"sync_ms": sync_s * 1e3, "async_ms": async_s * 1e3, "bytes": written, "kind": kind}, (
        restore
    )


def _restore(handle: object) -> tuple[float, int]:
    """(seconds to restore `handle` into a fresh backend, keys restored)."""
    backend = HashMapStateBackend().create_keyed_state_backend(M, range(M))
    started = time.process_time()
    if isinstance(handle, IncrementalKeyedStateHandle):
        restore_keyed_incremental(backend, [handle])
    else:
        path, index = handle
        with open(path, "rb") as f:
            backend.restore(read_key_groups(f, index, range(M)))
    seconds = time.process_time() - started
    return seconds, sum(1 for _ in backend.entries(KeyedReduceOperator._STATE))


def _steady_state(r: dict, warm_ms: float) -> dict:
    """Per checkpoint, once the chain is materialized again by its policy (not yet in a short
    run): a materialization's cost spread over the changelogs the chain then holds. The run's
    materialization is the first (its key -> key group memo was cold); `warm_ms`, measured
    after the run, is what a later one costs."""
    changelog, materialized = r["changelog"], r["materialized"]
    allowed = max(MAX_CHANGELOG_RATIO * materialized["bytes"], CHANGELOG_BYTES_FLOOR)
    length = max(1, min(MAX_CHANGELOG_FILES, math.ceil(allowed / max(changelog["bytes"], 1))))
    changelog_ms = length * (changelog["sync_ms"] + changelog["async_ms"])
    cold = materialized["sync_ms"] + materialized["async_ms"]
    return {
        "chain_changelogs": length,
        "materialization_warm_ms": warm_ms,
        "ms_per_checkpoint": (cold + changelog_ms) / (length + 1),
        "ms_per_checkpoint_warm": (warm_ms + changelog_ms) / (length + 1),
    }


def _summary(
    checkpoints: list[dict], handle: object, process_s: list[float], wall_s: float
) -> dict:
    out: dict = {
        "wall_s": wall_s,
        "process_s": sum(process_s),
        "checkpoint_s": sum(c["cpu_s"] for c in checkpoints),
        "checkpoints": len(checkpoints),
    }
    out["cpu_s"] = out["process_s"] + out["checkpoint_s"]
    if not checkpoints:
        return out
    out["bytes_per_checkpoint"] = statistics.mean(c["bytes"] for c in checkpoints)
    for kind in ("full", "materialized", "changelog"):
        of_kind = [c for c in checkpoints if c["kind"] == kind]
        if of_kind:
            out[kind] = {
                "count": len(of_kind),
                **{
                    f: statistics.mean(c[f] for c in of_kind)
                    for f in ("sync_ms", "async_ms", "bytes")
                },
            }
    out["restore_s"], out["restored_keys"] = _restore(handle)
    if isinstance(handle, IncrementalKeyedStateHandle):
        out["restore_files"] = len(handle.handle.shared)
        out["restore_bytes"] = sum(f.size or 0 for f in handle.handle.shared)
    return out


def _materialization(op, storage: CheckpointStorage) -> float:
    """CPU seconds of a later (warm) materialization of `op`'s state: what the policy's next
    one costs (a full snapshot written as a state file; the key -> key group memo is full)."""
    directory = storage.create_checkpoint_dir(0)
    started = time.process_time()
    snapshot = op.keyed_backend.snapshot()
    with storage.create_artifact(directory, "count-0", ".state") as f:
        write_state_file(f, snapshot, None)
    seconds = time.process_time() - started
    del snapshot
    storage.discard_checkpoint_dir(directory)
    return seconds


def run(keys: int, args: argparse.Namespace, root: str) -> dict[str, dict]:
    """The modes side by side on the same records: each interval's batches are processed by
    the modes in turn, `CHUNK` batches at a time (a few ms; the order rotates each interval),
    so that the load of other processes and CPU frequency changes affect them alike; then each
    mode with checkpoints takes one."""
    modes = args.modes
    ops = {mode: _operator(mode == "incremental") for mode in modes}
    for op in ops.values():
        for j in range(0, keys, BATCH):
            op.process_batch([(k, 1) for k in range(j, min(j + BATCH, keys))])
    storage = CheckpointStorage(os.path.join(root, "checkpoints"), f"job-{keys}")
    checkpoints: dict[str, list[dict]] = {mode: [] for mode in modes}
    handles: dict[str, object] = {}
    process_s: dict[str, list[float]] = {mode: [] for mode in modes}
    wall_s = dict.fromkeys(modes, 0.0)
    cid = 0
    for n in range(args.intervals):
        batches = _batches(keys, args.records, args.fraction, n)
        order = modes[n % len(modes) :] + modes[: n % len(modes)]
        for mode in modes:
            process_s[mode].append(0.0)
        for i in range(0, len(batches), CHUNK):
            chunk = batches[i : i + CHUNK]
            for mode in order:
                op = ops[mode]
                wall = time.perf_counter()
                started = time.process_time()
                for batch in chunk:
                    op.process_batch(batch)
                process_s[mode][-1] += time.process_time() - started
                wall_s[mode] += time.perf_counter() - wall
        for mode in order:
            if mode != "off":
                cid += 1
                wall = time.perf_counter()
                started = time.process_time()
                measured, handles[mode] = _checkpoint(ops[mode], storage, cid)
                measured["cpu_s"] = time.process_time() - started
                checkpoints[mode].append(measured)
                wall_s[mode] += time.perf_counter() - wall
    out = {
        mode: _summary(checkpoints[mode], handles.get(mode), process_s[mode], wall_s[mode])
        for mode in modes
    }
    incremental = out.get("incremental", {})
    if "changelog" in incremental and "materialized" in incremental:
        warm_ms = _materialization(ops["incremental"], storage) * 1e3
        incremental["steady_state"] = _steady_state(incremental, warm_ms)
    return out


def _overheads(r: dict, off: dict) -> None:
    """Per event, CPU over checkpoints off on the same records: of the processing alone (change
    tracking), as run (the run's first, cold materialization included) and in the steady state
    (a warm materialization spread over its chain's changelogs)."""
    r["processing_overhead"] = r["process_s"] / off["process_s"] - 1
    r["overhead"] = r["cpu_s"] / off["cpu_s"] - 1
    steady = r.get("steady_state")
    if steady is not None:
        per_checkpoint_s = steady["ms_per_checkpoint_warm"] / 1e3
    elif "full" in r:
        per_checkpoint_s = r["checkpoint_s"] / r["checkpoints"]
    else:
        return
    r["overhead_steady"] = (r["process_s"] + r["checkpoints"] * per_checkpoint_s) / off[
        "process_s"
    ] - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_keys_argument(ap, [1_000_000])
    ap.add_argument("--intervals", type=int, default=12)
    ap.add_argument(
        "--records", type=int, default=1_500_000, help="records per interval (about 1 s)"
    )
    ap.add_argument("--fraction", type=float, default=0.01, help="of the keys, per interval")
    ap.add_argument(
        "--modes", default=",".join(MODES), help="of off, full, incremental (off always runs)"
    )
    ap.add_argument("--json", default="bench/results/heap_checkpoints.json")
    args = ap.parse_args(argv)
    args.keys = flat_keys(args.keys)
    args.modes = ("off", *(m for m in MODES[1:] if m in args.modes.split(",")))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as root:
        for keys in args.keys:
            results[str(keys)] = run(keys, args, root)
    print(
        f"hashmap keyed reduce, {args.intervals} intervals of {args.records} records over "
        f"{args.fraction:.1%} of the keys, a checkpoint after each (one core); chains are "
        f"materialized again past {MAX_CHANGELOG_FILES} changelogs or "
        f"{MAX_CHANGELOG_RATIO:.0%} of the materialized bytes"
    )
    print(
        "CPU seconds of this process, the modes alternating every few ms on the same records; "
        "overhead = CPU per event over checkpoints off: of the processing alone (change "
        "tracking), as run (with the run's first, cold materialization), and steady (a warm "
        "materialization spread over the changelogs of its chain)"
    )
    print(
        f"{'keys':>9} {'mode':>11} {'proc s':>7} {'chk s':>6} {'process':>8} {'as run':>7} "
        f"{'steady':>7} {'MB/chk':>7} {'sync ms':>8} {'async ms':>9} {'restore s':>9}"
    )
    for keys, modes in results.items():
        off = modes["off"]
        for mode, r in modes.items():
            _overheads(r, off)
            kinds = [r[k] for k in ("full", "changelog") if k in r]
            sync = f"{kinds[0]['sync_ms']:8.1f}" if kinds else f"{'-':>8}"
            asyn = f"{kinds[0]['async_ms']:9.1f}" if kinds else f"{'-':>9}"
            mb = r.get("bytes_per_checkpoint", 0) / 1e6
            restore = f"{r['restore_s']:9.2f}" if "restore_s" in r else f"{'-':>9}"
            steady = f"{r['overhead_steady']:7.1%}" if "overhead_steady" in r else f"{'-':>7}"
            print(
                f"{keys:>9} {mode:>11} {r['process_s']:7.2f} {r['checkpoint_s']:6.2f} "
                f"{r['processing_overhead']:8.1%} {r['overhead']:7.1%} {steady} {mb:7.2f} "
                f"{sync} {asyn} {restore}"
            )
            if "materialized" in r:
                m, st = r["materialized"], r["steady_state"]
                print(
                    f"{'':>21} {m['count']} materialization(s): {m['bytes'] / 1e6:.2f} MB, sync "
                    f"{m['sync_ms']:.1f} ms, async {m['async_ms']:.1f} ms (cold), "
                    f"{st['materialization_warm_ms']:.1f} ms warm; changelogs "
                    f"{r['changelog']['bytes'] / 1e6:.3f} MB; steady state: a chain of "
                    f"{st['chain_changelogs']} changelogs, {st['ms_per_checkpoint_warm']:.1f} ms "
                    f"per checkpoint; the restore read {r['restore_files']} files, "
                    f"{r['restore_bytes'] / 1e6:.2f} MB"
                )
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"args": {**vars(args)}, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
