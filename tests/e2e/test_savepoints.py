"""Savepoints and manual checkpoints end to end: stop-with-savepoint (with and without drain)
and restore, also after moving the savepoint; a failover after a savepoint; manual resumes
from retained checkpoints; restore modes; changed uids; and requests that fail without
failing the job. Each checks the committed output record for record (check_exactly_once)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.savepoint_jobs import retained_checkpoint, savepoint_job, split_probe_lines
from tests.support.output import committed_lines
from tests.support.references import check_counted_exactly_once, check_exactly_once
from tests.support.snapshots import fingerprint, records_read_at, stop_with_savepoint
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.checkpoint.errors import (
    CheckpointTriggerError,
    JobNotRunningError,
    NoSavepointDirectoryError,
)
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common import JobStatus
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import ExternalizedCheckpointRetention

N = 30_000
#: no periodic checkpoints: only the ones a test triggers (and the final one)
MANUAL_ONLY_MS = 3_600_000


def _stop_with_savepoint(tmp_path: Path, runner: str, drain: bool = False, **job):
    """Run the job until a checkpoint completed, stop it with a savepoint; returns the
    savepoint directory, its metadata and the committed output."""
    out = tmp_path / "out1"
    env = savepoint_job(out, tmp_path / "chk", runner=runner, n=N, **job)
    client = env.execute_async("stopped with a savepoint")
    path = stop_with_savepoint(client, tmp_path / "savepoints", drain=drain)
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert re.fullmatch(rf"savepoint-{client.get_job_id()[:6]}-[0-9a-f]{{12}}", Path(path).name)
    metadata = json.loads((Path(path) / "_metadata").read_text())
    assert metadata["is_savepoint"] and metadata["job_id"] == client.get_job_id()
    return path, metadata, committed_lines(out)


def _resume(tmp_path: Path, runner: str, path: str, name: str = "out2", **job):
    """Run the job restored from `path` to its end, at full speed (nothing waits for it while
    it runs); returns its client and committed output."""
    config = {"execution.savepoint.path": path, **job.pop("config", {})}
    job.setdefault("rate", None)
    env = savepoint_job(tmp_path / name, tmp_path / "chk", runner=runner, n=N, config=config, **job)
    client = env.execute_async("resumed")
    resolved(client.get_job_execution_result(), "the job to finish")
    return client, committed_lines(tmp_path / name)


@pytest.mark.parametrize("moved", [False, True], ids=["in-place", "moved"])
def test_stop_with_savepoint_then_restore_continues_exactly_once(runner, tmp_path, moved):
    path, metadata, first_lines = _stop_with_savepoint(tmp_path, runner, finish_probe=True)
    assert Path(path).parent == tmp_path / "savepoints"
    files = {h["file"] for op in metadata["operators"].values() for h in op["subtasks"].values()}
    assert files and all("/" not in f for f in files)  # relative names
    assert set(os.listdir(path)) == files | {"_metadata"}  # self-contained
    finished, first = split_probe_lines(first_lines)
    assert finished == []  # without drain no operator's finish() ran
    # the sources stopped right after the savepoint's barrier, which committed what they read
    check_counted_exactly_once(first, records_read_at(path, N))
    if moved:
        target = tmp_path / "elsewhere" / "my-savepoint"
        target.parent.mkdir()
        shutil.move(path, target)
        path = str(target)

    client, second_lines = _resume(tmp_path, runner, path, finish_probe=True)

    assert client.jobmaster.stats.restored_from == metadata["checkpoint_id"]
    _finished, second = split_probe_lines(second_lines)
    check_exactly_once(first + second, N, 2)


def test_stop_with_savepoint_and_drain_flushes_every_operator_first(spark, tmp_path):
    path, metadata, first_lines = _stop_with_savepoint(
        tmp_path, "spark", drain=True, finish_probe=True
    )
    finished, first = split_probe_lines(first_lines)
    # EndOfData reached every subtask before the savepoint, so finish() ran and its output
    # was committed by the savepoint
    assert sorted(finished) == ["finished,0", "finished,1"]
    # the sources ended early, as if bounded: the savepoint committed all they read
    check_counted_exactly_once(first, records_read_at(path, N))

    client, second_lines = _resume(tmp_path, "spark", path, finish_probe=True)

    assert client.jobmaster.stats.restored_from == metadata["checkpoint_id"]
    check_exactly_once(first + split_probe_lines(second_lines)[1], N, 2)


def test_a_failover_after_a_savepoint_restores_the_savepoint_not_an_older_checkpoint(
    spark, tmp_path
):
    out = tmp_path / "out"
    env = savepoint_job(out, tmp_path / "chk", runner="spark", n=N, interval_ms=MANUAL_ONLY_MS)
    client = env.execute_async("savepoint then kill")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.records_read > 1_000, "records were read", job=client)
    checkpoint = resolved(client.trigger_checkpoint(), "the triggered checkpoint")
    wait_until(lambda: jm.stats.records_read > 5_000, "more records were read", job=client)
    path = resolved(client.trigger_savepoint(str(tmp_path / "savepoints")), "the savepoint")
    # a savepoint counts as a checkpoint for the two-phase-commit sink: it commits exactly
    # the output of the records its sources had read (no periodic checkpoint runs meanwhile)
    read = records_read_at(path, N)
    wait_until(
        lambda: len(committed_lines(out)) == sum(map(len, read)),
        "the savepoint's output was committed",
        job=client,
    )
    check_counted_exactly_once(committed_lines(out), read)
    savepoint = jm.latest_savepoint
    assert savepoint.path == path and savepoint.checkpoint_id > checkpoint.checkpoint_id
    assert jm.store.latest() == checkpoint  # savepoints are not retained checkpoints

    os.kill(sorted(jm.slot_pids.items())[0][1], signal.SIGKILL)
    resolved(client.get_job_execution_result(), "the job to finish")

    assert jm.stats.restarts == 1
    assert jm.stats.restored_from == savepoint.checkpoint_id
    check_exactly_once(committed_lines(out), N, 2)  # restoring the checkpoint would duplicate


def test_three_manual_resumes_in_a_row_from_retained_checkpoints(spark, tmp_path):
    n, lines, restored, restore = 40_000, [], [], None
    for run in range(4):
        config = {"execution.state-recovery.path": restore} if restore else {}
        out = tmp_path / f"out{run}"
        rate = 5_000 if run < 3 else None  # the last run is not cancelled: it runs at full speed
        env = savepoint_job(out, tmp_path / "chk", runner="spark", n=n, rate=rate, config=config)
        env.get_checkpoint_config().set_externalized_checkpoint_retention(
            ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
        )
        client = env.execute_async(f"run {run}")
        if run < 3:
            wait_for_checkpoints(client, 2)
            resolved(client.cancel(), "the job to be cancelled")
            restore = str(tmp_path / "chk" / client.get_job_id())  # its latest checkpoint
        else:
            resolved(client.get_job_execution_result(), "the job to finish")
        restored.append(client.jobmaster.stats.restored_from)
        lines += committed_lines(out)
    assert restored[0] is None and restored[1] < restored[2] < restored[3]
    check_exactly_once(lines, n, 2)


def test_a_cancelled_job_resumes_from_its_latest_retained_checkpoint_exactly_once_unmodified(
    runner, tmp_path
):
    """Restored from the job directory, a job continues from its latest retained checkpoint;
    in NO_CLAIM mode (the default) it never modifies or deletes that snapshot."""
    job_dir, chk, first = retained_checkpoint(tmp_path, runner, N)
    before = fingerprint(chk)
    config = {"execution.state-recovery.path": job_dir}
    env = savepoint_job(tmp_path / "out2", tmp_path / "chk", runner=runner, n=N, config=config)
    client = env.execute_async("no claim")
    wait_for_checkpoints(client, 3)  # its own checkpoints subsume each other
    resolved(client.get_job_execution_result(), "the job to finish")

    assert client.jobmaster.stats.restored_from == int(chk.rsplit("-", 1)[1])
    assert fingerprint(chk) == before  # every file, byte for byte
    check_exactly_once(first + committed_lines(tmp_path / "out2"), N, 2)


def test_claim_makes_the_restored_checkpoint_the_jobs_own_so_it_is_subsumed(spark, tmp_path):
    _job_dir, chk, first = retained_checkpoint(tmp_path, "spark", N)
    config = {"execution.state-recovery.path": chk, "execution.state-recovery.claim-mode": "CLAIM"}
    env = savepoint_job(tmp_path / "out2", tmp_path / "chk", runner="spark", n=N, config=config)
    client = env.execute_async("claim")
    assert os.path.isdir(chk)
    wait_for_checkpoints(client, 1)  # one checkpoint retained: the claimed one is subsumed

    assert not os.path.exists(chk)
    resolved(client.get_job_execution_result(), "the job to finish")
    check_exactly_once(first + committed_lines(tmp_path / "out2"), N, 2)


def test_a_changed_uid_fails_the_restore_naming_the_operator_and_the_fix(tmp_path):
    path, _metadata, _first = _stop_with_savepoint(tmp_path, "local")
    before = fingerprint(path)
    config = {"execution.savepoint.path": path}
    env = savepoint_job(
        tmp_path / "out2",
        tmp_path / "chk",
        runner="local",
        n=N,
        count_uid="count-v2",
        config=config,
    )
    with pytest.raises(JobExecutionException) as err:
        env.execute("changed uid")
    message = str(err.value)
    assert "uid 'count' (Process)" in message
    assert "--allow-non-restored-state" in message and ".uid(...)" in message
    assert fingerprint(path) == before
    assert not committed_lines(tmp_path / "out2")


def test_allowing_non_restored_state_drops_the_unmatched_state_with_a_warning(
    spark, tmp_path, caplog
):
    path, _metadata, first_lines = _stop_with_savepoint(tmp_path, "local")
    config = {"execution.savepoint.ignore-unclaimed-state": "true"}
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        _client, second = _resume(tmp_path, "spark", path, count_uid="count-v2", config=config)
    assert "uid 'count' (Process)" in caplog.text and "dropped" in caplog.text
    # the sources and the sink were restored; the renamed count starts empty
    values = sorted(int(line.split(",")[1]) for line in first_lines + second)
    assert values == list(range(N))
    counts_by_key: dict[str, list[int]] = {}
    for line in second:
        key, _value, count = line.split(",")
        counts_by_key.setdefault(key, []).append(int(count))
    assert all(min(counts) == 1 for counts in counts_by_key.values())


def test_a_manually_triggered_checkpoint_completes_and_commits_the_output(runner, tmp_path):
    out, default_dir = tmp_path / "out", tmp_path / "default-savepoints"
    config = {"execution.checkpointing.savepoint-dir": str(default_dir)}
    env = savepoint_job(
        out, tmp_path / "chk", runner=runner, n=N, interval_ms=MANUAL_ONLY_MS, config=config
    )
    client = env.execute_async("manual checkpoint")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.records_read > 0, "records were read", job=client)

    checkpoint = resolved(client.trigger_checkpoint(), "the triggered checkpoint")

    assert isinstance(checkpoint, CompletedCheckpoint) and not checkpoint.is_savepoint
    assert checkpoint.checkpoint_id == 1
    assert checkpoint.path == str(tmp_path / "chk" / client.get_job_id() / "chk-1")
    assert os.path.isfile(f"{checkpoint.path}/_metadata")
    assert jm.store.latest() == checkpoint
    wait_until(lambda: committed_lines(out), "the checkpoint's output was committed", job=client)
    # without a directory the configured default is used
    assert Path(resolved(client.trigger_savepoint(), "the savepoint")).parent == default_dir
    resolved(client.cancel(), "the job to be cancelled")


def test_requests_the_job_cannot_serve_fail_with_the_reason(tmp_path):
    env = savepoint_job(tmp_path / "out", tmp_path / "chk", runner="local", n=N)
    client = env.execute_async("no savepoint directory")
    wait_for_checkpoints(client)
    with pytest.raises(NoSavepointDirectoryError, match=r"execution\.checkpointing\.savepoint-dir"):
        resolved(client.trigger_savepoint(), "the savepoint")
    with pytest.raises(NoSavepointDirectoryError):
        resolved(client.stop_with_savepoint(), "the stop with a savepoint")
    resolved(client.cancel(), "the job to be cancelled")
    for request in (
        client.trigger_checkpoint,
        lambda: client.trigger_savepoint(str(tmp_path / "sp")),
        lambda: client.stop_with_savepoint(True, str(tmp_path / "sp")),
    ):
        with pytest.raises(JobNotRunningError, match="is CANCELED, not RUNNING"):
            resolved(request(), "the request to be refused")
    assert not (tmp_path / "sp").exists()


def test_a_failed_savepoint_never_fails_the_job(spark, tmp_path):
    flag, savepoints, out = tmp_path / "decline", tmp_path / "savepoints", tmp_path / "out"
    flag.touch()
    env = savepoint_job(
        out,
        tmp_path / "chk",
        runner="spark",
        n=N,
        interval_ms=MANUAL_ONLY_MS,
        restarts=0,  # any failure of the job would fail it for good
        decline_flag=flag,
    )
    client = env.execute_async("declined savepoints")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.records_read > 0, "records were read", job=client)

    with pytest.raises(CheckpointTriggerError, match=r"declined.*The job keeps running"):
        resolved(client.trigger_savepoint(str(savepoints)), "the savepoint")
    wait_until(lambda: os.listdir(savepoints) == [], "the failed savepoint was removed", job=client)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointTriggerError, match="cannot create the savepoint directory"):
        resolved(client.trigger_savepoint(str(blocker / "savepoints")), "the savepoint")
    with pytest.raises(CheckpointTriggerError, match=r"declined.*sources resume"):
        resolved(client.stop_with_savepoint(False, str(savepoints)), "the stop with a savepoint")
    read = jm.stats.records_read
    wait_until(lambda: jm.stats.records_read > read + 1_000, "the sources resumed", job=client)
    assert jm.status is JobStatus.RUNNING

    flag.unlink()
    resolved(client.get_job_execution_result(), "the job to finish")
    assert jm.stats.restarts == 0
    check_exactly_once(committed_lines(out), N, 2)


def test_a_failed_drain_restarts_the_job_from_its_latest_checkpoint(spark, tmp_path):
    flag, out = tmp_path / "decline", tmp_path / "out"
    env = savepoint_job(
        out,
        tmp_path / "chk",
        runner="spark",
        n=N,
        restarts=0,  # the restart after a failed drain is not a failure
        decline_flag=flag,
        finish_probe=True,
    )
    client = env.execute_async("failed drain")
    wait_for_checkpoints(client)
    flag.touch()
    with pytest.raises(CheckpointTriggerError, match="restarts from its latest checkpoint"):
        resolved(
            client.stop_with_savepoint(True, str(tmp_path / "savepoints")),
            "the stop with a savepoint",
        )
    flag.unlink()

    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 1
    finished, lines = split_probe_lines(committed_lines(out))
    assert sorted(finished) == ["finished,0", "finished,1"]  # the drained attempt's are gone
    check_exactly_once(lines, N, 2)


def test_savepoints_and_restores_warn_about_stateful_operators_without_a_uid(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        path, _metadata, _first = _stop_with_savepoint(tmp_path, "local", count_uid=None)
    assert re.search(r"savepoint .*Process \(process-\d+\) have no explicit uid", caplog.text)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        _resume(tmp_path, "local", path, count_uid=None)
    assert re.search(r"restoring .*Process \(process-\d+\) have no explicit uid", caplog.text)


CLI_JOB = f"""
import sys
from pathlib import Path
from tests.e2e.savepoint_jobs import savepoint_job

out, checkpoints, count_uid = sys.argv[1:4]
env = savepoint_job(
    Path(out), Path(checkpoints), runner="spark", n={N}, rate=None, count_uid=count_uid
)
env.execute("cli restore")
"""


def test_tidegate_run_restores_a_savepoint_and_can_drop_unmatched_state(tmp_path):
    path, metadata, first_lines = _stop_with_savepoint(tmp_path, "local")
    job = tmp_path / "job.py"
    job.write_text(CLI_JOB)
    out = tmp_path / "out2"
    result = subprocess.run(
        [sys.executable, "-m", "tidegate", "run", str(job), "--runner", "local",
         "--from-savepoint", path, "--allow-non-restored-state",
         "--", str(out), str(tmp_path / "chk"), "count-v2"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"restoring from savepoint {metadata['checkpoint_id']} in {path}" in result.stderr
    assert "uid 'count' (Process)" in result.stderr and "dropped" in result.stderr
    values = sorted(int(line.split(",")[1]) for line in first_lines + committed_lines(out))
    assert values == list(range(N))
