"""A checkpoint directory whose disk fills up while a job runs on Spark: a small tmpfs mounted for
the test (the tests run as root) is the checkpoint storage; it is filled to the last byte after
the first checkpoint completed and freed again a few failed checkpoints later."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.jobs import count_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import wait_for_checkpoints, wait_until
from tidegate.metrics.checkpoint_stats import CheckpointStatus

#: the test disk; the job's checkpoints take a few hundred KB
DISK_SIZE = "8m"


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE mounted at a directory of its own, unmounted afterwards."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tidegate-test", str(mount_point)],
        check=True,
        timeout=30,
    )
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", str(mount_point)], check=False, timeout=30)
        if done.returncode != 0:  # still in use (a leftover process): detach it anyway
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True, timeout=30)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; returns it."""
    filler = disk / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    for size in (4096, 1):  # the last partial chunk
        try:
            with open(filler, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler


def test_a_full_checkpoint_disk_fails_checkpoints_cleanly_and_loses_nothing(
    spark, small_disk, tmp_path
):
    n = 24_000
    env = count_job(
        tmp_path / "out", small_disk / "chk", runner="spark", n=n, rate=4_000, interval_ms=200
    )
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1_000)
    client = env.execute_async("disk full")
    jm = client.jobmaster
    wait_for_checkpoints(client, 1)

    filler = fill(small_disk)

    def failed() -> list:
        history = jm.stats.checkpoints.history()
        return [c for c in history if c.status is CheckpointStatus.FAILED]

    wait_until(lambda: len(failed()) >= 3, "three checkpoints failed on the full disk", job=client)
    for checkpoint in failed():  # the reason, and the file that did not fit
        message = checkpoint.failure_message
        assert "No space left on device" in message and str(small_disk / "chk") in message, message
    os.unlink(filler)
    wait_for_checkpoints(client, 2)  # space again: checkpoints complete

    client.get_job_execution_result().result(timeout=300)
    assert jm.stats.restarts == 0, "failed checkpoints within the tolerance must not restart"
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
    # nothing of a failed checkpoint stayed (the job deletes its own retained ones when it ends)
    job_dir = small_disk / "chk" / jm.job_id
    leftovers = sorted(
        str(p.relative_to(job_dir)) for p in job_dir.rglob("*") if "_fence" not in p.parts
    )
    assert leftovers == [], leftovers
