"""Async I/O against a bare Python loop: N lookups of a local asyncio TCP service answering
each request after a fixed latency (bench/lookup_service.py, 20 ms by default).

    .venv/bin/python bench/async_io.py [--n 10000] [--latency-ms 20] [--runner local|spark]

* baseline: a bare Python loop doing the same requests one by one over a blocking socket;
  it runs `--baseline-n` of them (default 250, ~5 s) and is extrapolated to N (N x the
  measured time per request; `--baseline-n N` measures all, ~N x latency).
* plain asyncio: a program doing the same requests on one event loop, at most the largest
  capacity at once (another process): what one process can do on this machine.
* tidegate: datagen(0..N-1) -> AsyncDataStream (unordered or ordered, `Lookup`) -> a counting
  sink, parallelism 1, per capacity (`--capacities`, default 1,10,100; capacity 1 runs
  `--baseline-n` records, as it is as sequential as the loop). Figures: the job's wall time
  (`execute()`, with starting the slot), the span from the first to the last result at the sink
  (the async stage; the source reads faster than any capacity drains), requests/s over that
  span, and the speed-up over the loop.

Prints a table and writes JSON (default bench/results/async_io.json). Nothing asserts a limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cloudpickle

from bench import jobs, lookup_service
from bench.common import report_header, write_report
from bench.lookup_service import Lookup, LookupServer, sequential_lookups
from tidegate.common import Configuration, Time
from tidegate.datastream import AsyncDataStream, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def baseline(server: LookupServer, n: int) -> dict:
    started = time.perf_counter()
    answers = sequential_lookups(server.host, server.port, range(n))
    seconds = time.perf_counter() - started
    assert answers == [k * k for k in range(n)]
    return {"requests": n, "seconds": seconds, "per_request_ms": seconds / n * 1000}


def plain_asyncio(server: LookupServer, n: int, capacity: int) -> float:
    """Seconds a plain asyncio program in another process takes for the same requests."""
    code = (
        "from bench.lookup_service import concurrent_lookups; "
        f"print(concurrent_lookups({server.host!r}, {server.port}, range({n}), {capacity}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def run_job(server: LookupServer, args: argparse.Namespace, n: int, capacity: int, ordered: bool):
    markers = tempfile.mkdtemp(prefix="async-bench-")
    conf = Configuration().set_string("execution.runner", args.runner)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    ds = env.from_source(DataGeneratorSource(lambda i: i, count=n), None, "numbers")
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    looked_up = wait(ds, Lookup(server.host, server.port), Time.seconds(60), capacity)
    looked_up.sink_to(jobs.TimedSink(jobs.CountSink(os.path.join(markers, "count")), markers))
    before = server.requests
    started = time.perf_counter()
    env.execute(f"async io bench c={capacity}")
    wall = time.perf_counter() - started
    stats = jobs.read_sink_stats(markers)
    assert stats["count"] == n, stats
    assert server.requests - before == n
    span = stats["last"] - stats["first"]
    return {"wall_s": wall, "span_s": span, "requests_per_s": n / span if span > 0 else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=10_000, help="requests per tidegate run")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--baseline-n", type=int, default=250, help="requests the bare loop runs")
    p.add_argument("--capacities", default="1,10,100")
    p.add_argument("--repeats", type=int, default=2, help="runs per case (median reported)")
    p.add_argument("--runner", choices=["local", "spark"], default="local")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "async_io.json"))
    args = p.parse_args()
    jobs.register_by_value()
    cloudpickle.register_pickle_by_value(lookup_service)  # slots cannot import `bench`
    if args.runner == "spark":
        from tidegate.deploy.spark_session import get_spark

        get_spark("local[2]", 2)

    report = report_header(args)
    rows = []
    with LookupServer(latency_ms=args.latency_ms) as server:
        base = baseline(server, args.baseline_n)
        per_request_s = base["seconds"] / base["requests"]
        report["baseline"] = base
        rows.append(
            (
                "bare loop, sequential",
                args.n,
                "-",
                per_request_s * args.n,
                None,
                1 / per_request_s,
                1.0,
                f"extrapolated from {base['requests']}",
            )
        )
        top = max(int(c) for c in args.capacities.split(","))
        plain = statistics.median(plain_asyncio(server, args.n, top) for _ in range(args.repeats))
        report["plain_asyncio"] = {"requests": args.n, "capacity": top, "seconds": plain}
        rows.append(
            (
                "plain asyncio program",
                args.n,
                top,
                plain,
                None,
                args.n / plain,
                args.n / plain * per_request_s,
                "another process, a semaphore",
            )
        )
        cases = []
        for capacity in [int(c) for c in args.capacities.split(",")]:
            cases.append(("unordered", capacity))
        cases.append(("ordered", max(int(c) for c in args.capacities.split(","))))
        report["runs"] = []
        for mode, capacity in cases:
            n = args.baseline_n if capacity == 1 else args.n
            samples = [
                run_job(server, args, n, capacity, mode == "ordered") for _ in range(args.repeats)
            ]
            span = statistics.median(s["span_s"] for s in samples)
            wall = statistics.median(s["wall_s"] for s in samples)
            rate = n / span
            report["runs"].append(
                {"mode": mode, "capacity": capacity, "requests": n, "samples": samples}
            )
            rows.append(
                (
                    f"tidegate {mode}",
                    n,
                    capacity,
                    wall,
                    span,
                    rate,
                    rate * per_request_s,
                    f"{args.n} requests: ~{args.n / rate:.1f} s",
                )
            )
    header = ("case", "requests", "capacity", "wall s", "span s", "req/s", "x loop", "note")
    print(f"\nlookups of a local service with {args.latency_ms:g} ms latency, runner {args.runner}")
    print(f"{header[0]:<24}{header[1]:>9}{header[2]:>9}{header[3]:>9}{header[4]:>9}"
          f"{header[5]:>9}{header[6]:>8}  {header[7]}")  # fmt: skip
    for case, n, capacity, wall, span, rate, speedup, note in rows:
        span_text = "-" if span is None else f"{span:.2f}"
        print(
            f"{case:<24}{n:>9}{capacity!s:>9}{wall:>9.2f}{span_text:>9}{rate:>9.0f}"
            f"{speedup:>8.1f}  {note}"
        )
    report["table"] = [dict(zip(header, row, strict=True)) for row in rows]
    write_report(args.out, report)


if __name__ == "__main__":
    main()
