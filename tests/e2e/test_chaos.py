"""`tidegate chaos` as users run it: `python -m tidegate chaos JOB.py` in a real subprocess
(which runs the job twice, each run in a subprocess of its own) on tests/e2e/chaos_job.py.

It passes on our FileSink under every fault kind (on Spark: the SIGKILL hits a Spark Python
worker), with the committed output also checked against a reference computed here; and it
fails, reporting duplicated or lost records per sink, on a job with two planted bugs (a sink
that commits in its pre-commit, a count kept in a plain Python attribute) beside a correct
sink, which it finds equal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chaos_job import KEYS
from tests.support.output import committed_lines
from tidegate.runtime.faults import CLUSTER_KINDS, NON_FAILING_KINDS, FaultKind, read_fault_log

JOB = Path(__file__).with_name("chaos_job.py")


def chaos(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    """Run `tidegate chaos JOB ARGS` (work directory and JSON summary in `tmp_path`)."""
    summary = tmp_path / "summary.json"
    command = [sys.executable, "-m", "tidegate", "chaos", str(JOB)]
    command += ["--work-dir", str(tmp_path / "work"), "--json", str(summary), *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert summary.exists(), f"no summary: {result.stdout}\n{result.stderr}"
    return result, json.loads(summary.read_text())


def expected_lines(count: int) -> Counter[str]:
    """The counting job's output for values 0..count-1: `key,n` for n = 1..(values of key)."""
    per_key = Counter(value % KEYS for value in range(count))
    return Counter(f"{key},{n}" for key, total in per_key.items() for n in range(1, total + 1))


#: every kind but those of the local test below (`storage-hang` waits out a checkpoint timeout,
#: `driver-restart` starts a second Spark session) and `executor-loss`, which needs a cluster
#: (tests/e2e/test_cluster.py)
QUICK_KINDS = [
    k
    for k in map(str, FaultKind)
    if k not in (FaultKind.STORAGE_HANG, FaultKind.DRIVER_RESTART, *CLUSTER_KINDS)
]


@pytest.mark.parametrize("runner", ["spark"])
def test_chaos_passes_on_our_file_sink_under_every_fault_kind(tmp_path, runner):
    # one fault of each kind, planned at checkpoints 1, 2, ... 10 (seed 10: disconnect,
    # exception, metadata-write, snapshot-async, commit, slow, kill, restore, snapshot-sync,
    # storage-write); a fault whose checkpoint never reaches its site happens at a later one
    result, summary = chaos(
        tmp_path, "--runner", runner, "--seed", "10", "--schedule", "every:1",
        "--kinds", ",".join(QUICK_KINDS), "--faults", str(len(QUICK_KINDS)),
        "--", "counts", "4500", "1500",
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert summary["passed"], output
    injected = summary["faults_injected"]
    assert injected == dict.fromkeys(QUICK_KINDS, 1), output
    # every restart was caused by a failing fault (two faults may end one attempt together);
    # the stall of `slow` is no failure
    log = read_fault_log(str(tmp_path / "work" / "faulty" / "faults.jsonl"))
    failing = [e for e in log if e["event"] == "fault" and e["kind"] not in NON_FAILING_KINDS]
    assert summary["restarts"] == len({e["attempt"] for e in failing}), output
    assert (summary["records_lost"], summary["records_duplicated"]) == (0, 0)
    assert summary["recovery_s"]["p50"] is not None
    committed = committed_lines(tmp_path / "work" / "faulty" / "sinks" / "0")
    assert Counter(committed) == expected_lines(4500)
    assert "passed: every sink committed the same records under faults" in output


def test_chaos_a_hung_storage_write_and_a_driver_restart_keep_exactly_once(tmp_path):
    # seed 3: a storage-hang at checkpoint 2, then a driver-restart at 6. The state file write
    # of checkpoint 2 blocks for twice the checkpoint timeout, which the harness shortened to
    # 3 s (10 intervals of 300 ms are less); the input lasts longer (5 s), so checkpoint 2
    # itself expires (no final checkpoint subsumes it), and the job restarts from checkpoint 1.
    # Then the harness kills the whole driver and starts it again from the job directory
    result, summary = chaos(
        tmp_path, "--runner", "local", "--kinds", "storage-hang,driver-restart",
        "--schedule", "at:2,6", "--seed", "3", "--", "counts", "7500", "1500",
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert summary["faults_injected"] == {"storage-hang": 1, "driver-restart": 1}, output
    # the hang's restart, then the driver's
    assert summary["restarts"] == 2 and summary["checkpoints_failed"] >= 1, output
    run_log = (tmp_path / "work" / "faulty" / "output.log").read_text()
    assert "checkpoint 2 failed" in run_log and "not acknowledged within 3000 ms" in run_log
    # both drivers ran the same job id: the second restored the first one's job directory
    job_ids = re.findall(r"^submitted job '[^']*' \((\w+)\)", run_log, re.MULTILINE)
    assert len(job_ids) == 2 and job_ids[0] == job_ids[1], run_log
    # from its latest completed checkpoint: 6 (or one that completed before the kill)
    restored = re.search(r"restoring from checkpoint (\d+) in (\S+)/chk-(\d+)", run_log)
    assert restored is not None and int(restored[1]) >= 6, run_log
    assert restored[2] == str(tmp_path / "work" / "faulty" / "checkpoints" / job_ids[0])
    # from each fault to the subtasks running again: the hang's includes the timeout
    assert sorted(summary["recovery_s"]["all"])[-1] >= 3.0, output
    assert len(summary["recovery_s"]["all"]) == 2, output
    committed = committed_lines(tmp_path / "work" / "faulty" / "sinks" / "0")
    assert Counter(committed) == expected_lines(7500)


def test_chaos_finds_both_planted_bugs_and_passes_the_sink_beside_them(tmp_path):
    result, summary = chaos(
        tmp_path, "--runner", "local", "--kinds", "metadata-write", "--seed", "7",
        "--faults", "2", "--", "planted", "2000", "1500",
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert not summary["passed"]
    assert summary["faults_injected"]["metadata-write"] >= 1, output
    ours, eager, attribute = summary["sinks"]
    assert ours["equal"], output
    # every sink pre-committed checkpoint N, then writing its _metadata failed: the eager sink's
    # records of N were committed already, and the job restored from N-1 wrote them again
    assert eager["duplicated"] > 0 and (eager["lost"], eager["unexpected"]) == (0, 0), output
    # restored from a checkpoint, the counts start again at 1: low counts twice, high ones never
    assert attribute["duplicated"] > 0 and attribute["lost"] > 0, output
    assert "'Sink: EagerCommitFileSink' (uid eager-sink): DIFFERENT" in output
    assert "'Sink: FileSink' (uid attribute-sink): DIFFERENT" in output
    assert "  duplicated: " in output and "  lost: " in output
    assert "Error: the output differs under faults (seed 7;" in output
    for sink in range(3):  # without faults, even the buggy job commits the right records
        reference = committed_lines(tmp_path / "work" / "reference" / "sinks" / str(sink))
        assert Counter(reference) == expected_lines(2000)
