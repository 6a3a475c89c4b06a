"""Start-up: the time from `env.execute()` to the first record at the sink, and what it is made
of (the JobMaster's `JobStats.startup`, tidegate/metrics/startup.py), for W1 (keyed count,
CountSink, 10k keys, checkpoints every second) on the embedded Spark session:

* cold: the first job of a new Python process (the JVM and the SparkContext start);
* warm: the next job in the same process (the session is reused);
* restore: the same process, an unbounded W1 whose slot is killed (SIGKILL) after two
  checkpoints: from the kill to the first record after the restore.

Each repeat is a new process (`--child`), so every cold start is one. Variants compare settings
the user can choose (round-robin, one process each): `default`; `no-archive` (the driver JVM
without its class-data-sharing archive, deploy/class_archive.py: C1 only); `no-preload`
(PySpark's own worker daemon instead of tidegate's, which imports tidegate before forking
workers); `full-jit` (the driver JVM with the C2 compiler too); `serial-gc` (the default's JVM
options and the serial collector). Before the first measured process, one unmeasured process
starts the archive's writer if this installation has none yet, and the measured ones wait
until it is written. Besides wall times, each process records the CPU seconds of its whole
tree (Python, the JVM, the worker daemon and workers) to the end of the cold job, and the load
average.

    python bench/startup.py                                  # default, 3 processes (~1 min)
    python bench/startup.py --variants default,no-archive --repeats 3
    python bench/startup.py --runner local                   # the process runner (no JVM)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import jobs
from bench.common import REPO, report_header, run_process, write_report
from bench.jobs import JobParams
from bench.measure import run_job, run_recovery, tree_cpu_seconds
from tidegate.common.configuration import CLASS_ARCHIVE
from tidegate.deploy import class_archive
from tidegate.deploy.java import find_java, use_java
from tidegate.deploy.spark_session import archive_plan
from tidegate.metrics.startup import process_start_time

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "no-archive": {CLASS_ARCHIVE: "false"},
    "no-preload": {"spark.python.daemon.module": "pyspark.daemon"},
    "full-jit": {"spark.driver.extraJavaOptions": "-XX:+TieredCompilation"},
    "serial-gc": {},
}
#: JVM options a variant adds to the default's (the archive's too)
EXTRA_JAVA_OPTIONS = {"serial-gc": "-XX:+UseSerialGC"}
#: the table's breakdown: (column, phase of JobStats.startup); "first record" is the sink's
PHASES = (
    ("restart", "restart"),
    ("session", "session_ready"),
    ("deploy", "stage_submitted"),
    ("workers", "task_started"),
    ("load job", "job_loaded"),
    ("register", "running"),
    ("connect+restore", "tasks_created"),
)
SCENARIOS = ("cold", "warm", "restore")


def w1(records: int | None, parallelism: int, rate: float | None = None) -> JobParams:
    return JobParams(
        "keyed", parallelism, 1000, "count", records, rate=rate, restarts=1 if rate else 0
    )


def breakdown(result: dict[str, Any], attempt: int, start: float) -> dict[str, Any]:
    """`result` (run_job / run_recovery) as the table shows it: seconds from `start` to the
    first record, the JobMaster's phases of `attempt`, and the sink's first record after the
    subtasks were created."""
    startup = next((a for a in result.get("startup", []) if a["attempt"] == attempt), None)
    first = result.get("first_record")
    row: dict[str, Any] = {
        "to_first_record_s": None if first is None else first - start,
        "error": result.get("error"),
    }
    if startup is None:
        return row
    row["phases"] = startup["phases"]
    if startup["failed"] is not None:
        row["phases"] = {"detected": startup["failed"] - start, **startup["phases"]}
    created = startup["marks"]["tasks_created"]
    row["phases"]["first_record"] = None if first is None or created is None else first - created
    return row


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One process: a cold job, a warm job, a restore; the process's own start too."""
    process_started = process_start_time()
    jobs.register_by_value()
    conf = dict(VARIANTS[args.variant])
    extra = EXTRA_JAVA_OPTIONS.get(args.variant)
    if extra is not None:
        planned = archive_plan(use_java(), conf, os.environ)
        conf["spark.driver.extraJavaOptions"] = f"{planned.java_options} {extra}"
    work = tempfile.mkdtemp(prefix="tidegate-startup-")
    params = w1(args.records, args.parallelism)
    out: dict[str, Any] = {"variant": args.variant, "load_before": os.getloadavg()[0]}
    cold = run_job(params, runner=args.runner, spark=None, work_root=work, configuration=conf)
    out["cold"] = breakdown(cold, 0, cold["submitted"])
    out["cold"]["wall_s"] = cold["wall_s"]
    out["cold"]["exactly_once_ok"] = cold["exactly_once_ok"]
    out["cold"]["cpu_s"] = tree_cpu_seconds(os.getpid())
    out["load_cold"] = os.getloadavg()[0]
    if process_started is not None:  # what a user running `python job.py` waits for
        out["process_end_to_end_s"] = cold["submitted"] + cold["wall_s"] - process_started
        out["process_to_execute_s"] = cold["submitted"] - process_started
    warm = run_job(params, runner=args.runner, spark=None, work_root=work, configuration=conf)
    out["warm"] = breakdown(warm, 0, warm["submitted"])
    out["warm"]["wall_s"] = warm["wall_s"]
    out["warm"]["exactly_once_ok"] = warm["exactly_once_ok"]
    recovery = run_recovery(
        w1(None, args.parallelism, rate=args.rate),
        runner=args.runner,
        spark=None,
        work_root=work,
        configuration=conf,
    )
    killed = recovery.get("killed")
    out["restore"] = breakdown(recovery, 1, killed) if killed else {"error": recovery["error"]}
    out["load_after"] = os.getloadavg()[0]
    return out


def run_child(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--variant",
        variant,
        "--runner",
        args.runner,
        "--records",
        str(args.records),
        "--parallelism",
        str(args.parallelism),
        "--rate",
        str(args.rate),
    ]
    return {"variant": variant, **run_process(command, args.timeout)}


def ensure_archive(args: argparse.Namespace) -> None:
    """If this installation has no class-data-sharing archive yet: one unmeasured process,
    whose session starts the archive's writer, and a wait for the writer to publish it."""
    jars = class_archive.spark_jars_directory()
    key = class_archive.installation_key(find_java().java, jars, os.environ, {})
    directory = class_archive.cache_directory(os.environ)
    if class_archive.published(directory, key) is not None:
        return
    print(f"  writing the class-data-sharing archive into {directory} (one unmeasured run)")
    run_child(args, "default")
    deadline = time.monotonic() + 900  # at nice 19 on a loaded machine it takes minutes
    while class_archive.published(directory, key) is None and time.monotonic() < deadline:
        time.sleep(1)
    if class_archive.published(directory, key) is None:
        print("  (no archive was written: the default variant runs without one)")


def median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def table(runs: list[dict[str, Any]], variants: list[str]) -> list[dict[str, Any]]:
    """Per variant and scenario: medians of the first-record time and of each phase."""
    rows = []
    for variant in variants:
        mine = [r for r in runs if r.get("variant") == variant and "cold" in r]
        for scenario in SCENARIOS:
            cells = [r[scenario] for r in mine if scenario in r]
            row: dict[str, Any] = {
                "variant": variant,
                "scenario": scenario,
                "n": len(cells),
                "to_first_record_s": median([c.get("to_first_record_s") for c in cells]),
                "errors": [c["error"] for c in cells if c.get("error")],
            }
            for name in ("detected", *(p for _, p in PHASES), "first_record"):
                row[name] = median([c.get("phases", {}).get(name) for c in cells])
            if scenario == "cold":
                row["wall_s"] = median([c.get("wall_s") for c in cells])
                row["cpu_s"] = median([c.get("cpu_s") for c in cells])
                row["process_end_to_end_s"] = median([r.get("process_end_to_end_s") for r in mine])
            elif scenario == "warm":
                row["wall_s"] = median([c.get("wall_s") for c in cells])
            row["load"] = median([r.get("load_cold") for r in mine])
            rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    columns = [("detected", "detected"), *PHASES, ("first rec", "first_record")]
    head = f"{'variant':<11}{'scenario':<9}{'to 1st rec':>11}{'job wall':>9}{'process':>9}"
    head += f"{'cpu':>7}"
    print(head + "".join(f"{c:>{max(len(c) + 1, 8)}}" for c, _ in columns) + f"{'load':>6}")
    for r in rows:
        line = (
            f"{r['variant']:<11}{r['scenario']:<9}{cell(r['to_first_record_s']):>11}"
            f"{cell(r.get('wall_s')):>9}{cell(r.get('process_end_to_end_s')):>9}"
            f"{cell(r.get('cpu_s')):>7}"
        )
        line += "".join(f"{cell(r[key]):>{max(len(c) + 1, 8)}}" for c, key in columns)
        print(line + f"{cell(r['load']):>6}")
        for error in r["errors"]:
            print(f"    error: {error}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--variants", default="default", help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--repeats", type=int, default=3, help="processes per variant")
    p.add_argument("--records", type=int, default=1_000_000, help="W1 events of cold/warm jobs")
    p.add_argument("--parallelism", type=int, default=1)
    p.add_argument("--rate", type=float, default=200_000, help="restore job: source records/s")
    p.add_argument("--runner", choices=["spark", "local"], default="spark")
    p.add_argument("--timeout", type=float, default=300, help="seconds per process")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "startup.json"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}")
    if args.runner == "spark":
        ensure_archive(args)
    runs = []
    for _ in range(args.repeats):
        for variant in variants:
            started = time.time()
            runs.append(run_child(args, variant))
            print(f"  {variant}: {time.time() - started:.1f} s", flush=True)
    rows = table(runs, variants)
    print()
    print_table(rows)
    write_report(args.out, {**report_header(args), "rows": rows, "runs": runs})


if __name__ == "__main__":
    main()
