"""What the benchmarks share: the Spark job benchmarks' (backpressure, savepoints,
local_recovery, rescale) command line, starting the runner and polling a running job; the
connector benchmarks' interleaved rates and ratio table; writing the JSON report."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import jobs
from bench.measure import Probe
from bench.run import git_info, machine_info

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_arguments(doc: str, out_name: str, rate: float | None = None) -> argparse.ArgumentParser:
    """--runner and --out (default bench/results/`out_name`), and with a default `rate`, the
    state size and input rate of a keyed count (--keys, --rate)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    if rate is not None:
        p.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (state size)")
        p.add_argument("--rate", type=float, default=rate, help="source records/s")
    p.add_argument("--runner", choices=["spark", "local"], default="spark")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", out_name))
    return p


def start(args: argparse.Namespace) -> Any:
    """Make the bench jobs picklable by value and start Spark if it is the runner (None if not)."""
    jobs.register_by_value()
    if args.runner != "spark":
        return None
    from tidegate.deploy.spark_session import get_spark

    return get_spark("local[4]", 4)


def run_process(command: list[str], timeout: float) -> dict[str, Any]:
    """Run a benchmark process (`command`) off the repository, with the repository on its
    PYTHONPATH: the last JSON line it printed, or {"error": ...} if it failed."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.getenv("PYTHONPATH")]))
    )
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir()
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    return json.loads(lines[-1])


def report_header(args: argparse.Namespace) -> dict[str, Any]:
    """The start of every JSON report: machine facts, git state, the arguments."""
    return {"machine": machine_info(), "git": git_info(), "args": vars(args)}


def write_report(path: str, report: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"\nwrote {path}")


def per_second(fn: Callable[[], int]) -> float:
    """Records per second of `fn()` (which returns how many records it handled)."""
    start = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - start)


def interleaved(runs: dict[str, Callable[[], int]], repeats: int) -> dict[str, dict[str, Any]]:
    """Each of `runs` `repeats` times, interleaved; per run its records/s: median and samples."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(per_second(run))
    return {name: {"median": statistics.median(v), "samples": v} for name, v in samples.items()}


def print_ratios(unit: str, results: dict[str, dict[str, Any]], base: str, other: str) -> None:
    """Per case of `results` (as `interleaved` gives them): the medians of `base` and `other`
    and their ratio other / base."""
    width = max(len(unit), *map(len, results)) + 2
    print(f"\n{unit:<{width}}{base:>14}{other:>14}{'ratio':>8}")
    for case, r in results.items():
        b, o = r[base]["median"], r[other]["median"]
        print(f"{case:<{width}}{b:>14,.0f}{o:>14,.0f}{o / b:>8.2f}")


def percentile(ordered: list[float], q: float) -> float | None:
    """The `q` quantile (0..1) of `ordered` (sorted ascending): the value below which a
    fraction `q` of them lie; None for no values."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def du_bytes(path: str) -> int:
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout
    return int(out.split()[0]) if out else 0


def wait(
    probe: Probe, until: Callable[[], Any], poll_s: float = 0.02, timeout_s: float = 600
) -> None:
    """Sample the job's metrics until `until()` holds; fails if the job ends first or stalls."""
    deadline = time.monotonic() + timeout_s
    while not until():
        probe.sample()
        if probe.jm.done.is_set() or time.monotonic() > deadline:
            raise RuntimeError(f"job ended or timed out (status {probe.jm.status.name})")
        time.sleep(poll_s)
    probe.sample()


def key_counts(text: str) -> list[int]:
    """argparse type of --keys: one state size or a comma-separated list ("100000,1000000")."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"--keys takes positive key counts, separated by commas or spaces, got {text!r}"
        )
    return counts


def add_keys_argument(p: argparse.ArgumentParser, default: list[int]) -> None:
    """--keys N [N ...] or --keys N,N,...; flatten `args.keys` with `flat_keys`."""
    p.add_argument(
        "--keys",
        type=key_counts,
        nargs="+",
        default=[default],
        help="state sizes (keys), e.g. 100000,1000000,10000000",
    )


def flat_keys(groups: list[list[int]]) -> list[int]:
    return [n for group in groups for n in group]
