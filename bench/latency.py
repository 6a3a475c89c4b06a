"""Latency of the keyed count (W1) at p=2: event creation -> processed by the last operator, and
-> visible at the sink (its commit), at 10 / 50 / 90 % of the maximum throughput.

    PYTHONPATH=. .venv/bin/python bench/latency.py [--quick] [--seconds S] [--runner spark|local]

The job is bench/jobs.py's keyed count with events stamped with their creation time
(bench/stamped.py): a source creating `(index, created_ns)` on a fixed schedule (open loop: an
event's creation time is its place on the schedule, however late the source polls it), map to
`(key, 1, created)`, key_by, reduce (the count keeps the stamp of its last event), and a sink
that logs when each record was written (processed by the last operator: the sink's writer,
chained after the reduce) and when its checkpoint's commit made it visible.

1. maximum throughput: the source unthrottled, checkpoints every 1 s (aligned), per buffer
   timeout (0, 1, 10, 100 ms, -1 = only full buffers); `--max-rate R` skips this and takes R;
2. at 10 / 50 / 90 % of the maximum (buffer timeout 10 ms): checkpoints every 1 s vs off;
3. at 50 %, checkpoints every 1 s: each buffer timeout;
4. the bare baseline: the same open-loop events handed from one thread to another through a
   queue (a poll's due events per put), the consumer doing the keyed count by hand and logging
   the same latency, at the same event rates, and unthrottled for its maximum.

Percentiles cover the events created from `--warmup` seconds after the first one to 1 s before
the last (start-up and the final checkpoint excluded). Each figure is one run; the load average
before the run is printed beside it (the machine is shared). Prints tables, writes JSON
(default bench/results/latency.json) and a chart (bench/results/latency.svg).
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import asdict
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import svg  # noqa: E402
from bench.common import (  # noqa: E402
    job_arguments,
    percentile,
    report_header,
    start,
    write_report,
)
from bench.jobs import JobParams  # noqa: E402
from bench.measure import run_job  # noqa: E402
from bench.stamped import LatencyLogs, ScheduledReader, ScheduledSplit, read_latency_logs  # noqa: E402

LOADS = (0.1, 0.5, 0.9)
TIMEOUTS = (0, 1, 10, 100, -1)
CHECKPOINT_MS = 1000
#: events created in the last second are left out (their commit is the final checkpoint's)
TAIL_S = 1.0
#: the window after a checkpoint's trigger in which a late record counts as "at a checkpoint"
CHECKPOINT_WINDOW_MS = 200


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_arguments(__doc__, "latency.json")
    p.add_argument("--quick", action="store_true", help="short runs (about 2 minutes in all)")
    p.add_argument("--seconds", type=float, help="seconds of input per run (default 10; quick 5)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds left out at the start")
    p.add_argument(
        "--max-records", type=int, help="records of a maximum-throughput run (default 3M)"
    )
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument(
        "--max-rate",
        type=float,
        help="take this as the maximum throughput (records/s) instead of measuring it: the\n"
        "loads are shares of it (e.g. the highest rate the open-loop input sustains)",
    )
    args = p.parse_args(argv)
    if args.seconds is None:
        args.seconds = 5.0 if args.quick else 10.0
    if args.max_records is None:
        args.max_records = 1_000_000 if args.quick else 3_000_000
    return args


# the engine ----------------------------------------------------------------------------------
def run(
    args: argparse.Namespace,
    spark: Any,
    work_root: str,
    rate: float | None,
    checkpoint_ms: int | None,
    timeout_ms: int,
) -> dict[str, Any]:
    records = args.max_records if rate is None else int(rate * args.seconds)
    params = JobParams(
        "keyed-stamped",
        2,
        checkpoint_ms,
        "count",
        records,
        keys=args.keys,
        rate=rate,
        buffer_timeout_ms=timeout_ms,
    )

    def collect(work_dir: str) -> LatencyLogs | None:
        if rate is None:  # a maximum-throughput run: its latencies are queueing only
            return None
        return read_latency_logs(os.path.join(work_dir, "latency"))

    result = run_job(params, runner=args.runner, spark=spark, work_root=work_root, collect=collect)
    ours = os.path.join(REPO, "tidegate")
    if any(code != ours for code in result["slot_code"]):
        raise RuntimeError(
            f"the slots ran tidegate from {result['slot_code']}, not {ours}: run the benchmark "
            f"with PYTHONPATH={REPO} (Spark's workers import the installed tidegate otherwise)"
        )
    logs = result.pop("collected")
    triggers = [c["timestamp_ms"] for c in result["checkpoints"]]
    out = {
        "label": params.label,
        "params": asdict(params),
        "steady_rate": result["steady_rate"],
        "exactly_once_ok": result["exactly_once_ok"],
        "error": result["error"],
        "load_before": result["load_before"],
        "load_after": result["load_after"],
        "own_cores": result["own_cores"],
        "other_cores": result["other_cores"],
        "checkpoints": len(triggers),
        "alignment_ms_median": _median([c.get("alignment_ms") for c in result["checkpoints"]]),
        "sync_ms_median": _median([c.get("sync_ms") for c in result["checkpoints"]]),
        "async_ms_median": _median([c.get("async_ms") for c in result["checkpoints"]]),
        "duration_ms_median": _median([c.get("duration_ms") for c in result["checkpoints"]]),
    }
    if logs is not None:
        out.update(latency_stats(logs, args.warmup, triggers))
        if checkpoint_ms is None:  # only the final checkpoint commits: not a visible latency
            out["visible"] = None
    return out


def latency_stats(
    logs: LatencyLogs, warmup_s: float, triggers_ms: list[int] | None = None
) -> dict[str, Any]:
    """Processing and visible latency (ms) of the events in the measured window, and how many
    of the processing latency's slowest 1 % were processed within CHECKPOINT_WINDOW_MS after a
    checkpoint's trigger (with the p99 of the events processed elsewhere)."""
    if not logs.created:
        return {"processing": None, "visible": None, "window_events": 0}
    lo = min(logs.created) + int(warmup_s * 1e9)
    hi = max(logs.created) - int(TAIL_S * 1e9)
    pairs = [(c, p) for c, p in zip(logs.created, logs.processed, strict=True) if lo <= c <= hi]
    processing = sorted(p - c for c, p in pairs)
    visible = sorted(v - c for c, v in logs.visible if lo <= c <= hi)
    stats: dict[str, Any] = {
        "window_events": len(pairs),
        "window_rate": len(pairs) / ((hi - lo) / 1e9) if hi > lo else None,
        "processing": _summary_ms(processing),
        "visible": _summary_ms(visible) if logs.visible else None,
        #: events per source poll that returned any (the whole run)
        "events_per_poll": logs.polls[1] / logs.polls[0] if logs.polls and logs.polls[0] else None,
    }
    p99 = percentile(processing, 0.99)
    if triggers_ms and p99 is not None:
        windows = [(t * 1_000_000, (t + CHECKPOINT_WINDOW_MS) * 1_000_000) for t in triggers_ms]

        def near_checkpoint(processed: int) -> bool:
            return any(a <= processed <= b for a, b in windows)

        slow = [(c, p) for c, p in pairs if p - c >= p99]
        elsewhere = sorted(p - c for c, p in pairs if not near_checkpoint(p))
        stats["slowest_1pct_near_checkpoint"] = (
            sum(1 for _c, p in slow if near_checkpoint(p)) / len(slow) if slow else None
        )
        stats["processing_p99_away_from_checkpoints_ms"] = _ms(percentile(elsewhere, 0.99))
    return stats


def _summary_ms(ordered: list[int]) -> dict[str, Any] | None:
    if not ordered:
        return None
    return {
        "p50": _ms(percentile(ordered, 0.5)),
        "p99": _ms(percentile(ordered, 0.99)),
        "max": _ms(ordered[-1]),
        "n": len(ordered),
    }


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _median(values: list[float | None]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    return percentile(vals, 0.5)


# the bare baseline ------------------------------------------------------------------------------
def bare_handoff(count: int, rate: float | None, keys: int, batch: int = 512) -> LatencyLogs:
    """`count` events on the source's schedule (the same reader), put on a queue by one thread
    a poll at a time; another thread does the keyed count and logs creation and processing
    times as the sink does."""
    handoff: queue.Queue = queue.Queue(maxsize=64)
    reader = ScheduledReader([ScheduledSplit(0, 0, count)], 1, rate)
    created, processed = array("q"), array("q")

    def produce() -> None:
        while (events := reader.poll_batch(batch)) is not None:
            if events:
                handoff.put(events)
        handoff.put(None)

    def consume() -> None:
        counts: dict[int, int] = {}
        while (events := handoff.get()) is not None:
            out = []
            for index, stamp in events:
                key = index % keys
                n = counts.get(key, 0) + 1
                counts[key] = n
                out.append((key, n, stamp))
            created.extend([r[-1] for r in out])
            processed.extend([time.time_ns()] * len(out))

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return LatencyLogs(list(created), list(processed), [])


def bare_max_rate(count: int, keys: int) -> float:
    started = time.perf_counter()
    bare_handoff(count, None, keys)
    return count / (time.perf_counter() - started)


# main -------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start(args)
    work_root = tempfile.mkdtemp(prefix="tidegate-bench-latency-")
    report: dict[str, Any] = {**report_header(args), "max": {}, "load": {}, "timeout": {}}
    try:
        n = args.max_records
        if args.max_rate:
            print(f"\n1. maximum throughput: taken as {args.max_rate:,.0f} rec/s (--max-rate)")
        else:
            print(f"\n1. maximum throughput (unthrottled, {n:,} records, 1 s checkpoints)")
            print(f"{'buffer timeout':<16}{'rec/s':>12}{'cores':>6}{'other':>6}{'load':>6}  ok")
        for t in () if args.max_rate else TIMEOUTS:
            r = run(args, spark, work_root, None, CHECKPOINT_MS, t)
            report["max"][str(t)] = r
            print(
                f"{_timeout(t):<16}{_num(r['steady_rate']):>12}{_f(r['own_cores']):>6}"
                f"{_f(r['other_cores']):>6}{r['load_before']:>6.1f}  {_ok(r)}"
            )
        top = args.max_rate or report["max"]["10"]["steady_rate"]
        if not top:
            raise RuntimeError(f"no maximum throughput measured: {report['max']['10']['error']}")
        report["max_rate"] = top

        print(f"\n2. latency by load (max {top:,.0f} rec/s, buffer timeout 10 ms; ms)")
        _header("load / checkpoints")
        for load in LOADS:
            for ck in (CHECKPOINT_MS, None):
                r = run(args, spark, work_root, load * top, ck, 10)
                report["load"][f"{load:.0%} {'ckpt 1s' if ck else 'ckpt off'}"] = r
                _row(f"{load:.0%} {'ckpt 1 s' if ck else 'ckpt off'}", r)

        print("\n3. latency by buffer timeout (50 % load, 1 s checkpoints; ms)")
        _header("buffer timeout")
        for t in TIMEOUTS:
            r = report["load"]["50% ckpt 1s"] if t == 10 else None
            if r is None:
                r = run(args, spark, work_root, 0.5 * top, CHECKPOINT_MS, t)
            report["timeout"][str(t)] = r
            _row(_timeout(t), r)

        print("\n4. bare baseline: two threads and a queue, same events (ms)")
        bare_n = min(args.max_records, 1_000_000)
        bare_top = bare_max_rate(bare_n, args.keys)
        report["bare"] = {"max_rate": bare_top, "load": {}}
        print(f"maximum {bare_top:,.0f} events/s ({bare_n:,} events)")
        _header("load (engine's rates)")
        for load in LOADS:
            load_before = os.getloadavg()[0]
            logs = bare_handoff(int(load * top * args.seconds), load * top, args.keys)
            r = {**latency_stats(logs, args.warmup), "load_before": load_before}
            report["bare"]["load"][f"{load:.0%}"] = r
            _row(f"{load:.0%} ({load * top:,.0f}/s)", r)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    write_report(args.out, report)
    chart = os.path.splitext(args.out)[0] + ".svg"
    with open(chart, "w") as f:
        f.write(plot(report))
    print(f"wrote {chart}")


def plot(report: dict[str, Any]) -> str:
    def p(r: dict[str, Any] | None, kind: str, q: str) -> float | None:
        summary = (r or {}).get(kind)
        return None if summary is None else summary[q]

    loads = [f"{x:.0%}" for x in LOADS]
    by_load = svg.Panel(
        "Processing latency by load (buffer timeout 10 ms)",
        "load (share of the maximum throughput)",
        "ms (log)",
        loads,
        log_y=True,
    )
    for ck in ("ckpt 1s", "ckpt off"):
        runs = [report["load"].get(f"{x} {ck}") for x in loads]
        by_load.series[f"p50 {ck}"] = [p(r, "processing", "p50") for r in runs]
        by_load.series[f"p99 {ck}"] = [p(r, "processing", "p99") for r in runs]
    bare = [report.get("bare", {}).get("load", {}).get(x) for x in loads]
    by_load.series["p99 bare threads"] = [p(r, "processing", "p99") for r in bare]
    timeouts = [str(t) for t in TIMEOUTS]
    trade = svg.Panel(
        "Buffer timeout: latency at 50 % load",
        "buffer timeout (ms; -1: only full buffers)",
        "ms (log)",
        [_timeout(t) for t in TIMEOUTS],
        log_y=True,
    )
    runs = [report["timeout"].get(t) for t in timeouts]
    trade.series["processing p50"] = [p(r, "processing", "p50") for r in runs]
    trade.series["processing p99"] = [p(r, "processing", "p99") for r in runs]
    trade.series["visible p99"] = [p(r, "visible", "p99") for r in runs]
    throughput = svg.Panel(
        "Buffer timeout: maximum throughput",
        "buffer timeout (ms; -1: only full buffers)",
        "records/s",
        [_timeout(t) for t in TIMEOUTS],
    )
    throughput.series["max records/s (1 s checkpoints)"] = [
        (report["max"].get(t) or {}).get("steady_rate") for t in timeouts
    ]
    panels = [by_load, trade]
    if report["max"]:  # measured (not given with --max-rate)
        panels.append(throughput)
    return svg.render(panels, "tidegate latency: keyed count, p=2 (bench/latency.py)")


# printing ---------------------------------------------------------------------------------------
def _header(first: str) -> None:
    print(
        f"{first:<22}{'rec/s':>9}{'proc p50':>10}{'p99':>8}{'max':>8}"
        f"{'vis p50':>9}{'p99':>8}{'max':>8}{'@ckpt':>7}{'p99 away':>9}{'align':>7}"
        f"{'cores':>6}{'other':>6}{'ev/poll':>8}{'load':>6}  ok"
    )


def _row(name: str, r: dict[str, Any]) -> None:
    proc, vis = r.get("processing") or {}, r.get("visible") or {}
    near = r.get("slowest_1pct_near_checkpoint")
    print(
        f"{name:<22}{_num(r.get('window_rate')):>9}{_f(proc.get('p50')):>10}"
        f"{_f(proc.get('p99')):>8}{_f(proc.get('max')):>8}{_f(vis.get('p50')):>9}"
        f"{_f(vis.get('p99')):>8}{_f(vis.get('max')):>8}"
        f"{'-' if near is None else f'{near:.0%}':>7}"
        f"{_f(r.get('processing_p99_away_from_checkpoints_ms')):>9}"
        f"{_f(r.get('alignment_ms_median')):>7}{_f(r.get('own_cores')):>6}"
        f"{_f(r.get('other_cores')):>6}{_f(r.get('events_per_poll')):>8}"
        f"{r['load_before']:>6.1f}  {_ok(r)}"
    )


def _timeout(t: int) -> str:
    return "-1 (full)" if t == -1 else f"{t} ms"


def _ok(r: dict[str, Any]) -> str:
    if "exactly_once_ok" not in r:
        return ""
    return "yes" if r["exactly_once_ok"] else f"NO {r.get('error')}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _f(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"


if __name__ == "__main__":
    main()
