"""Checkpoints under backpressure: aligned vs unaligned vs aligned-with-timeout.

    .venv/bin/python bench/backpressure.py [--quick] [--runner spark|local] [--out FILE]

Part 1 (backpressure): a keyed count (p=2) whose last stage sleeps `--slow-us` per record, fed
faster than it can go, checkpointing every 500 ms. Reports per mode the checkpoints completed,
their end-to-end duration, the slowest subtask's alignment and start delay, the in-flight bytes
persisted, and the steady throughput.
Part 2 (cost): the same keyed count without the slow stage and unthrottled, checkpointing
every 200 ms: the throughput of each mode, against checkpointing off and a bare Python loop.

Prints a table and writes JSON (default bench/results/backpressure.json). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.common import (  # noqa: E402
    job_arguments,
    percentile,
    report_header,
    start,
    write_report,
)
from bench.jobs import JobParams  # noqa: E402
from bench.measure import bare_loop, run_job  # noqa: E402

MODES = ("aligned", "unaligned", "timeout-50")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_arguments(__doc__, "backpressure.json")
    p.add_argument("--quick", action="store_true", help="short runs (about a minute in all)")
    p.add_argument("--slow-us", type=int, default=100, help="sleep per record in the slow stage")
    p.add_argument("--seconds", type=float, help="seconds of input per run (default 12; quick 4)")
    args = p.parse_args(argv)
    if args.seconds is None:
        args.seconds = 4.0 if args.quick else 12.0
    return args


def describe(result: dict[str, Any]) -> dict[str, Any]:
    # checkpoint 1..n-1 (the last is the final checkpoint of the bounded job, always aligned)
    cps = [c for c in result["checkpoints"] if c.get("sync_ms") is not None][:-1]
    durations = [c["duration_ms"] for c in cps]
    return {
        "completed": result["completed_checkpoints"],
        "failed": result["failed_checkpoints"],
        "duration_median_ms": statistics.median(durations) if durations else None,
        "duration_p90_ms": percentile(sorted(durations), 0.9),
        "duration_max_ms": max(durations) if durations else None,
        "alignment_median_ms": statistics.median([c["alignment_ms"] for c in cps]) if cps else None,
        "start_delay_median_ms": (
            statistics.median([c["start_delay_ms"] for c in cps]) if cps else None
        ),
        "inflight_median_bytes": (
            statistics.median([c["channel_state_bytes"] for c in cps]) if cps else None
        ),
        "unaligned_checkpoints": sum(1 for c in cps if c["unaligned"]),
        "steady_rate": result["steady_rate"],
        "exactly_once_ok": result["exactly_once_ok"],
        "error": result["error"],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start(args)
    work_root = tempfile.mkdtemp(prefix="tidegate-bench-bp-")
    capacity = 2 * 1e6 / args.slow_us  # records/s the slow stage can take at p=2
    rate = 1.5 * capacity
    base = JobParams(
        "keyed", 2, 500, "count", int(rate * args.seconds), rate=rate, slow_us=args.slow_us
    )
    report: dict[str, Any] = {
        **report_header(args),
        "backpressure": {},
        "cost": {},
    }

    print(
        f"\nPart 1: checkpoints under backpressure (slow stage {args.slow_us} us/record, "
        f"capacity ~{capacity:,.0f} rec/s, input {rate:,.0f} rec/s, interval 500 ms)"
    )
    print(
        f"{'mode':<12}{'done':>5}{'fail':>5}{'dur p50':>9}{'p90':>8}{'max':>8}"
        f"{'align':>8}{'delay':>8}{'inflight':>10}{'rec/s':>10}  ok"
    )
    for mode in MODES:
        result = run_job(
            replace(base, alignment=mode), runner=args.runner, spark=spark, work_root=work_root
        )
        d = describe(result)
        report["backpressure"][mode] = {"summary": d, "run": result}
        print(
            f"{mode:<12}{d['completed']:>5}{d['failed']:>5}{_ms(d['duration_median_ms']):>9}"
            f"{_ms(d['duration_p90_ms']):>8}{_ms(d['duration_max_ms']):>8}"
            f"{_ms(d['alignment_median_ms']):>8}{_ms(d['start_delay_median_ms']):>8}"
            f"{_kb(d['inflight_median_bytes']):>10}{_rate(d['steady_rate']):>10}  "
            f"{'yes' if d['exactly_once_ok'] else 'NO ' + str(d['error'])}"
        )

    n = 300_000 if args.quick else 2_000_000
    bare = bare_loop(n)
    report["cost"]["bare_loop_rate"] = bare
    print(
        f"\nPart 2: throughput cost (keyed p=2, CountSink, unthrottled, {n:,} records, "
        f"checkpoint every 200 ms); bare Python loop {bare:,.0f} rec/s"
    )
    print(f"{'mode':<12}{'rec/s':>12}{'vs bare':>9}{'vs off':>8}{'ckpts':>7}  ok")
    off = None
    for mode in ("off", *MODES):
        params = JobParams("keyed", 2, None if mode == "off" else 200, "count", n)
        if mode != "off":
            params = replace(params, alignment=mode)
        result = run_job(params, runner=args.runner, spark=spark, work_root=work_root)
        rate_m = result["steady_rate"]
        if mode == "off":
            off = rate_m
        report["cost"][mode] = result
        print(
            f"{mode:<12}{_rate(rate_m):>12}{_ratio(rate_m, bare):>9}{_ratio(rate_m, off):>8}"
            f"{result['completed_checkpoints']:>7}  {'yes' if result['exactly_once_ok'] else 'NO'}"
        )
    write_report(args.out, report)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _kb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1024:,.0f}K"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(v: float | None, ref: float | None) -> str:
    return "-" if not v or not ref else f"{v / ref:.2f}"


if __name__ == "__main__":
    main()
