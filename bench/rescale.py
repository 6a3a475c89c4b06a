"""Rescale time: restoring a keyed count's savepoint with another parallelism vs the same one.

    .venv/bin/python bench/rescale.py [--keys 1000000] [--repeats 2] [--runner spark|local]

For each first parallelism A in (2, 4): an unbounded keyed count (CountSink, source at --rate
records/s) runs at A until every key has state, then stops with a savepoint. Then, --repeats
rounds: new jobs restore each savepoint at B = A (a plain restore) and at the other
parallelism (2 -> 4, 4 -> 2: a rescale, where each new subtask reads the key groups it owns
from one or several old state files and operator state is redistributed). Each restore is
measured from submit to RUNNING and to the first record at the sink (the marker TimedSink
writes), then cancelled. Prints a table, writes JSON (default bench/results/rescale.json).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.common import (  # noqa: E402
    du_bytes,
    job_arguments,
    report_header,
    start,
    wait,
    write_report,
)
from bench.jobs import JobParams, build_env, first_record_times  # noqa: E402
from bench.measure import Probe  # noqa: E402

TRANSITIONS = {2: (2, 4), 4: (4, 2)}  # first parallelism -> the restores measured


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_arguments(__doc__, "rescale.json", rate=300_000)
    p.add_argument("--repeats", type=int, default=2, help="restores per transition")
    return p.parse_args(argv)


def take_savepoint(params: JobParams, args, work: str, spark: Any) -> dict[str, Any]:
    """Step 1: run at params.parallelism until every key has state; stop with a savepoint."""
    env = build_env(params, runner=args.runner, work_dir=os.path.join(work, "first"), spark=spark)
    env.set_default_savepoint_directory(os.path.join(work, "savepoints"))
    client = env.execute_async(f"rescale bench p={params.parallelism}")
    probe = Probe(client.jobmaster)
    wait(probe, lambda: probe.jm.stats.records_read >= 2 * args.keys)
    started = time.time()
    path = client.stop_with_savepoint(False).result(timeout=600)
    return {"path": path, "seconds": time.time() - started, "size_bytes": du_bytes(path)}


def restore(params: JobParams, args, work: str, spark: Any, path: str) -> dict[str, float]:
    """Step 2: a new job restored from `path` at params.parallelism: submit -> first record."""
    env = build_env(params, runner=args.runner, work_dir=work, spark=spark, restore_path=path)
    submitted = time.time()
    client = env.execute_async(f"restored at p={params.parallelism}")
    probe = Probe(client.jobmaster)
    markers = os.path.join(work, "markers")
    wait(probe, lambda: os.path.isdir(markers) and first_record_times(markers, 0))
    running = probe.first_time("RUNNING")
    result = {
        "to_running_s": running - submitted if running else None,
        "to_first_record_s": min(first_record_times(markers, 0)) - submitted,
    }
    client.cancel().result(timeout=120)
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start(args)
    work = tempfile.mkdtemp(prefix="tidegate-bench-rescale-")
    result: dict[str, Any] = {**report_header(args), "runs": []}
    # both savepoints first: the p=4 run also warms up Spark's Python workers for 4 slots, so
    # no restore pays for starting them
    savepoints = {}
    for first in TRANSITIONS:
        params = JobParams("keyed", first, 2000, "count", None, keys=args.keys, rate=args.rate)
        savepoints[first] = take_savepoint(params, args, os.path.join(work, f"p{first}"), spark)
    for repeat in range(args.repeats):  # round-robin, so noise spreads over every transition
        for first, targets in TRANSITIONS.items():
            for target in targets:
                run_dir = os.path.join(work, f"p{first}", f"to{target}-{repeat}")
                params = JobParams(
                    "keyed", target, 2000, "count", None, keys=args.keys, rate=args.rate
                )
                times = restore(params, args, run_dir, spark, savepoints[first]["path"])
                result["runs"].append(
                    {"from": first, "to": target, "repeat": repeat, **times,
                     "savepoint_bytes": savepoints[first]["size_bytes"]}
                )  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)

    print(f"\nRestore of a keyed count savepoint, {args.keys:,} keys ({args.runner})")
    print(f"{'restore':<22}{'kind':<10}{'-> RUNNING s':>14}{'-> first record s':>19}{'MB':>8}")
    for run in result["runs"]:
        kind = "same" if run["from"] == run["to"] else "rescale"
        running = run["to_running_s"]
        print(
            f"{run['from']} -> {run['to']} (#{run['repeat']})".ljust(22)
            + f"{kind:<10}"
            + (f"{running:>14.2f}" if running is not None else f"{'-':>14}")
            + f"{run['to_first_record_s']:>19.2f}"
            + f"{run['savepoint_bytes'] / 1e6:>8.1f}"
        )
    write_report(args.out, result)


if __name__ == "__main__":
    main()
