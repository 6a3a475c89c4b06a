"""Why the hottest per-record loops keep one loop per batch kind (docs/architecture.md, "The
path of one record"): key routing and filtering of plain and timestamped batches, as tidegate
does them (one specialised loop per kind) against one shared loop for both kinds, side by side
with a bare Python loop doing the same routing.

    .venv/bin/python bench/record_paths.py [--batch 512] [--batches 2000] [--json out.json]

Figures are ns per record, the best of 5 rounds, on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from itertools import compress

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tidegate.runtime.partitioners import KeyGroupStreamPartitioner
from tidegate.runtime.records import TimestampedBatch
from tidegate.state.keygroups import KeyGroupAssigner

CHANNELS, MAX_PARALLELISM = 4, 128


def _first(record: tuple) -> int:
    return record[0]


def _keep(record: tuple) -> bool:
    return record[1] % 3 != 0


def _shared_route(subtask_of, select):
    """One loop for both kinds: the channels are picked once, values and (if any) timestamps
    follow the picks."""

    def route(records, timestamps, buffers, ts_buffers):
        picks = list(map(subtask_of, map(select, records)))
        for r, c in zip(records, picks, strict=True):
            buffers[c].append(r)
        if timestamps is not None:
            for t, c in zip(timestamps, picks, strict=True):
                ts_buffers[c].append(t)

    return route


def _best(fn, batches: list, rounds: int = 5) -> float:
    n = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for b in batches:
            fn(b)
        best = min(best, (time.perf_counter() - started) / n * 1e9)
    return best


def measure(batch: int, count: int) -> dict[str, float]:
    records = [(i % 10_000, i) for i in range(batch)]
    plain = [list(records) for _ in range(count)]
    stamped = [TimestampedBatch(records, list(range(batch))) for _ in range(count)]
    partitioner = KeyGroupStreamPartitioner(_first)
    route = partitioner.bind(CHANNELS, MAX_PARALLELISM)
    route_ts = partitioner.bind_timestamped(CHANNELS, MAX_PARALLELISM)
    shared = _shared_route(KeyGroupAssigner(MAX_PARALLELISM, CHANNELS).subtask, _first)
    subtask_of = KeyGroupAssigner(MAX_PARALLELISM, CHANNELS).subtask

    def buffers() -> list[list]:
        return [[] for _ in range(CHANNELS)]

    def bare(records: list) -> None:
        out = buffers()
        for r in records:
            out[subtask_of(r[0])].append(r)

    def filter_plain(records: list) -> list:
        return [r for r in records if _keep(r)]

    def filter_shared(records: list) -> tuple:
        keep = list(map(_keep, records))
        ts = getattr(records, "timestamps", None)
        return list(compress(records, keep)), None if ts is None else list(compress(ts, keep))

    def filter_stamped(records: TimestampedBatch) -> TimestampedBatch:
        out = TimestampedBatch()
        for r, t in zip(records, records.timestamps, strict=True):
            if _keep(r):
                out.append(r)
                out.timestamps.append(t)
        return out

    return {
        "route plain, bare loop": _best(bare, plain),
        "route plain, tidegate": _best(lambda b: route(b, buffers()), plain),
        "route plain, shared loop": _best(lambda b: shared(b, None, buffers(), None), plain),
        "route stamped, tidegate": _best(
            lambda b: route_ts(b, b.timestamps, buffers(), buffers()), stamped
        ),
        "route stamped, shared loop": _best(
            lambda b: shared(b, b.timestamps, buffers(), buffers()), stamped
        ),
        "filter plain, tidegate": _best(filter_plain, plain),
        "filter plain, shared loop": _best(filter_shared, plain),
        "filter stamped, tidegate": _best(filter_stamped, stamped),
        "filter stamped, shared loop": _best(filter_shared, stamped),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    results = measure(args.batch, args.batches)
    bare = results["route plain, bare loop"]
    print(f"ns per record, batches of {args.batch}, one core (best of 5)")
    for name, ns in results.items():
        print(f"  {name:28s} {ns:7.1f} ns   {ns / bare:5.2f}x the bare routing loop")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "ns_per_record": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
