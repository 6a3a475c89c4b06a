"""W1 on tidegate (Spark and local runners), a bare CPython loop and Bytewax, in one run.

W1: N (`--records`, 10 M) numbers -> `(i % 10_000, 1)` -> key_by -> running count emitting
`(key, count)` per event -> a counting two-phase-commit sink (bench/jobs.py: CountSink), one
worker (`--parallelism` 1), a checkpoint every second. Bytewax runs the same dataflow
(bench/bytewax_w1.py: its epochs every second, recovery on) from a separate venv,
bench/.venvs/bytewax, which this script creates and fills from PyPI (`bytewax==BYTEWAX`); if
that fails, Bytewax is skipped with the reason. Each engine runs in a new process:

* throughput: events/s over the N-event job, (a) `job`: N / the job's own run time (tidegate:
  `execute()` on a warm session, to its end; Bytewax: its run call) and (b) `steady`: N / the
  time from the first to the last record at the sink; ratio to the bare loop's events/s;
* start-up (`--startup-records`, 1 M): the whole process, from its start (interpreter, imports,
  JVM) to the job's end, as `python job.py` takes it, and the CPU seconds its process tree used
  meanwhile (tidegate: Python, the JVM, Spark's Python workers); for tidegate on Spark also the
  same job again in the same process (`warm`: the session reused).

    python bench/compare.py                          # ~2 min on 2 cores
    python bench/compare.py --records 2000000        # shorter
    python bench/compare.py --no-bytewax
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import jobs
from bench.common import REPO, report_header, run_process, write_report
from bench.jobs import JobParams
from bench.measure import bare_loop, run_job, tree_cpu_seconds
from tidegate.metrics.startup import process_start_time

BYTEWAX = "0.21.1"
VENV = os.path.join(REPO, "bench", ".venvs", "bytewax")
VENV_PYTHON = os.path.join(VENV, "bin", "python")


def w1(records: int, parallelism: int) -> JobParams:
    return JobParams("keyed", parallelism, 1000, "count", records)


# children --------------------------------------------------------------------------------------
def tidegate_child(args: argparse.Namespace) -> dict[str, Any]:
    """One process: the start-up job (cold), again (warm, Spark), then the N-event job."""
    started = process_start_time()
    jobs.register_by_value()
    work = tempfile.mkdtemp(prefix="tidegate-compare-")
    out: dict[str, Any] = {}

    def job(records: int) -> dict[str, Any]:
        r = run_job(w1(records, args.parallelism), runner=args.runner, spark=None, work_root=work)
        if r["error"] or not r["exactly_once_ok"]:
            raise RuntimeError(f"W1 on {args.runner} failed: {r['error'] or 'wrong count'}")
        return r

    cold = job(args.startup_records)
    out["process_s"] = cold["submitted"] + cold["wall_s"] - started if started else None
    out["process_cpu_s"] = tree_cpu_seconds(os.getpid())
    if args.runner == "spark":
        out["warm_job_s"] = job(args.startup_records)["wall_s"]
    big = job(args.records)
    out["job_s"] = big["wall_s"]
    out["steady_s"] = big["steady_s"]
    out["exactly_once_ok"] = big["exactly_once_ok"]
    return out


def run_tidegate(args: argparse.Namespace, runner: str) -> dict[str, Any]:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--runner", runner]
    for flag in ("records", "startup_records", "parallelism"):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return run_process(command, args.timeout)


# Bytewax ---------------------------------------------------------------------------------------
def bytewax_python() -> tuple[str | None, str]:
    """The bench venv's Python with Bytewax installed (created on first use), or None and why."""
    check = [
        VENV_PYTHON,
        "-c",
        f"import importlib.metadata as m; assert m.version('bytewax') == '{BYTEWAX}'",
    ]
    if os.path.exists(VENV_PYTHON) and subprocess.run(check, capture_output=True).returncode == 0:
        return VENV_PYTHON, "present"
    print(f"  creating {VENV} with bytewax=={BYTEWAX} from PyPI ...", flush=True)
    steps = [
        [sys.executable, "-m", "venv", VENV],
        [VENV_PYTHON, "-m", "pip", "install", "--quiet", f"bytewax=={BYTEWAX}"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return None, f"{' '.join(step)} failed: {done.stderr.strip()[-500:]}"
    return VENV_PYTHON, "installed"


def run_bytewax(python: str, args: argparse.Namespace, records: int) -> dict[str, Any]:
    script = os.path.join(REPO, "bench", "bytewax_w1.py")
    spawned = time.time()
    r = run_process([python, script, "--records", str(records)], args.timeout)
    if "error" in r:
        return r
    if not r["exactly_once_ok"]:
        return {"error": f"Bytewax committed {r['committed_records']} of {records} records"}
    return {
        "process_s": r["ended"] - spawned,  # its interpreter's start too
        "process_cpu_s": r["cpu_s"],
        "job_s": r["ended"] - r["run_started"],
        "steady_s": r["last_record"] - r["first_record"],
    }


# table -----------------------------------------------------------------------------------------
def rows_of(args: argparse.Namespace, results: dict[str, dict[str, Any]], bare: float) -> list:
    rows = []
    bytewax_s = results.get("bytewax", {}).get("process_s")
    for name, r in results.items():
        if "error" in r:
            rows.append({"engine": name, "error": r["error"]})
            continue
        job = args.records / r["job_s"] if r.get("job_s") else None
        steady = args.records / r["steady_s"] if r.get("steady_s") else None
        rows.append(
            {
                "engine": name,
                "job_ev_s": job,
                "steady_ev_s": steady,
                "job_x_bare": job / bare if job else None,
                "steady_x_bare": steady / bare if steady else None,
                "startup_process_s": r.get("process_s"),
                "startup_x_bytewax": (r["process_s"] / bytewax_s)
                if bytewax_s and r.get("process_s")
                else None,
                "startup_cpu_s": r.get("process_cpu_s"),
                "warm_job_s": r.get("warm_job_s"),
            }
        )
    return rows


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]], bare: float) -> None:
    def f(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    n, m = f"{args.records / 1e6:g}M", f"{args.startup_records / 1e6:g}M"
    print(
        f"\n{'engine':<16}{'job ev/s':>12}{'x bare':>8}{'steady ev/s':>13}{'x bare':>8}"
        f"{m + ' process s':>15}{'x bytewax':>10}{'cpu s':>7}{'warm job s':>11}   (W1, {n} events)"
    )
    print(f"{'bare CPython':<16}{bare:>12,.0f}{1:>8.2f}{bare:>13,.0f}{1:>8.2f}")
    for r in rows:
        if "error" in r:
            print(f"{r['engine']:<16}error: {r['error']}")
            continue
        print(
            f"{r['engine']:<16}{f(r['job_ev_s'], ',.0f'):>12}{f(r['job_x_bare'], '.2f'):>8}"
            f"{f(r['steady_ev_s'], ',.0f'):>13}{f(r['steady_x_bare'], '.2f'):>8}"
            f"{f(r['startup_process_s'], '.2f'):>15}{f(r['startup_x_bytewax'], '.2f'):>10}"
            f"{f(r['startup_cpu_s'], '.2f'):>7}"
            f"{f(r['warm_job_s'], '.2f'):>11}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000, help="events of the throughput job")
    p.add_argument("--startup-records", type=int, default=1_000_000, help="events, start-up job")
    p.add_argument("--parallelism", type=int, default=1)
    p.add_argument("--no-bytewax", action="store_true", help="skip Bytewax")
    p.add_argument("--timeout", type=float, default=600, help="seconds per process")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "compare.json"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--runner", choices=["spark", "local"], default="spark", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(tidegate_child(args)), flush=True)
        return
    load = {"before": os.getloadavg()[0]}
    bare = bare_loop(args.records)
    results: dict[str, dict[str, Any]] = {}
    for runner in ("spark", "local"):
        print(f"  tidegate {runner} ...", flush=True)
        results[f"tidegate {runner}"] = run_tidegate(args, runner)
    bytewax_note = "skipped (--no-bytewax)"
    if not args.no_bytewax:
        python, bytewax_note = bytewax_python()
        if python is None:
            print(f"  Bytewax skipped: {bytewax_note}")
        else:
            print("  bytewax ...", flush=True)
            startup = run_bytewax(python, args, args.startup_records)
            big = run_bytewax(python, args, args.records)
            results["bytewax"] = (
                {
                    **big,
                    "process_s": startup["process_s"],
                    "process_cpu_s": startup["process_cpu_s"],
                }
                if "error" not in startup
                else startup
            )
    load["after"] = os.getloadavg()[0]
    rows = rows_of(args, results, bare)
    print_table(args, rows, bare)
    print(f"load average: {load['before']:.1f} before, {load['after']:.1f} after")
    report = {**report_header(args), "bytewax": f"{BYTEWAX}: {bytewax_note}", "load": load}
    write_report(args.out, {**report, "bare_ev_s": bare, "rows": rows, "results": results})


if __name__ == "__main__":
    main()
