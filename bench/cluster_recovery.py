"""Recovery time on a multi-host Spark standalone cluster, per failure kind.

    sudo .venv/bin/python bench/cluster_recovery.py [--repeats 2] [--kinds ...] [--out FILE]

Needs root: the hosts are network namespaces (tests/support/cluster.py), three workers with
one core each, the driver in this namespace. The job is the multi-host tests' running count
(tests/e2e/cluster_job.py: 5,000 records/s, p=2, 300 ms checkpoints, exactly-once FileSink,
heartbeat timeout 5 s). Once a checkpoint completed, one fault is injected:

- slot-kill: SIGKILL of a slot's Python process (the executor lives on);
- executor-kill: SIGKILL of an executor JVM, no spare (Spark starts a replacement);
- partition: a slot host's link goes down, a spare executor is running (cores.max=3);
- driver-restart: the driver and its JVM are SIGKILLed; a new driver of the same job id is
  started at once with the job's checkpoint directory as its recovery path.

From the driver's log (Unix-time stamps) it takes the time from the fault to: the attempt's
failure being noticed ("detected"), every slot of the next attempt registered and the job
RUNNING ("running"), and the first checkpoint completed after that ("checkpointed"). Each run's
committed output is compared with the reference, record for record. Prints a table, writes
JSON (default bench/results/cluster_recovery.json). There is no bare-loop baseline: nothing
without fault tolerance recovers.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import report_header, write_report  # noqa: E402
from tests.e2e.cluster_job import launch  # noqa: E402
from tests.support.cluster import NamespaceCluster  # noqa: E402
from tests.support.output import committed_lines  # noqa: E402
from tests.support.references import check_exactly_once  # noqa: E402

KINDS = ("slot-kill", "executor-kill", "partition", "driver-restart")
EXECUTOR = b"CoarseGrainedExecutorBackend"
N = 60_000  # 12 s of input at 5,000/s
JOB_TIMEOUT_S = 300
_LOG = re.compile(r"^(\d+\.\d+) \w+ [\w.]+: (.*)$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "cluster_recovery.json"))
    return p.parse_args(argv)


def start_driver(cluster: NamespaceCluster, work: Path, *extra: str) -> subprocess.Popen:
    out, checkpoints = str(work / "out"), str(work / "chk")
    entries = ("heartbeat.timeout=5000", *extra)
    return launch(
        cluster.master_url, cluster.driver_host, out, checkpoints, N, *entries, log_level="INFO"
    )


def wait_for_checkpoint(work: Path, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not list(work.glob("chk/*/chk-*/_metadata")):
        if driver.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no checkpoint completed:\n{driver.communicate()[1][-3000:]}")
        time.sleep(0.05)
    time.sleep(1.0)  # past the start: a steady job


def finish(driver: subprocess.Popen) -> str:
    try:
        _, stderr = driver.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        stderr = driver.communicate()[1]
        raise RuntimeError(f"no end in {JOB_TIMEOUT_S} s:\n{stderr[-3000:]}") from None
    if driver.returncode != 0:
        raise RuntimeError(f"the job failed:\n{stderr[-3000:]}")
    return stderr


def events(stderr: str) -> list[tuple[float, str]]:
    return [(float(m[1]), m[2]) for m in map(_LOG.match, stderr.splitlines()) if m]


def phases(log: list[tuple[float, str]], fault_at: float, restarted: bool) -> dict[str, float]:
    """Seconds from the fault to each phase of the recovery, from the driver's log records."""
    after = [(t, msg) for t, msg in log if t >= fault_at]
    if restarted:  # a new driver: its first attempt is the recovery
        detected = fault_at
    else:
        detected = next(t for t, msg in after if re.match(r"attempt \d+ failed", msg))
    running = next(t for t, msg in after if "running: all" in msg and t >= detected)
    checkpointed = next(
        t for t, msg in after if msg.startswith("completed CompletedCheckpoint") and t > running
    )
    return {
        "detected_s": detected - fault_at,
        "running_s": running - fault_at,
        "checkpointed_s": checkpointed - fault_at,
    }


def run_once(cluster: NamespaceCluster, kind: str, work: Path) -> dict[str, Any]:
    extra = ("spark.cores.max=3",) if kind == "partition" else ()
    if kind == "driver-restart":
        extra = ("pipeline.job-id=recovery-bench",)
    driver = start_driver(cluster, work, *extra)
    wait_for_checkpoint(work, driver)
    host = cluster.slot_hosts()[0]
    restarted = kind == "driver-restart"
    fault_at = time.time()
    if kind == "slot-kill":
        os.kill(cluster.forked_python_workers(host)[0], signal.SIGKILL)
    elif kind == "executor-kill":
        os.kill(cluster.pids(host, EXECUTOR)[0], signal.SIGKILL)
    elif kind == "partition":
        cluster.partition(host)
    else:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate(timeout=30)
        recovery = f"execution.state-recovery.path={work / 'chk' / 'recovery-bench'}"
        driver = start_driver(cluster, work, *extra, recovery)
    try:
        stderr = finish(driver)
    finally:
        if kind == "partition":
            cluster.partition(host, cut=False)
    check_exactly_once(committed_lines(work / "out"), N, 2)
    return {"kind": kind, **phases(events(stderr), fault_at, restarted), "exactly_once": True}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("needs root: the hosts are network namespaces")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tidegate-recovery-") as tmp:
        for kind in args.kinds:
            # a fresh cluster per kind: a partition or a kill leaves a worker behind that
            # Spark has given up on
            cluster = NamespaceCluster(Path(tmp) / kind, workers=3).start()
            try:
                for r in range(args.repeats):
                    work = Path(tmp) / kind / f"run{r}"
                    result = run_once(cluster, kind, work)
                    results.append(result)
                    print(
                        f"  {kind:15} run {r}: running again after {result['running_s']:.1f} s",
                        flush=True,
                    )
            finally:
                cluster.stop()
    table = summarize(results, args.kinds)
    report = report_header(args) | {"runs": results, "summary": table}
    write_report(args.out, report)


def summarize(results: list[dict[str, Any]], kinds: list[str]) -> list[dict[str, Any]]:
    print(f"\n{'fault':15} {'runs':>4} {'detected s':>11} {'running s':>10} {'checkpointed s':>15}")
    table = []
    for kind in kinds:
        runs = [r for r in results if r["kind"] == kind]
        row = {"kind": kind, "runs": len(runs)}
        for phase in ("detected_s", "running_s", "checkpointed_s"):
            values = [r[phase] for r in runs]
            row[phase] = statistics.median(values)
            row[phase.replace("_s", "_max_s")] = max(values)
        table.append(row)
        print(
            f"{kind:15} {len(runs):>4} {row['detected_s']:>11.1f} {row['running_s']:>10.1f}"
            f" {row['checkpointed_s']:>15.1f}"
        )
    print("(medians; seconds from the fault; every run exactly once)")
    return table


if __name__ == "__main__":
    main()
