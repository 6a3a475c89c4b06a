"""`tidegate chaos JOB.py ...`: run a job script twice, without faults and under injected
faults, and compare what its sinks committed (docs/chaos.md).

Each run is `tidegate run JOB.py --chaos SETTINGS` in a subprocess of its own: the script runs
unchanged, and `deploy/chaos.py` moves its sink outputs and checkpoints into the run's
directory and plans the faults (`runtime/faults.py`). Then `chaos_report.py` compares the
committed records sink by sink and summarizes. Exit status 0 only when at least one fault was
injected and every sink committed the same records (in the same order, where it is defined).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

import tidegate
from tidegate.checkpoint.metadata import METADATA_FILE_NAME
from tidegate.cli.chaos_report import ChaosSummary, committed_records, summarize
from tidegate.cli.errors import EXIT_JOB_FAILED, CliError, verbose_option
from tidegate.cli.run import _check_script
from tidegate.common.configuration import JOB_ID
from tidegate.deploy.chaos import ChaosSettings, load_plan
from tidegate.runtime.faults import (
    CLUSTER_KINDS,
    FaultKind,
    FaultSchedule,
    due_driver_restart,
    log_fault,
    read_fault_log,
)

#: every kind that runs on any master (`executor-loss` only when asked for: it needs a cluster)
DEFAULT_KINDS = tuple(k for k in FaultKind if k not in CLUSTER_KINDS)
#: the end of a failed run's output shown in its error
TAIL_LINES = 40
#: how often the harness looks for a due `driver-restart` (seconds)
POLL_S = 0.05


@click.command("chaos")
@click.argument("job", metavar="JOB.py")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- JOB_ARGS...]")
@click.option(
    "--faults",
    "count",
    type=click.IntRange(min=1),
    help="How many faults to plan (default 3; with --schedule at:..., one per listed checkpoint).",
)
@click.option("--seed", type=int, help="Seed of the fault plan (default: random, printed).")
@click.option(
    "--kinds",
    default=",".join(DEFAULT_KINDS),
    show_default=True,
    help="Fault kinds to mix, comma-separated.",
)
@click.option(
    "--schedule",
    default="every:2",
    show_default=True,
    help="at:N[,M...] (those checkpoint ids), every:N (every N-th checkpoint) or random:RATE "
    "(each checkpoint with probability RATE).",
)
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism.")
@click.option("--runner", type=click.Choice(["spark", "local"]), help="Where slots run.")
@click.option("--spark-master", metavar="URL", help="spark.master, e.g. local[4].")
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="As for `tidegate run`.")
@click.option("--json", "json_path", metavar="PATH", help="Write the summary as JSON to PATH.")
@click.option(
    "--work-dir",
    metavar="DIR",
    help="Where both runs' outputs and checkpoints go (default: a new temporary directory, "
    "deleted when the outputs are equal).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=900,
    show_default=True,
    metavar="SECONDS",
    help="The longest one run may take.",
)
@verbose_option
def chaos_command(
    job: str,
    job_args: tuple[str, ...],
    count: int | None,
    seed: int | None,
    kinds: str,
    schedule: str,
    parallelism: int | None,
    runner: str | None,
    spark_master: str | None,
    conf: tuple[str, ...],
    json_path: str | None,
    work_dir: str | None,
    timeout: float,
    verbose: bool,
) -> None:
    """Check that a job commits the same output when things fail.

    Runs JOB.py once without faults (the reference), then again while injecting faults
    (exceptions in user functions, SIGKILL of slot processes, failed snapshot phases, commits,
    checkpoint storage writes and restores, hanging storage writes, stalled subtasks, dropped
    data connections, driver restarts), and compares the records its sinks committed: lost,
    duplicated, unexpected and (where the order is defined) reordered ones. The script runs
    unchanged: its file sinks and checkpoints are moved to the work directory. Arguments after
    `--` go to the script. Exit status 0 only when the outputs are equal.
    """
    script = _check_script(job)
    fault_kinds = _parse_kinds(kinds)
    try:
        plan_schedule = FaultSchedule.parse(schedule)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--schedule") from None
    if count is None:
        count = len(plan_schedule.checkpoints) if plan_schedule.mode == "at" else 3
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    root = Path(work_dir or tempfile.mkdtemp(prefix="tidegate-chaos-")).absolute()
    options = _run_options(parallelism, runner, spark_master, conf)
    echo = lambda text: click.echo(text, err=True)  # noqa: E731
    echo(f"tidegate chaos: seed {seed} (rerun with --seed {seed}), work directory {root}")

    reference = ChaosSettings(str(root / "reference"))
    ref = _run(script, job_args, options, reference, timeout, verbose, "reference run")
    if ref["error"] is not None:
        raise CliError(
            f"the job failed without faults: {ref['error']}",
            "fix the job first: tidegate chaos compares a run under faults with a good run",
            EXIT_JOB_FAILED,
        )
    if not ref["sinks"]:
        raise CliError(
            f"{job} has no sink whose output tidegate chaos can compare",
            "give the job a FileSink (print() output is not compared)",
        )
    echo(f"reference run: {_records_line(ref)}")

    settings = ChaosSettings(
        str(root / "faulty"), tuple(map(str, fault_kinds)), count, seed, schedule
    )
    faulty = _run(script, job_args, options, settings, timeout, verbose, "run under faults")
    faults_log = read_fault_log(os.path.join(settings.run_dir, "faults.jsonl"))
    for entry in faults_log:
        if entry["event"] == "fault":
            driver = f"driver run {entry['driver']}, " if entry.get("driver") else ""
            echo(f"  injected: {entry['description']} ({driver}attempt {entry['attempt']})")
    if faulty["error"] is not None:
        _report_failure(faulty, faults_log, json_path)
    if len(faulty["sinks"]) != len(ref["sinks"]):
        raise CliError(
            f"the runs added different sinks ({len(ref['sinks'])} without faults, "
            f"{len(faulty['sinks'])} under faults)",
            "tidegate chaos needs a script that builds the same job each time it runs",
            EXIT_JOB_FAILED,
        )
    outputs = [
        (committed_records(a["path"]), committed_records(b["path"]))
        for a, b in zip(ref["sinks"], faulty["sinks"], strict=True)
    ]
    summary = summarize(ref, faulty, faults_log, outputs)
    click.echo(summary.format())
    _write_json(json_path, summary.to_json() | {"seed": seed, "work_dir": str(root)})
    if not summary.injected:
        raise CliError(
            "no fault was injected: the job ended before the checkpoints the faults were "
            "planned at",
            "plan them earlier (--schedule every:1 or at:1,2) or give the job more input",
            EXIT_JOB_FAILED,
        )
    if not summary.passed:
        raise CliError(
            f"the output differs under faults (seed {seed}; both runs' output is in {root})",
            _difference_hint(summary),
            EXIT_JOB_FAILED,
        )
    click.echo("passed: every sink committed the same records under faults")
    if work_dir is None:
        shutil.rmtree(root, ignore_errors=True)


def _difference_hint(summary: ChaosSummary) -> str | None:
    """As many records lost as made up, none duplicated: perhaps the job's output depends on
    the order parallel inputs interleave in, which differs between any two runs."""
    totals = summary.to_json()
    if totals["records_duplicated"] or totals["records_lost"] != totals["records_unexpected"]:
        return None
    return (
        "as many records are lost as made up: if the job's records depend on the order in "
        "which its parallel inputs interleave, they differ between any two runs; check "
        "such a job at parallelism 1 (docs/chaos.md)"
    )


def _parse_kinds(text: str) -> tuple[FaultKind, ...]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in names if k not in set(FaultKind)]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown fault kind(s) {', '.join(unknown) or '(none given)'}: choose from "
            + ", ".join(FaultKind),
            param_hint="--kinds",
        )
    return tuple(dict.fromkeys(FaultKind(k) for k in names))


def _run_options(
    parallelism: int | None, runner: str | None, spark_master: str | None, conf: tuple[str, ...]
) -> list[str]:
    """The `tidegate run` options both runs get."""
    options = [] if parallelism is None else ["--parallelism", str(parallelism)]
    options += [] if runner is None else ["--runner", runner]
    options += [] if spark_master is None else ["--spark-master", spark_master]
    for entry in conf:
        options += ["--conf", entry]
    return options


def _run(
    script: str,
    job_args: tuple[str, ...],
    options: list[str],
    settings: ChaosSettings,
    timeout: float,
    verbose: bool,
    what: str,
) -> dict[str, Any]:
    """Run the script once as `tidegate run --chaos` in a subprocess; its run.json. Its output
    goes to `output.log` in the run's directory (and to stderr with --verbose), which starts
    empty: a fault log left by an earlier run would stop its faults. A `driver-restart` fault
    kills the subprocess and starts it again, restoring its job directory (`_driver_restart`)."""
    shutil.rmtree(settings.run_dir, ignore_errors=True)
    log_path = os.path.join(settings.run_dir, "output.log")
    click.echo(f"{what} ...", err=True)
    started = time.monotonic()
    restore: list[str] = []
    while True:
        process = _start(script, job_args, [*options, *restore], settings, log_path, verbose)
        job_dir = _wait(process, settings, started + timeout, log_path, what, timeout)
        if job_dir is None:
            break
        # the same job id, so the new driver's generation fences the old one's writers
        restore = ["--from-checkpoint", job_dir, "--conf", f"{JOB_ID}={Path(job_dir).name}"]
        settings = dataclasses.replace(settings, driver=settings.driver + 1)
    result_path = os.path.join(settings.run_dir, "run.json")
    if not os.path.exists(result_path):
        raise CliError(
            f"the {what} ended (exit status {process.returncode}) before it ran the script; "
            f"its output:\n{_tail(log_path)}",
            None,
            EXIT_JOB_FAILED,
        )
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    if result["error"] is not None and not verbose:
        click.echo(_tail(log_path), err=True)
    click.echo(f"{what}: {time.monotonic() - started:.1f}s", err=True)
    return result


def _start(
    script: str,
    job_args: tuple[str, ...],
    options: list[str],
    settings: ChaosSettings,
    log_path: str,
    verbose: bool,
) -> subprocess.Popen:
    """Start `tidegate run --chaos` (the first driver's output starts the log, a restarted
    one's is appended)."""
    path = settings.save()
    package_parent = str(Path(tidegate.__file__).parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tidegate", "run", script, "--chaos", path]
    command += ["--status-interval", "0", *options, "--", *job_args]
    with open(log_path, "a" if settings.driver else "w", encoding="utf-8") as log:
        return subprocess.Popen(
            command,
            stdout=None if verbose else log,
            stderr=None if verbose else subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM and the workers are in it
        )


def _wait(
    process: subprocess.Popen,
    settings: ChaosSettings,
    deadline: float,
    log_path: str,
    what: str,
    timeout: float,
) -> str | None:
    """Wait for the driver to end (None), or carry out a due `driver-restart`: log it, kill
    the driver's whole process group, and return the job directory to restore."""
    restarts = FaultKind.DRIVER_RESTART in settings.kinds
    try:
        while True:
            try:
                process.wait(POLL_S)
                return None
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise CliError(
                    f"the {what} did not end within {timeout:g}s (its output: {log_path})",
                    "give the job a bounded input, or a longer --timeout",
                    EXIT_JOB_FAILED,
                )
            if restarts and (job_dir := _driver_restart(settings)) is not None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return job_dir
    finally:
        if process.poll() is None:  # interrupted: end the run with its processes
            os.killpg(process.pid, signal.SIGKILL)


def _driver_restart(settings: ChaosSettings) -> str | None:
    """If this driver's plan has a `driver-restart` due at its latest completed checkpoint:
    log it (the driver is killed next) and return the job directory."""
    plan = load_plan(settings.run_dir)
    if plan is None or plan.driver != settings.driver:
        return None  # the driver has not built its job yet
    latest = _latest_completed(os.path.join(settings.run_dir, "checkpoints"))
    if latest is None:
        return None
    job_dir, checkpoint_id = latest
    log = read_fault_log(plan.log_path)
    fault = due_driver_restart(plan, log, checkpoint_id)
    if fault is None:
        return None
    attempts = [e["attempt"] for e in log if e.get("driver", 0) == plan.driver]
    log_fault(plan, fault, max(attempts, default=0), checkpoint_id)
    return job_dir


def _latest_completed(checkpoints: str) -> tuple[str, int] | None:
    """(job directory, id) of the newest completed checkpoint (one with its `_metadata`) under
    the run's checkpoint storage."""
    found = []
    for metadata in Path(checkpoints).glob(f"*/chk-*/{METADATA_FILE_NAME}"):
        checkpoint_id = metadata.parent.name.removeprefix("chk-")
        if checkpoint_id.isdigit():
            found.append((int(checkpoint_id), str(metadata.parent.parent)))
    if not found:
        return None
    checkpoint_id, job_dir = max(found)
    return job_dir, checkpoint_id


def _tail(log_path: str) -> str:
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    return "\n".join(lines[-TAIL_LINES:])


def _records_line(result: dict[str, Any]) -> str:
    counts = ", ".join(
        f"sink {s['index']}: {len(committed_records(s['path']))} records" for s in result["sinks"]
    )
    return f"{len(result['jobs'])} job(s); {counts}"


def _report_failure(
    faulty: dict[str, Any], faults_log: list[dict[str, Any]], json_path: str | None
) -> None:
    """The job failed under faults (e.g. it ran out of restarts, or could not restore)."""
    _write_json(
        json_path,
        {
            "passed": False,
            "error": faulty["error"],
            "faults_injected": sum(e["event"] == "fault" for e in faults_log),
        },
    )
    raise CliError(
        f"the job failed under faults: {faulty['error']}",
        "its output is above; rerun with --verbose to see it as it runs",
        EXIT_JOB_FAILED,
    )


def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
