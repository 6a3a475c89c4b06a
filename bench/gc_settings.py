"""The slots' garbage-collector settings (tidegate.python.gc-threshold, runtime/collector.py):
W1 with Python's own collector settings (`0`) against tidegate's default (freeze + young
collections every 50,000 allocations), side by side, and the bare loop.

    PYTHONPATH=. .venv/bin/python bench/gc_settings.py [--records N] [--repeats R] [--runner R]

W1 = bench/jobs.py's keyed count (10k keys, CountSink, checkpoints every 1 s), p = 1 and 2,
the two settings interleaved in every round. Figures per run: the steady rate (first to last
record at the sink) and the events per CPU-second of the whole process tree (slots, JVM,
driver: what a loaded machine disturbs least); medians over the rounds, and each setting's
ratio to Python's settings and to the bare loop (bench/measure.py). JSON in
bench/results/gc_settings.json.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import job_arguments, report_header, start, write_report
from bench.jobs import JobParams
from bench.measure import bare_loop, run_job

SETTINGS = {"python": "0", "tidegate": "50000"}


def main() -> None:
    p = job_arguments(__doc__, "gc_settings.json")
    p.add_argument("--records", type=int, default=4_000_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    spark = start(args)
    root = tempfile.mkdtemp(prefix="gc-settings-")
    bare = statistics.median(bare_loop(args.records) for _ in range(3))
    runs: dict[tuple[int, str], list[dict]] = {}
    for round_ in range(args.repeats):
        for parallelism in (1, 2):
            for name, threshold in SETTINGS.items():
                params = JobParams("keyed", parallelism, 1000, "count", args.records)
                r = run_job(
                    params,
                    runner=args.runner,
                    spark=spark,
                    work_root=root,
                    configuration={"tidegate.python.gc-threshold": threshold},
                )
                if not r["exactly_once_ok"] or r["error"]:
                    raise SystemExit(
                        f"run failed: {r['error']} (exactly once: {r['exactly_once_ok']})"
                    )
                cpu_s = (r["own_cores"] or 0) * r["wall_s"]
                run = {
                    "steady": r["steady_rate"],
                    "per_cpu_s": args.records / cpu_s if cpu_s else None,
                    "others": r["other_cores"],
                }
                runs.setdefault((parallelism, name), []).append(run)
                print(
                    f"[{round_ + 1}/{args.repeats}] p={parallelism} {name:8s} steady "
                    f"{run['steady'] / 1e6:5.2f} M/s, {run['per_cpu_s'] / 1e6:5.2f} M ev/CPU-s, "
                    f"other cores {run['others']:.2f}",
                    flush=True,
                )
    rows = []
    print(f"\nbare loop: {bare / 1e6:.2f} M ev/s")
    print(f"{'p':>2} {'settings':9s} {'steady M/s':>10} {'x python':>9} {'x bare':>7} "
          f"{'M ev/CPU-s':>10} {'x python':>9}")  # fmt: skip
    for parallelism in (1, 2):
        base = runs[(parallelism, "python")]
        base_steady = statistics.median(r["steady"] for r in base)
        base_cpu = statistics.median(r["per_cpu_s"] for r in base)
        for name in SETTINGS:
            steady = statistics.median(r["steady"] for r in runs[(parallelism, name)])
            per_cpu = statistics.median(r["per_cpu_s"] for r in runs[(parallelism, name)])
            rows.append(
                {
                    "parallelism": parallelism,
                    "settings": name,
                    "steady": steady,
                    "per_cpu_s": per_cpu,
                    "steady_x_python": steady / base_steady,
                    "per_cpu_x_python": per_cpu / base_cpu,
                    "steady_x_bare": steady / bare,
                    "runs": runs[(parallelism, name)],
                }
            )
            print(
                f"{parallelism:>2} {name:9s} {steady / 1e6:10.2f} {steady / base_steady:9.2f} "
                f"{steady / bare:7.2f} {per_cpu / 1e6:10.2f} {per_cpu / base_cpu:9.2f}"
            )
    write_report(args.out, {**report_header(args), "bare": bare, "rows": rows})


if __name__ == "__main__":
    main()
