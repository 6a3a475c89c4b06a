"""What event-time timestamps cost the keyed count, per record, stage by stage, measured in
isolation on one core with tidegate's own classes (bench/micro.py's pattern): each stage runs
the same batches once as plain lists (no timestamps) and once as TimestampedBatch.

    .venv/bin/python bench/event_time.py [--batch 512] [--records 1000000] [--json out.json]
    .venv/bin/python bench/event_time.py --job [--records 2000000] [--rounds 3]

With --job it runs the keyed count as a job on Spark (p=2, count sink, checkpoints every
second) with and without timestamps (a monotonous WatermarkStrategy at the source), rounds
alternating, and reports the steady-state records/s of each (bench/measure.py's run_job).

Stages (the keyed count's path, plus what only event-time jobs do):

  assign      WatermarkGeneration.assign: TimestampAssigner per record + bounded generator
  map         MapOperator.process_batch with to_pair (x -> (x % 10000, 1))
  writer      RecordWriter.process_batch, key-group routing into 2 channels (+ frame sends)
  pickle      frames.encode_frame((channel, batch)) + pickle.loads (one remote frame)
  reduce      KeyedReduceOperator.process_batch (rolling count per key, 10k keys)

The figure is ns per record, the best of 7 rounds that alternate between plain and
timestamped (a loaded machine disturbs both alike); "cost" is timestamped minus plain.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.jobs import add_counts, first, to_pair
from bench.micro import _Null, _time
from tidegate.common import Duration, WatermarkStrategy
from tidegate.runtime.frames import encode_frame
from tidegate.runtime.network import RecordWriter
from tidegate.runtime.operators import KeyedReduceOperator, MapOperator, OperatorRuntime
from tidegate.runtime.partitioners import KeyGroupStreamPartitioner
from tidegate.runtime.records import TimestampedBatch
from tidegate.runtime.timestamps import TimestampsAndWatermarksOperator


class _NullTransport:
    def send(self, channel: int, payload: object) -> float:
        return 0.0


def _stage_functions(batch: int, records: int, timestamped: bool) -> dict[str, tuple]:
    """stage -> (function, its batches), for plain or timestamped batches."""
    numbers = [list(range(i, min(i + batch, records))) for i in range(0, records, batch)]
    pairs = [[to_pair(x, 10_000) for x in b] for b in numbers]
    plain_numbers = [list(b) for b in numbers]
    if timestamped:
        numbers = [TimestampedBatch(b, [x * 10 for x in b]) for b in numbers]
        pairs = [TimestampedBatch(p, n.timestamps) for p, n in zip(pairs, numbers, strict=True)]
    stages: dict[str, tuple] = {}
    runtime = OperatorRuntime(0, 1, 128, 0)

    if timestamped:
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(
            Duration.of_seconds(1)
        ).with_timestamp_assigner(lambda x, _ts: x * 10)
        assign = TimestampsAndWatermarksOperator(strategy, 0, uid="ts", name="ts")
        assign.outputs = [_Null()]
        assign.initialize_state(runtime, None)
        assign.open()
        stages["assign"] = (assign.process_batch, plain_numbers)

    map_op = MapOperator(None, lambda x: to_pair(x, 10_000), None, uid="map", name="map")
    map_op.outputs = [_Null()]
    stages["map"] = (map_op.process_batch, numbers)

    part = KeyGroupStreamPartitioner(first)
    writer = RecordWriter(
        [(_NullTransport(), 0), (_NullTransport(), 1)],
        part.bind(2, 128),
        batch,
        part.bind_timestamped(2, 128),
    )
    stages["writer"] = (writer.process_batch, pairs)
    stages["pickle"] = (lambda b: pickle.loads(encode_frame((0, b), True)[0]), pairs)

    reduce_op = KeyedReduceOperator(None, add_counts, first, uid="count", name="count")
    reduce_op.initialize_state(runtime, None)
    reduce_op.outputs = [_Null()]
    reduce_op.open()
    stages["reduce"] = (reduce_op.process_batch, pairs)
    return stages


def _measure(batch: int, records: int, rounds: int = 7) -> tuple[dict, dict]:
    """ns per record of each stage, plain and timestamped, rounds alternating between the
    two (the machine's load hits both alike); the best round counts (least disturbed)."""
    variants = {v: _stage_functions(batch, records, v) for v in (False, True)}
    best: dict[bool, dict[str, float]] = {False: {}, True: {}}
    for _ in range(rounds):
        for variant, stages in variants.items():
            for name, (fn, batches) in stages.items():
                ns = _time(fn, batches, rounds=1)
                best[variant][name] = min(ns, best[variant].get(name, ns))
    return best[False], best[True]


def run_jobs(records: int, rounds: int) -> dict[str, list[float]]:
    """Steady-state records/s of the keyed count without and with timestamps, on Spark."""
    import tempfile

    from bench.jobs import JobParams, register_by_value
    from bench.measure import run_job

    register_by_value()
    rates: dict[str, list[float]] = {"keyed": [], "keyed-ts": []}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(rounds):
            for pipeline in rates:
                params = JobParams(pipeline, 2, 1000, "count", records)
                result = run_job(params, runner="spark", spark=None, work_root=work)
                assert result["exactly_once_ok"], result["error"]
                rates[pipeline].append(result["steady_rate"])
                print(f"  {pipeline:9s} {result['steady_rate']:12,.0f} records/s", flush=True)
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--job", action="store_true", help="run the keyed count job on Spark")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.job:
        rates = run_jobs(args.records, args.rounds)
        plain_rate = statistics.median(rates["keyed"])
        ts_rate = statistics.median(rates["keyed-ts"])
        print(
            f"keyed count p=2, median of {args.rounds}: {plain_rate:,.0f} -> {ts_rate:,.0f} "
            f"records/s with timestamps ({100 * (ts_rate / plain_rate - 1):+.1f}%)"
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rates, f)
        return 0
    plain, stamped = _measure(args.batch, args.records)
    print(f"ns per record, batches of {args.batch}, one core (best of 7, alternating)")
    print(f"  {'stage':8s} {'plain':>8s} {'timestamped':>12s} {'cost':>8s}")
    for name in stamped:
        p = plain.get(name)
        cost = "" if p is None else f"{stamped[name] - p:+8.1f}"
        shown = "-" if p is None else f"{p:8.1f}"
        print(f"  {name:8s} {shown:>8s} {stamped[name]:12.1f} {cost:>8s}")
    keyed = ("map", "writer", "pickle", "reduce")
    total_p, total_t = sum(plain[k] for k in keyed), sum(stamped[k] for k in keyed)
    print(
        f"  keyed count path: {total_p:.1f} -> {total_t:.1f} ns "
        f"({100 * (total_t / total_p - 1):+.1f}%); with assignment "
        f"{total_t + stamped['assign']:.1f} ns"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "plain": plain, "timestamped": stamped}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
