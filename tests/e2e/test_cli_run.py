"""`tidegate run` as users run it: `python -m tidegate run JOB.py --runner local ...` in a real
subprocess, on a tiny bounded job (NumberSequenceSource -> map -> FileSink) written by the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.output import committed_lines

N = 2_000
#: the last record of the second source split: checkpoints complete before it fails
FAIL_AT = N

JOB = textwrap.dedent(
    f"""
    import sys, time
    from tidegate.common import Configuration, Encoder, RestartStrategies
    from tidegate.datastream import CheckpointingMode, StreamExecutionEnvironment
    from tidegate.datastream.checkpoint_config import ExternalizedCheckpointRetention
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource

    out, checkpoints, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def slow_double(x):
        time.sleep(0.0005)  # about 0.5 s per subtask: long enough for checkpoints and status
        if mode == "fail" and x == {FAIL_AT}:
            raise ArithmeticError("injected failure at {FAIL_AT}")
        return x * 2

    # small batches: a source checks for checkpoint triggers between two batches
    conf = Configuration().set_integer("tidegate.network.batch-size", 50)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(100, CheckpointingMode.EXACTLY_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir(checkpoints)
    config.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    env.set_restart_strategy(RestartStrategies.no_restart())
    numbers = env.from_source(NumberSequenceSource(1, {N}), None, "numbers").uid("numbers")
    doubled = numbers.map(slow_double).uid("double")
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    doubled.sink_to(sink).uid("sink")
    env.execute("cli e2e")
    """
)


def tidegate(*args: str, cwd: Path, path: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -m tidegate ARGS`; `path` goes before this interpreter's sys.path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "tidegate", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="session")
def oldest_cloudpickle() -> str:
    """A directory holding the oldest cloudpickle pyproject.toml allows (installed from PyPI
    the first time), to put before sys.path: cloudpickle 3.1 renamed the file of code pickled
    by value, so error locations are checked with versions on both sides of that change."""
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (spec,) = [d for d in project["project"]["dependencies"] if d.startswith("cloudpickle")]
    oldest = re.search(r">=\s*([\w.]+)", spec)[1]
    target = Path(sys.prefix) / "tidegate-test-packages" / f"cloudpickle-{oldest}"
    if not (target / "cloudpickle").is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
             "--target", str(target), f"cloudpickle=={oldest}"],
            check=True, timeout=300,
        )  # fmt: skip
    shown = subprocess.run(
        [sys.executable, "-c", "import cloudpickle; print(cloudpickle.__version__)"],
        env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    assert Version(shown.stdout.strip()) == Version(oldest), shown
    return str(target)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def run_job(
    job: Path, mode: str, *options: str, path: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    tmp = job.parent
    return tidegate(
        "run", str(job), "--runner", "local", "--status-interval", "0.2", *options,
        "--", str(tmp / "out"), str(tmp / "chk"), mode, cwd=tmp, path=path,
    )  # fmt: skip


def test_run_commits_the_jobs_output_and_prints_status_and_summary_lines(job):
    result = run_job(job, "ok")
    assert result.returncode == 0, result.stderr
    assert sorted(map(int, committed_lines(job.parent / "out"))) == [2 * x for x in range(1, N + 1)]
    lines = result.stderr.splitlines()
    assert any(line.startswith("RUNNING ") and " rec/s | " in line for line in lines), lines
    summary = [line for line in lines if line.startswith("FINISHED: job 'cli e2e'")]
    assert len(summary) == 1 and "checkpoints " in summary[0], lines
    assert "Traceback" not in result.stderr


def test_a_failed_job_is_resumed_from_its_checkpoint_with_exactly_once_output(job):
    tmp = job.parent
    failed = run_job(job, "fail")
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and f"ArithmeticError: injected failure at {FAIL_AT}" in errors[0]
    assert_failure_located_at_the_raise(job, failed)
    assert any(line.startswith("FAILED: job 'cli e2e'") for line in failed.stderr.splitlines())

    listed = tidegate("checkpoints", str(tmp / "chk"), "--json", cwd=tmp)
    assert listed.returncode == 0, listed.stderr
    (record,) = json.loads(listed.stdout)  # one retained checkpoint (max_retained = 1)
    assert record["job_name"] == "cli e2e" and record["operators"] >= 1

    resumed = run_job(job, "ok", "--from-checkpoint", str(tmp / "chk" / record["job_id"]))
    assert resumed.returncode == 0, resumed.stderr
    assert f"restoring from checkpoint {record['checkpoint_id']}" in resumed.stderr
    values = sorted(map(int, committed_lines(tmp / "out")))
    assert values == [2 * x for x in range(1, N + 1)], "lost or duplicated records"


def assert_failure_located_at_the_raise(job: Path, failed: subprocess.CompletedProcess) -> None:
    raise_line = next(i for i, line in enumerate(JOB.splitlines(), 1) if "raise " in line)
    assert f"at {job}:{raise_line} in slow_double: raise ArithmeticError" in failed.stderr


def test_a_failing_function_is_located_in_the_script_with_the_oldest_cloudpickle_allowed(
    job, oldest_cloudpickle
):
    failed = run_job(job, "fail", path=(oldest_cloudpickle,))
    assert failed.returncode == 1, failed.stderr
    assert_failure_located_at_the_raise(job, failed)


def test_a_failed_job_prints_no_internal_traceback(job):
    failed = run_job(job, "fail")
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr


def test_run_from_a_bad_checkpoint_path_fails_before_running_with_one_line(job):
    result = run_job(job, "fail", "--from-checkpoint", str(job.parent / "no-such-dir"))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("Error: cannot restore from ")
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not (job.parent / "out").exists()
