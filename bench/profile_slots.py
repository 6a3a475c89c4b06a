"""Profile the slot processes of a running benchmark job with py-spy (no changes to tidegate/).

    .venv/bin/pip install py-spy        # once
    .venv/bin/python bench/profile_slots.py [--runner local] [--sink file|count] [--seconds 10]

Runs the keyed count (source -> map to (key, 1) -> key_by -> reduce -> sink, --keys keys) at
p=2, waits until records reach the sink, then samples every slot process at once with
`py-spy record --gil --threads --format raw` (only the thread holding the GIL is sampled, so
the samples are where the process's Python CPU time goes). Prints, per slot process: how busy
its GIL was, the share per thread, and the top functions by self and inclusive time and the
hottest lines. Writes the collapsed stacks (`slot-<i>.raw`, loadable in speedscope or
flamegraph.pl) and `profile.json` to --out-dir.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import jobs
from bench.jobs import JobParams, build_env, first_record_times
from tidegate.common.configuration import Configuration

PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>\w+)\)(?:: (?P<name>.*))?$")
_BOOT = ("Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run")


def parse_raw(path: str) -> list[tuple[str, list[tuple[str, str, int | None]], int]]:
    """Collapsed stacks -> [(thread name, [(func, file, line), ...] root first, count)]."""
    stacks = []
    with open(path) as f:
        for ln in f:
            ln = ln.rstrip("\n")
            if not ln:
                continue
            body, _, count = ln.rpartition(" ")
            parts = body.split(";")
            thread = "?"
            m = _THREAD.match(parts[0])
            if m:
                thread = m["name"] or m["tid"]
                parts = parts[1:]
            frames = []
            for p in parts:
                fm = _FRAME.match(p)
                if fm:
                    line = int(fm["line"]) if fm["line"] else None
                    frames.append((fm["func"], _short(fm["file"]), line))
                else:
                    frames.append((p, "", None))
            stacks.append((thread, frames, int(count)))
    return stacks


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    if "/bench/" in path:
        return "bench/" + path.split("/bench/", 1)[1]
    return path


def analyse(stacks, duration_s: float, rate: int, top: int = 15) -> dict[str, Any]:
    total = sum(c for _, _, c in stacks)
    threads: collections.Counter = collections.Counter()
    self_fn: collections.Counter = collections.Counter()
    incl_fn: collections.Counter = collections.Counter()
    self_line: collections.Counter = collections.Counter()
    by_file: collections.Counter = collections.Counter()
    for thread, frames, count in stacks:
        threads[thread] += count
        frames = [fr for fr in frames if fr[0] not in _BOOT]
        if not frames:
            continue
        func, file, line = frames[-1]
        self_fn[f"{func} ({file})"] += count
        self_line[f"{func} ({file}:{line})"] += count
        by_file[file] += count
        for key in {f"{fn} ({fl})" for fn, fl, _ in frames}:
            incl_fn[key] += count

    def pct(counter):
        return [
            {"what": k, "samples": v, "pct": 100 * v / total if total else 0}
            for k, v in counter.most_common(top)
        ]

    return {
        "samples": total,
        "gil_busy_pct": 100 * total / (duration_s * rate) if duration_s else None,
        "threads": pct(threads),
        "self": pct(self_fn),
        "inclusive": pct(incl_fn),
        "lines": pct(self_line),
        "files": pct(by_file),
    }


def print_analysis(slot: int, pid: int, a: dict[str, Any]) -> None:
    print(
        f"\n=== slot {slot} (pid {pid}): {a['samples']} samples, GIL held "
        f"{a['gil_busy_pct']:.0f}% of the time ==="
    )
    for title, key in (
        ("threads (share of GIL-holding samples)", "threads"),
        ("self time by function", "self"),
        ("inclusive time by function", "inclusive"),
        ("self time by line", "lines"),
        ("self time by file", "files"),
    ):
        print(f"  -- {title}")
        for row in a[key][: 6 if key in ("threads", "files") else 12]:
            print(f"    {row['pct']:5.1f}%  {row['what']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runner", choices=["local", "spark"], default="local")
    ap.add_argument("--sink", choices=["file", "count"], default="file")
    ap.add_argument("--checkpoint-ms", type=int, default=1000, help="0: checkpointing off")
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (state size)")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--backend", choices=["hashmap", "rocksdb"], default="hashmap")
    ap.add_argument(
        "--changelog", action="store_true", help="state.backend.changelog.enabled (rocksdb)"
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="sampling duration")
    ap.add_argument("--rate", type=int, default=200, help="samples per second")
    ap.add_argument("--records", type=int, help="default: enough for warm-up + sampling")
    ap.add_argument("--no-gil", action="store_true", help="sample all active threads instead")
    ap.add_argument("--out-dir", default="/tmp/tidegate-profile")
    args = ap.parse_args(argv)
    if not os.path.exists(PY_SPY):
        print(f"py-spy not found at {PY_SPY}: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    jobs.register_by_value()
    os.makedirs(args.out_dir, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="profile-job-")
    rate_hint = 1_000_000 if args.sink == "count" else 600_000
    n = args.records or int(rate_hint * (args.seconds + 6))
    params = JobParams(
        "keyed", args.parallelism, args.checkpoint_ms or None, args.sink, n, keys=args.keys
    )
    spark = None
    if args.runner == "spark":
        from tidegate.deploy.spark_session import get_spark

        spark = get_spark(None, 2)
    env = build_env(params, runner=args.runner, work_dir=work_dir, spark=spark)
    env.configure(
        Configuration().add_all(
            {
                "state.backend.type": args.backend,
                "state.backend.changelog.enabled": str(args.changelog).lower(),
            }
        )
    )
    client = env.execute_async("profile")
    jm = client.jobmaster
    markers = os.path.join(work_dir, "markers")
    deadline = time.monotonic() + 120
    while not (os.path.isdir(markers) and first_record_times(markers, 0)):
        if jm.done.is_set() or time.monotonic() > deadline:
            print(f"job ended before records flowed: {jm.status} {jm.error}", file=sys.stderr)
            return 1
        time.sleep(0.01)
    time.sleep(1.0)  # past the first batches
    pids = dict(jm.slot_pids)
    procs = {}
    for slot, pid in sorted(pids.items()):
        cmd = [
            PY_SPY,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(args.seconds)),
            "--rate",
            str(args.rate),
            "--format",
            "raw",
            "--threads",
            "-o",
            os.path.join(args.out_dir, f"slot-{slot}.raw"),
        ]
        if not args.no_gil:
            cmd.append("--gil")
        procs[slot] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampling_started = time.time()
    errors = {s: p.communicate()[1].decode(errors="replace") for s, p in procs.items()}
    sampled_s = time.time() - sampling_started
    still_running = not jm.done.is_set()
    client.cancel() if still_running else None
    jm.done.wait(60)
    report: dict[str, Any] = {
        "params": {
            **vars(args),
            "records": n,
            "pipeline": f"keyed count {args.keys} keys p={args.parallelism} {args.backend}",
        },
        "job_still_running_at_end_of_sampling": still_running,
        "slots": {},
    }
    for slot, pid in sorted(pids.items()):
        raw = os.path.join(args.out_dir, f"slot-{slot}.raw")
        if not os.path.exists(raw):
            print(f"slot {slot}: py-spy failed: {errors[slot][-500:]}", file=sys.stderr)
            continue
        a = analyse(parse_raw(raw), min(args.seconds, sampled_s), args.rate)
        report["slots"][slot] = {"pid": pid, **a}
        print_analysis(slot, pid, a)
    if not still_running:
        print("\nnote: the job finished before sampling ended; raise --records", file=sys.stderr)
    with open(os.path.join(args.out_dir, "profile.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nraw stacks and profile.json in {args.out_dir}")
    shutil.rmtree(work_dir, ignore_errors=True)
    if spark is not None:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
