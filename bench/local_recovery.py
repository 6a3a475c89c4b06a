"""Recovery time with and without task-local recovery, for a keyed count with a large state.

    .venv/bin/python bench/local_recovery.py [--keys 1000000] [--repeats 3] [--out FILE]

An unbounded keyed count (p=2, CountSink, source at --rate records/s) runs until two
checkpoints completed, then one slot's worker is SIGKILLed (bench/measure.py run_recovery); the
time from the kill to RUNNING and to the first record at the sink after the restore is measured
with `state.backend.local-recovery` off (every state file read from the checkpoint storage) and
on (read from the workers' local copies, after checking their checksums). Runs alternate
between the two settings. Prints a table, writes JSON (default
bench/results/local_recovery.json). Nothing is asserted.

On one machine the checkpoint storage is a local directory too, so "remote" here costs what a
local read costs: the difference this shows is the overhead of the local path (a checksum pass
over each copy), not the download time saved when the storage is a remote filesystem.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.common import job_arguments, report_header, start, write_report  # noqa: E402
from bench.jobs import JobParams  # noqa: E402
from bench.measure import run_recovery, summary  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_arguments(__doc__, "local_recovery.json", rate=400_000)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start(args)
    work_root = tempfile.mkdtemp(prefix="tidegate-bench-lr-")
    # a checkpoint every 5 s: the kill comes after two full-state checkpoints
    params = JobParams("keyed", 2, 5000, "count", None, keys=args.keys, rate=args.rate, restarts=3)
    settings = {"remote": "false", "local": "true"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    for rep in range(args.repeats):
        for name, enabled in settings.items():
            configuration = {
                "state.backend.local-recovery": enabled,
                "taskmanager.state.local.root-dirs": os.path.join(work_root, "local"),
            }
            r = run_recovery(
                params,
                runner=args.runner,
                spark=spark,
                work_root=work_root,
                configuration=configuration,
                timeout_s=600,
            )
            runs[name].append(r)
            print(
                f"[{rep + 1}/{args.repeats}] {name}: kill -> RUNNING {r.get('to_running_s')}, "
                f"-> first record {r.get('to_first_record_s')}, state files (local, remote) "
                f"{r.get('restored_files')}, error {r.get('error')}",
                flush=True,
            )
    result: dict[str, Any] = {
        **report_header(args),
        "runs": runs,
        "summary": {
            name: {
                "to_running_s": summary([r.get("to_running_s") for r in rs]),
                "to_first_record_s": summary([r.get("to_first_record_s") for r in rs]),
            }
            for name, rs in runs.items()
        },
    }
    print(f"\nRecovery after kill -9, keyed count p=2, {args.keys:,} keys ({args.runner})")
    print(f"{'state read from':<18}{'-> RUNNING (s)':>16}{'-> first record (s)':>21}")
    for name, s in result["summary"].items():
        running, first = s["to_running_s"], s["to_first_record_s"]
        print(f"{name:<18}{running['median'] or 0:>16.2f}{first['median'] or 0:>21.2f}")
    write_report(args.out, result)


if __name__ == "__main__":
    main()
