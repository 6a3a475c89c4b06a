"""Nexmark on tidegate: events/s per core of each query, next to a bare Python loop doing the
same work and to the published Flink 1.13 figures (bench/nexmark/README.md).

    .venv/bin/python bench/nexmark/run.py [--quick] [--queries q0,q5] [--backends hashmap,rocksdb]

Prints a table and writes JSON (default bench/results/nexmark.json): machine, git, arguments,
generator-only throughput, and per query the bare loop and every job run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

REPO = os.environ.get("TIDEGATE_BENCH_REPO") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
CODE = os.environ.get("TIDEGATE_BENCH_CODE") or REPO
sys.path.insert(0, CODE)
# Spark's Python workers import the event classes by name: the code under test goes first
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (CODE, os.environ.get("PYTHONPATH")) if p)

from bench.nexmark.generator import NexmarkConfig  # noqa: E402
from bench.nexmark.measure import (  # noqa: E402
    ALL_QUERIES,
    bare_rate,
    generator_rate,
    run_query_job,
    state_backend,
)
from bench.run import freeze_code, git_info, log, machine_info, start_spark, tree_sha256  # noqa: E402

#: the nexmark project's Flink 1.13 results (8 cores per node), events/s per core
FLINK_PER_CORE = {
    "q0": (150_000, 175_000),
    "q1": (150_000, 175_000),
    "q2": (150_000, 175_000),
    "q3": (150_000, 175_000),
    "q4": (34_000, 34_000),
    "q5": (22_000, 22_000),
    "q7": (12_000, 12_000),
}
#: rough events/s per slot on the 2-core dev box: sizes runs to about --seconds; a hint only
EST_RATE = {"q0": 200_000, "q1": 250_000, "q2": 350_000, "q3": 300_000, "q4": 170_000}
EST_RATE |= {"q5": 60_000, "q5-typed": 60_000, "q5-timers": 60_000}
EST_RATE_DEFAULT = 150_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: ~3 s per job, small loops")
    p.add_argument(
        "--queries",
        default=",".join(ALL_QUERIES),
        help="comma-separated (default: all, q5 also with declared types: q5-typed, and q5/q7/q8 "
        "also without the window API: q5-timers, q7-timers, q8-timers)",
    )
    p.add_argument("--backends", default="hashmap,rocksdb", help="skipped when not available")
    p.add_argument("--parallelism", type=int, default=1, help="slots per job (1 = one core)")
    p.add_argument("--checkpoint-ms", type=int, default=10_000)
    p.add_argument("--seconds", type=float, help="steady seconds per job (default 20; quick 3)")
    p.add_argument("--events", type=int, help="events per job (overrides --seconds)")
    p.add_argument("--bare-events", type=int, help="events of each bare loop (default 1M)")
    p.add_argument(
        "--event-rate",
        type=int,
        default=10_000_000,
        help="event-time events/s (nexmark's published runs: 10M)",
    )
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "nexmark.json"))
    p.add_argument("--work-dir", default=None)
    p.add_argument("--live-code", action="store_true", help="do not run on a frozen copy")
    args = p.parse_args(argv)
    args.queries = [q for q in args.queries.split(",") if q]
    unknown = sorted(set(args.queries) - set(ALL_QUERIES))
    if unknown:
        p.error(f"unknown queries {unknown}; choose from {sorted(ALL_QUERIES)}")
    args.backends = [b for b in args.backends.split(",") if b]
    if args.seconds is None:
        args.seconds = 3.0 if args.quick else 20.0
    if args.bare_events is None:
        args.bare_events = 200_000 if args.quick else 1_000_000
    return args


def job_events(args: argparse.Namespace, query: str) -> int:
    if args.events:
        return args.events
    rate = EST_RATE.get(query, EST_RATE_DEFAULT) * args.parallelism
    return int(rate * args.seconds) // 1000 * 1000


def run_suite(args: argparse.Namespace, config: NexmarkConfig, results: dict[str, Any]) -> None:
    results["generator"] = {
        "events": args.bare_events,
        "rate": generator_rate(config, args.bare_events),
    }
    log(f"generator alone: {results['generator']['rate'] / 1e3:.0f} k events/cpu-s")
    backends = [b for b in args.backends if state_backend(b) is not None]
    results["backends_skipped"] = sorted(set(args.backends) - set(backends))
    spark = start_spark(args, results)
    work_root = args.work_dir or tempfile.mkdtemp(prefix="tidegate-nexmark-")
    results["queries"] = {}
    for query in args.queries:
        events = job_events(args, query)
        bare, _ = bare_rate(query, config, args.bare_events)
        _, expected = bare_rate(query, config, events)  # the rows a job of `events` commits
        entry = {"bare_rate": bare, "expected_rows": expected, "runs": []}
        results["queries"][query] = entry
        log(f"{query}: bare loop {bare / 1e3:.0f} k events/cpu-s; job of {events} events")
        for backend in backends:
            r = run_query_job(
                query,
                backend,
                events=events,
                parallelism=args.parallelism,
                checkpoint_ms=args.checkpoint_ms,
                config=config,
                expected_rows=expected,
                spark=spark,
                work_root=work_root,
            )
            entry["runs"].append(r)
            rate = r["steady_rate"] or 0
            log(
                f"  {backend}: {rate / 1e3:.0f} k events/s, "
                f"{(r['events_per_cpu_s'] or 0) / 1e3:.0f} k events/cpu-s, "
                f"{r['completed_checkpoints']} "
                f"checkpoints, exact={r['exactly_once_ok']} {r['error'] or ''}"
            )
    spark.stop()
    if not args.work_dir:
        shutil.rmtree(work_root, ignore_errors=True)


def _k(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e3:.0f}k"


def print_table(results: dict[str, Any], parallelism: int) -> None:
    gen = results["generator"]["rate"]
    print(f"\nNexmark on tidegate, p={parallelism}; generator alone {_k(gen)} events/cpu-s")
    head = (
        f"{'query':<10}{'backend':<9}{'events':>9}{'ev/s/core':>10}{'ev/cpu-s':>9}"
        f"{'bare':>7}{'x bare':>7}{'Flink/core':>11}{'ckpts':>6}{'own':>5}{'others':>7}  exact"
    )
    print(head)
    print("-" * len(head))
    for query, entry in results["queries"].items():
        low, high = FLINK_PER_CORE.get(query.split("-")[0], (None, None))
        flink = "-" if low is None else _k(low) + (f"-{_k(high)}" if high != low else "")
        bare = entry["bare_rate"]
        for r in entry["runs"]:
            rate = (r["steady_rate"] or 0) / parallelism
            per_cpu = r["events_per_cpu_s"]
            ratio = f"{per_cpu / bare:.2f}" if per_cpu else "-"
            print(
                f"{query:<10}{r['backend']:<9}{r['events']:>9}{_k(rate):>10}{_k(per_cpu):>9}"
                f"{_k(bare):>7}{ratio:>7}{flink:>11}{r['completed_checkpoints']:>6}"
                f"{r['own_cores'] or 0:>5.2f}{r['other_cores'] or 0:>7.2f}  {r['exactly_once_ok']}"
            )
    print(
        "ev/s/core: steady wall-clock rate / parallelism; ev/cpu-s: events per CPU-second of "
        "the whole process tree (slots, driver, JVM; start-up included); bare: the same query "
        "in plain Python fed by the generator, events per CPU-second; x bare = ev/cpu-s / bare"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    freeze_code(args, os.path.join("bench", "nexmark", "run.py"))
    config = NexmarkConfig(first_event_rate=args.event_rate)
    started = time.time()
    results: dict[str, Any] = {
        "suite": "tidegate-nexmark",
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "config": vars(config),
        "machine": machine_info(),
        "git": git_info(),
        "code": {"tested_tree_sha256": tree_sha256(os.path.join(CODE, "tidegate"))},
        "flink_1_13_per_core": FLINK_PER_CORE,
        "notes": [
            "steady_rate = events / (last batch at the sink or source - first source batch)",
            "ev/s/core = steady_rate / parallelism (one slot per core); wall clock, so other "
            "users' load on the machine lowers it (see other_cores)",
            "events_per_cpu_s = events / CPU-seconds of the benchmark's process tree from "
            "submit to the end (slots, driver, Spark JVM, start-up): robust to that load",
            "bare = the plain-Python reference (bench/nexmark/reference.py) fed by the "
            "generator in one process: same events, same results, no engine",
        ],
    }
    run_suite(args, config, results)
    results["elapsed_s"] = time.time() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print_table(results, args.parallelism)
    log(f"done in {results['elapsed_s']:.0f}s; JSON: {os.path.abspath(args.out)}")
    cleanup = os.environ.get("TIDEGATE_BENCH_CLEANUP")
    if cleanup:
        shutil.rmtree(cleanup, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
