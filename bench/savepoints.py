"""Savepoint and restore time for a keyed count with a large state.

    .venv/bin/python bench/savepoints.py [--keys 1000000] [--runner spark|local] [--out FILE]

An unbounded keyed count (p=2, CountSink, source at --rate records/s) runs until every key has
state; then it measures, on the running job: a savepoint (trigger to the future's result), a
stop-with-savepoint (to the job FINISHED); then a new job restored from that savepoint: submit
to RUNNING and to the first record at the sink. The state's size is reported with each, and a
checkpoint of the same state (its duration_ms) for comparison. Prints a table, writes JSON
(default bench/results/savepoints.json). Nothing is asserted.
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return job_arguments(__doc__, "savepoints.json", rate=300_000).parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start(args)
    work = tempfile.mkdtemp(prefix="tidegate-bench-sp-")
    params = JobParams("keyed", 2, 2000, "count", None, keys=args.keys, rate=args.rate)
    result: dict[str, Any] = report_header(args)

    # Step 1: run until every key has state and a checkpoint of the full state completed
    env = build_env(params, runner=args.runner, work_dir=os.path.join(work, "job1"), spark=spark)
    env.set_default_savepoint_directory(os.path.join(work, "savepoints"))
    client = env.execute_async("savepoint bench")
    probe = Probe(client.jobmaster)
    wait(probe, lambda: probe.jm.stats.records_read >= 2 * args.keys)
    first_full = probe.jm.stats.completed_checkpoints + 1
    wait(probe, lambda: probe.jm.stats.completed_checkpoints > first_full)
    cp = probe.jm.stats.last_checkpoint
    result["checkpoint"] = {"duration_s": cp.duration_ms / 1000, "size_bytes": cp.size_bytes}

    # Step 2: a savepoint of the running job, then stop-with-savepoint
    started = time.time()
    path = client.trigger_savepoint().result(timeout=600)
    result["savepoint"] = {"seconds": time.time() - started, "size_bytes": du_bytes(path)}
    started = time.time()
    stop_path = client.stop_with_savepoint(False).result(timeout=600)
    result["stop_with_savepoint"] = {
        "seconds": time.time() - started,
        "size_bytes": du_bytes(stop_path),
    }

    # Step 3: restore a new job from the stop savepoint
    env = build_env(
        params,
        runner=args.runner,
        work_dir=os.path.join(work, "job2"),
        spark=spark,
        restore_path=stop_path,
    )
    submitted = time.time()
    client = env.execute_async("restored")
    probe = Probe(client.jobmaster)
    markers = os.path.join(work, "job2", "markers")
    wait(probe, lambda: os.path.isdir(markers) and first_record_times(markers, 0))
    running = probe.first_time("RUNNING")
    result["restore"] = {
        "to_running_s": running - submitted if running else None,
        "to_first_record_s": min(first_record_times(markers, 0)) - submitted,
    }
    client.cancel().result(timeout=120)
    shutil.rmtree(work, ignore_errors=True)

    mb = 1 / 1e6
    print(f"\nSavepoints and restore, keyed count p=2, {args.keys:,} keys ({args.runner})")
    print(f"{'step':<34}{'seconds':>9}{'MB':>9}")
    rows = [
        (
            "checkpoint (trigger -> _metadata)",
            result["checkpoint"]["duration_s"],
            result["checkpoint"]["size_bytes"],
        ),
        (
            "savepoint (trigger -> path)",
            result["savepoint"]["seconds"],
            result["savepoint"]["size_bytes"],
        ),
        (
            "stop-with-savepoint (-> FINISHED)",
            result["stop_with_savepoint"]["seconds"],
            result["stop_with_savepoint"]["size_bytes"],
        ),
        ("restore: submit -> RUNNING", result["restore"]["to_running_s"], None),
        ("restore: submit -> first record", result["restore"]["to_first_record_s"], None),
    ]
    for label, seconds, size in rows:
        size_s = "" if size is None else f"{size * mb:,.1f}"
        print(f"{label:<34}{seconds:>9.2f}{size_s:>9}")
    write_report(args.out, result)


if __name__ == "__main__":
    main()
