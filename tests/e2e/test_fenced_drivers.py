"""Writer fencing end to end: a second driver started with the same job id takes the job
directory over while the first one's slots are frozen; when they thaw they are zombies whose
writes the fence refuses, the first driver fails without deleting anything, and the output of
both drivers together is exactly-once."""

from __future__ import annotations

import glob
import os
import signal

import pytest

from tests.e2e.jobs import count_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved, wait_for_checkpoints
from tidegate.common.configuration import Configuration
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import ExternalizedCheckpointRetention

N = 30_000
JOB_ID = "fenced-job"


def _job(tmp_path, runner: str, out: str, restore_path: str | None = None):
    """The running count under JOB_ID; the first driver's is rate-limited (it must still run
    when its slots freeze), the second one's, restored, runs at full speed."""
    env = count_job(
        tmp_path / out,
        tmp_path / "chk",
        runner=runner,
        n=N,
        rate=3_000 if restore_path is None else None,
        restore_path=restore_path,
    )
    env.configure(Configuration().set_string("pipeline.job-id", JOB_ID))
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    return env


def _files_of_generation(job_dir: str, generation: int) -> set[str]:
    return set(glob.glob(f"{job_dir}/chk-*/*-g{generation}-*"))


def test_a_second_driver_of_the_same_job_fences_off_the_first_and_its_zombie_slots(
    runner, tmp_path
):
    job_dir = str(tmp_path / "chk" / JOB_ID)
    first = _job(tmp_path, runner, "out1").execute_async("driver A")
    jm_a = first.jobmaster
    wait_for_checkpoints(first, 2)
    pids = sorted(jm_a.slot_pids.values())
    for pid in pids:  # A's slots freeze mid-run: after the takeover they are zombies
        os.kill(pid, signal.SIGSTOP)
    try:
        written_by_a = _files_of_generation(job_dir, 1)
        second = _job(tmp_path, runner, "out2", restore_path=job_dir).execute_async("driver B")
        resolved(second.get_job_execution_result(), "the job to finish", timeout=300)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    jm_b = second.jobmaster
    assert jm_b.job_id == jm_a.job_id == JOB_ID
    restored = f"{job_dir}/chk-{jm_b.stats.restored_from}"

    # The thawed slots tried to write their snapshots; the fence refused every file, and A
    # stops for good instead of taking the directory back.
    with pytest.raises(JobExecutionException, match="FencedWriterError") as err:
        resolved(first.get_job_execution_result(), "the job to finish", timeout=300)
    assert "belongs to generation 2" in str(err.value)
    assert "this writer is generation 1" in str(err.value)
    assert _files_of_generation(job_dir, 1) <= written_by_a
    assert jm_a.stats.failed_checkpoints >= 1  # the zombie slots' snapshots were refused
    # A deleted nothing: the checkpoint B restored from is intact, and B's are its own
    assert os.path.isfile(f"{restored}/_metadata")
    assert all("-g1-" in os.path.basename(f) for f in glob.glob(f"{restored}/*.state"))
    check_exactly_once(
        committed_lines(tmp_path / "out1") + committed_lines(tmp_path / "out2"), N, 2
    )
