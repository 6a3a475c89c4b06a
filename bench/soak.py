"""The soak: one job (bench/soak_jobs.py: keyed state, event-time windows, broadcast state, an
interval join, each into an exactly-once FileSink) through many injected faults, rescaled
between restarts, and its committed output compared with a plain-Python reference, record for
record.

    .venv/bin/python bench/soak.py [--faults-total 1000] [--quick] [--runner spark|local]

The job runs in segments, each a new job restored from the previous one's savepoint: at
parallelism 2, 3, 1, 4, 2, 3, ... with aligned and unaligned checkpoints alternating and the
state backend changing every two segments (RocksDB incremental, hashmap incremental), each
under `--per-segment` faults (the `tidegate chaos` machinery: `ChaosRun` moves the sinks and
checkpoints and plans the faults, all kinds mixed, one per checkpoint from the segment's first
one on). A segment ends when its faults were injected: stop with a savepoint (the next segment
restores it). A last segment without faults and without the sources' rate limit drains the
rest of the input. After each segment: no in-progress/pending (hidden) files in the sinks'
directories, and the orphan sweep's plan (`plan_job_dir_sweep`) over the segment's job
directory empty; the job directory's size is sampled while it runs (max reported). Prints a
table per segment and the records lost/duplicated per pipeline; writes JSON (default
bench/results/soak.json). `--quick`: 32 faults (what tests/e2e/test_soak.py runs).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import soak_jobs  # noqa: E402
from bench.common import du_bytes, job_arguments, report_header, start, write_report  # noqa: E402
from tidegate.checkpoint.sweep import plan_job_dir_sweep  # noqa: E402
from tidegate.cli.chaos_report import (  # noqa: E402
    committed_records,
    compare_records,
    percentile,
    recovery_times,
)
from tidegate.cli.formatting import format_table  # noqa: E402
from tidegate.common import Configuration  # noqa: E402
from tidegate.datastream import (  # noqa: E402
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    StreamExecutionEnvironment,
)
from tidegate.deploy.chaos import ChaosRun, ChaosSettings  # noqa: E402
from tidegate.runtime.faults import FaultKind, read_fault_log  # noqa: E402

#: the fault kinds the soak mixes by default; not yet: storage-hang, slow and disconnect (newer
#: than the soak; --kinds adds them), driver-restart (the `tidegate chaos` CLI kills and
#: restarts its driver process; the soak runs its jobs in-process) and executor-loss (a
#: cluster's)
SOAK_KINDS = tuple(
    map(
        FaultKind,
        ["exception", "kill", "snapshot-sync", "snapshot-async", "commit", "storage-write",
         "metadata-write", "restore"],
    )
)  # fmt: skip
PARALLELISM = (2, 3, 1, 4)
BACKENDS = {
    "rocksdb-incremental": lambda: EmbeddedRocksDBStateBackend(True),
    "hashmap-incremental": lambda: HashMapStateBackend(True),
}
#: a segment whose faults were all injected but `restore` ones (which need a restart after
#: their checkpoint) stops after this long
RESTORE_GRACE_S = 3.0
SAMPLE_S = 0.25


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_arguments(__doc__, "soak.json")
    p.add_argument("--faults-total", type=int, default=1000, help="faults over all segments")
    p.add_argument("--per-segment", type=int, default=50, help="faults per segment")
    p.add_argument("--quick", action="store_true", help="32 faults (8 per segment)")
    p.add_argument("--rate", type=float, default=10, help="records/s of each source")
    p.add_argument(
        "--max-minutes",
        type=float,
        help="start no fault segment after this long (then drain and compare); the input is "
        "sized for it",
    )
    p.add_argument("--interval-ms", type=int, default=250, help="checkpoint interval")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kinds", default=",".join(SOAK_KINDS), help="fault kinds to mix")
    p.add_argument("--work-dir", help="default: a new temporary directory (kept on failure)")
    p.add_argument(
        "--segment-timeout", type=float, default=600, help="the longest a fault segment may run"
    )
    p.add_argument(
        "--drain-timeout", type=float, default=3600, help="the longest the drain may run"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.faults_total, args.per_segment = 32, 8
    return args


def segment_faults(total: int, per_segment: int) -> list[int]:
    """How many faults each segment gets: `total` spread evenly over segments of at most
    `per_segment`."""
    segments = max(math.ceil(total / per_segment), 1)
    return [total // segments + (i < total % segments) for i in range(segments)]


@dataclass(frozen=True)
class Segment:
    index: int
    parallelism: int
    unaligned: bool
    backend: str
    #: faults planned (0: the drain)
    faults: int
    #: the checkpoint id of the first fault
    first_fault_checkpoint: int = 1


def segments(faults: list[int]) -> Iterator[Segment]:
    """The fault segments, then the drain."""
    names = list(BACKENDS)
    for i, count in enumerate([*faults, 0]):
        yield Segment(i, PARALLELISM[i % 4], i % 2 == 1, names[i // 2 % 2], count)


def build_env(
    segment: Segment, args: argparse.Namespace, spark: Any, n: int, restore: str | None
) -> StreamExecutionEnvironment:
    conf = Configuration().set_string("execution.runner", args.runner)
    if restore is not None:
        conf.set_string("execution.state-recovery.path", restore)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    if spark is not None:
        env.set_spark_session(spark)
    env.set_parallelism(segment.parallelism)
    env.enable_checkpointing(args.interval_ms)
    env.get_checkpoint_config().enable_unaligned_checkpoints(segment.unaligned)
    env.set_state_backend(BACKENDS[segment.backend]())
    soak_jobs.build(env, n, None if segment.faults == 0 else args.rate)
    return env


def hidden_files(directory: str) -> list[str]:
    """Files (or directories) under `directory` whose names start with '.': in-progress or
    pending part files left behind."""
    found = []
    for root, dirs, files in os.walk(directory):
        found += [os.path.join(root, f) for f in [*dirs, *files] if f.startswith(".")]
    return sorted(found)


def run_segment(
    segment: Segment,
    args: argparse.Namespace,
    spark: Any,
    run_dir: str,
    n: int,
    restore: str | None,
) -> tuple[dict[str, Any], str | None, int]:
    """Run one segment; (its figures, its savepoint (None: the job finished), the next
    checkpoint id)."""
    count = segment.faults
    ids = range(segment.first_fault_checkpoint, segment.first_fault_checkpoint + count)
    settings = ChaosSettings(
        run_dir,
        tuple(k.strip() for k in args.kinds.split(",")),
        count,
        args.seed * 1000 + segment.index,
        "at:" + ",".join(map(str, ids)) if count else "every:1",
    )
    settings.save()  # the run's directory, where the chaos run writes its plan
    chaos = ChaosRun(settings)
    log_start = len(read_fault_log(chaos.fault_log))
    env = build_env(segment, args, spark, n, restore)
    saved = StreamExecutionEnvironment.cli_overrides
    StreamExecutionEnvironment.cli_overrides = {
        "chaos": chaos,
        "on_submit": chaos.watched_by(lambda _client: None),
    }
    started = time.monotonic()
    try:
        client = env.execute_async(f"soak segment {segment.index}")
    finally:
        StreamExecutionEnvironment.cli_overrides = saved
    jm = client.jobmaster
    max_bytes, all_but_restore_at = 0, None
    savepoint = None
    planned = [f for plan, _ in chaos.jobs if plan is not None for f in plan.faults]
    restore_faults = sum(f.kind is FaultKind.RESTORE for f in planned)
    while not jm.done.is_set():
        max_bytes = max(max_bytes, du_bytes(jm.storage.job_dir))
        injected = [e for e in read_fault_log(chaos.fault_log)[log_start:] if e["event"] == "fault"]
        done_restores = sum(e["kind"] == FaultKind.RESTORE for e in injected)
        if count and len(injected) - done_restores >= count - restore_faults:
            all_but_restore_at = all_but_restore_at or time.monotonic()
        stop = count and (
            len(injected) >= count
            or time.monotonic() - (all_but_restore_at or math.inf) > RESTORE_GRACE_S
            or time.monotonic() - started > args.segment_timeout
        )
        if stop:
            savepoint = _stop_with_savepoint(client, os.path.join(run_dir, "savepoints"))
            break
        if not count and time.monotonic() - started > args.drain_timeout:
            raise RuntimeError(f"the drain did not finish within {args.drain_timeout:g}s")
        time.sleep(SAMPLE_S)
    if not jm.done.wait(120):
        raise RuntimeError(f"segment {segment.index}: the job did not end")
    seconds = time.monotonic() - started
    if jm.status.name != "FINISHED":
        raise RuntimeError(f"segment {segment.index} ended {jm.status.name}: {jm.error}")
    log = read_fault_log(chaos.fault_log)[log_start:]
    injected = [e for e in log if e["event"] == "fault"]
    leftover = hidden_files(os.path.join(run_dir, "sinks"))
    orphans = plan_job_dir_sweep(jm.storage)
    counts = jm.stats.checkpoints.counts
    recovery = recovery_times(log)
    done = {(e["kind"], e["checkpoint_id"], e["slot"]) for e in injected}
    figures = {
        "segment": segment.index,
        "parallelism": segment.parallelism,
        "checkpoints": "unaligned" if segment.unaligned else "aligned",
        "backend": segment.backend,
        "faults_planned": count,
        "faults_injected": len(injected),
        "by_kind": dict(Counter(e["kind"] for e in injected)),
        "not_injected": [f.describe() for f in planned if f.key not in done],
        "restarts": jm.stats.restarts,
        #: two faults may end one attempt together
        "attempts_with_faults": len({e["attempt"] for e in injected}),
        "checkpoints_completed": counts.completed,
        "checkpoints_failed": counts.failed,
        "recovery_s": recovery,
        "recovery_p50_s": percentile(recovery, 50),
        "recovery_p99_s": percentile(recovery, 99),
        "seconds": seconds,
        "job_dir_max_bytes": max_bytes,
        "job_dir_end_bytes": du_bytes(jm.storage.job_dir),
        "leftover_files": leftover,
        "orphans": [*orphans.directories, *orphans.files],
        "savepoint": savepoint,
        "status": jm.status.name,
    }
    return figures, savepoint, jm.next_checkpoint_id


def _stop_with_savepoint(client: Any, directory: str, attempts: int = 10) -> str:
    """Stop with a savepoint; a savepoint that fails (the job restarting) is tried again."""
    for attempt in range(attempts):
        try:
            return client.stop_with_savepoint(savepoint_directory=directory).result(timeout=120)
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def compare(run_dir: str, n: int) -> list[dict[str, Any]]:
    """Each pipeline's committed lines against the reference."""
    expected = soak_jobs.reference(n)
    diffs = []
    for index, name in enumerate(soak_jobs.PIPELINES):
        got = committed_records(os.path.join(run_dir, "sinks", str(index)))
        reference = list(expected[name].elements())
        diffs.append(compare_records(name, reference, got, ordered=False).to_json())
    return diffs


#: what one fault and one segment take (local runner, 2 busy cores), with a margin: the input
#: lasts that long at `--rate`, so that no source ends before the drain, which then has
#: little left
SECONDS_PER_FAULT, SECONDS_PER_SEGMENT = 3.0, 15.0


def input_size(args: argparse.Namespace) -> int:
    """Records per source: enough for the fault segments at `--rate`."""
    count = len(segment_faults(args.faults_total, args.per_segment))
    seconds = SECONDS_PER_FAULT * args.faults_total + SECONDS_PER_SEGMENT * count
    if args.max_minutes is not None:
        seconds = min(seconds, 60 * args.max_minutes + 2 * SECONDS_PER_SEGMENT)
    return int(args.rate * seconds)


def soak(args: argparse.Namespace, spark: Any, run_dir: str) -> dict[str, Any]:
    n = input_size(args)
    results, restore, next_id = [], None, 1
    started = time.monotonic()
    for segment in segments(segment_faults(args.faults_total, args.per_segment)):
        late = args.max_minutes is not None and time.monotonic() - started > 60 * args.max_minutes
        if segment.faults and late:
            continue  # out of time: on to the drain
        segment = Segment(**{**segment.__dict__, "first_fault_checkpoint": next_id + 1})
        figures, restore, next_id = run_segment(segment, args, spark, run_dir, n, restore)
        results.append(figures)
        print(_segment_line(figures), flush=True)
        write_report(args.out, report_header(args) | {"soak": {"segments": results}})
        if restore is None and segment.faults:
            raise RuntimeError(
                f"segment {segment.index}: the job finished before its faults were injected "
                "(raise --rate or the input size)"
            )
    pipelines = compare(run_dir, n)
    recovery = sorted(r for s in results for r in s["recovery_s"])
    return {
        "records_per_source": n,
        "segments": results,
        "pipelines": pipelines,
        "faults_injected": sum(s["faults_injected"] for s in results),
        "by_kind": dict(sum((Counter(s["by_kind"]) for s in results), Counter())),
        "restarts": sum(s["restarts"] for s in results),
        "recovery_p50_s": percentile(recovery, 50),
        "recovery_p99_s": percentile(recovery, 99),
        "records_lost": sum(p["lost"] for p in pipelines),
        "records_duplicated": sum(p["duplicated"] for p in pipelines),
        "records_unexpected": sum(p["unexpected"] for p in pipelines),
        "leftover_files": sum(len(s["leftover_files"]) for s in results),
        "orphans": sum(len(s["orphans"]) for s in results),
        "job_dir_max_bytes": max(s["job_dir_max_bytes"] for s in results),
    }


def _segment_line(s: dict[str, Any]) -> str:
    p50 = "-" if s["recovery_p50_s"] is None else f"{s['recovery_p50_s']:.2f}s"
    return (
        f"segment {s['segment']:>2}: p={s['parallelism']} {s['checkpoints']:<9} "
        f"{s['backend']:<19} faults {s['faults_injected']:>3}/{s['faults_planned']:<3} "
        f"restarts {s['restarts']:>3} recovery p50 {p50:>6} "
        f"{s['seconds']:6.1f}s job dir max {s['job_dir_max_bytes'] / 1e6:.2f} MB, "
        f"leftovers {len(s['leftover_files'])}, orphans {len(s['orphans'])}"
    )


def print_summary(summary: dict[str, Any]) -> None:
    rows = [
        (
            p["name"],
            p["reference_records"],
            p["faulty_records"],
            p["lost"],
            p["duplicated"],
            p["unexpected"],
        )
        for p in summary["pipelines"]
    ]
    headers = ("pipeline", "expected", "committed", "lost", "duplicated", "unexpected")
    print("\n" + format_table(headers, rows))
    p50, p99 = summary["recovery_p50_s"], summary["recovery_p99_s"]
    print(
        f"\nfaults injected {summary['faults_injected']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(summary['by_kind'].items()))}); "
        f"restarts {summary['restarts']}; recovery p50 "
        f"{'-' if p50 is None else f'{p50:.2f}s'}, p99 {'-' if p99 is None else f'{p99:.2f}s'}; "
        f"leftover files {summary['leftover_files']}, orphans {summary['orphans']}, "
        f"job dir max {summary['job_dir_max_bytes'] / 1e6:.2f} MB"
    )


def main(argv: list[str] | None = None, spark: Any = None) -> dict[str, Any]:
    """Run the soak; `spark`: the session to run on (default: started for `--runner spark`)."""
    args = parse_args(argv)
    soak_jobs.register_by_value()
    if spark is None:
        spark = start(args)
    run_dir = args.work_dir or tempfile.mkdtemp(prefix="tidegate-soak-")
    shutil.rmtree(run_dir, ignore_errors=True)  # an earlier run's fault log would stop faults
    print(f"soak: {args.faults_total} faults, runner {args.runner}, work directory {run_dir}")
    started = time.time()
    summary = soak(args, spark, run_dir)
    summary["seconds"] = time.time() - started
    print_summary(summary)
    write_report(args.out, report_header(args) | {"soak": summary})
    clean = not (
        summary["records_lost"]
        or summary["records_duplicated"]
        or summary["records_unexpected"]
        or summary["leftover_files"]
        or summary["orphans"]
    )
    if clean and args.work_dir is None:
        shutil.rmtree(run_dir, ignore_errors=True)
    return summary


if __name__ == "__main__":
    main()
