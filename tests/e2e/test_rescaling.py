"""Rescaling end to end on Spark: a job runs at parallelism A until a checkpoint or savepoint,
stops, and a new job restores it at parallelism B and runs to the end.

The job (rescale_jobs.py): numbers -> split list state -> union list state -> key_by ->
running count (ValueState; each output line names the subtask that counted it) -> FileSink.
Both runs write to the same output directory. Every case checks that the committed output
equals the reference record for record (no loss, no duplicates, every key's counts 1..n),
that every key was counted on the subtask the key-group formula predicts (before and after
the rescale), that the split list state's entries are cut over the new subtasks as DESIGN §6
says and their multiset is unchanged, and that every new subtask holds the whole union list
state.

Each transition runs once (the full cross product is too slow on 2 cores); max parallelism
and the kind of snapshot are spread so that each combination appears twice:

=========  ===================  ===============  ==================================
A -> B     max parallelism      snapshot         phase 1 ends by
=========  ===================  ===============  ==================================
1 -> 2     13                   savepoint        stop-with-savepoint
2 -> 3     128 (the default)    checkpoint       cancel, checkpoints retained
3 -> 7     13                   checkpoint       cancel, checkpoints retained
4 -> 8     128                  savepoint        stop-with-savepoint
2 -> 1     128                  savepoint        stop-with-savepoint
3 -> 2     13                   checkpoint       cancel, checkpoints retained
7 -> 3     128 (the default)    checkpoint       cancel, checkpoints retained
8 -> 4     13                   savepoint        stop-with-savepoint
=========  ===================  ===============  ==================================

The restored job sets no max parallelism where the first run used the default (it takes the
snapshot's), and sets the same one where the first run set one. Further cases: an injected
failure during the rescaled run (4 -> 2, checkpoint, 128: the restart also cleans up the
leftovers of the writer indexes that no longer exist), a change of one operator's
parallelism only (the count, 2 -> 5, checkpoint, 13), and the refusals: another max
parallelism, a parallelism above it (also for one operator, and through `tidegate run -p`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.rescale_jobs import (
    check_key_placement,
    check_list_states,
    check_rescaled_output,
    rescale_job,
)
from tests.support.output import committed_lines
from tests.support.snapshots import stop_with_savepoint
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.common import JobStatus
from tidegate.common.configuration import Configuration
from tidegate.common.job_client import JobExecutionException

N = 12_000
#: records per second of the first run, so that it is still running when it is stopped
FIRST_RATE = 3_000
#: the rescaled run: rate-limited too, so that it takes checkpoints of its own
SECOND_RATE = 12_000

CASES = [
    # (A, B, max parallelism, set in the first run, snapshot)
    (1, 2, 13, True, "savepoint"),
    (2, 3, 128, False, "checkpoint"),
    (3, 7, 13, True, "checkpoint"),
    (4, 8, 128, True, "savepoint"),
    (2, 1, 128, True, "savepoint"),
    (3, 2, 13, True, "checkpoint"),
    (7, 3, 128, False, "checkpoint"),
    (8, 4, 13, True, "savepoint"),
]


def _first_run(tmp_path: Path, parallelism: int, max_p: int | None, snapshot: str, **job):
    """Run at `parallelism` until a checkpoint completed and half a second of input passed;
    end with a savepoint or a cancel. Returns the path to restore and the committed output."""
    env = rescale_job(
        tmp_path, "1", parallelism=parallelism, n=N, rate=FIRST_RATE, max_parallelism=max_p, **job
    )
    client = env.execute_async("first run")
    jm = client.jobmaster
    wait_for_checkpoints(client, 2)
    wait_until(lambda: jm.stats.records_read >= FIRST_RATE // 2, "enough input", job=client)
    if snapshot == "savepoint":
        path = resolved(client.stop_with_savepoint(False), "the stop with a savepoint")
        resolved(client.get_job_execution_result(), "the job to finish")
    else:
        resolved(client.cancel(), "the job to be cancelled")
        assert client.get_job_status().result() is JobStatus.CANCELED
        path = str(tmp_path / "chk" / jm.job_id)  # its latest retained checkpoint
    return path, _hidden(tmp_path / "out")


def _second_run(tmp_path: Path, parallelism: int, path: str, **job):
    env = rescale_job(tmp_path, "2", parallelism=parallelism, n=N, rate=SECOND_RATE,
                      restore_path=path, **job)  # fmt: skip
    client = env.execute_async("rescaled")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restored_from is not None
    return client, committed_lines(tmp_path / "out")


def _hidden(out: Path) -> set[str]:
    """In-progress files: written, not committed (yet)."""
    return {p.name for p in out.iterdir() if p.name.startswith(".")}


@pytest.mark.parametrize(
    ("old", "new", "max_p", "set_max", "snapshot"),
    CASES,
    ids=[f"{a}to{b}-max{m}-{s}" for a, b, m, _, s in CASES],
)
def test_a_job_rescaled_from_a_snapshot_keeps_its_state_and_output_exactly_once(
    spark, tmp_path, old, new, max_p, set_max, snapshot
):
    configured = max_p if set_max else None
    path, leftovers = _first_run(tmp_path, old, configured, snapshot)

    _client, lines = _second_run(tmp_path, new, path, max_parallelism=configured)

    check_rescaled_output(lines, N, old)
    check_key_placement(lines, "1", old, max_p)
    check_key_placement(lines, "2", new, max_p)
    check_list_states(tmp_path, old, new)
    # the rescaled job committed all it wrote; only the first job's leftovers may remain (a
    # new job's attempts start at 0 again, so it cannot tell them from its own: see the guide)
    assert _hidden(tmp_path / "out") <= leftovers


def test_a_failure_during_the_rescaled_run_restarts_it_and_stays_exactly_once(spark, tmp_path):
    path, _leftovers = _first_run(tmp_path, 4, None, "checkpoint")
    # the last value of the first split: read late in the rescaled run, in its attempt 0
    client, lines = _second_run(tmp_path, 2, path, fail_at={0: N // 4 - 1})

    assert client.jobmaster.stats.restarts == 1
    check_rescaled_output(lines, N, 4)
    check_key_placement(lines, "2", 2, 128)
    check_list_states(tmp_path, 4, 2, attempt=0)
    check_list_states(tmp_path, 4, 2, attempt=1)  # the restart at 2 keeps the rescaled state
    # the restart removed every leftover of earlier attempts: also of writers 2 and 3, which
    # no longer exist (subtasks 0 and 1 took them over)
    assert _hidden(tmp_path / "out") == set()


def test_changing_one_operators_parallelism_rescales_only_its_state(spark, tmp_path):
    path, _leftovers = _first_run(tmp_path, 2, 13, "checkpoint")

    _client, lines = _second_run(tmp_path, 2, path, max_parallelism=13, count_parallelism=5)

    check_rescaled_output(lines, N, 2)
    check_key_placement(lines, "1", 2, 13)
    check_key_placement(lines, "2", 5, 13)
    check_list_states(tmp_path, 2, 2)


# --------------------------------------------------------------------- refusals (max parallelism)
# A snapshot of max parallelism 13 (local runner: quick); each refusal happens before any slot
# starts, leaves the snapshot as it was and commits no output.


@pytest.fixture(scope="module")
def savepoint_of_max_13(tmp_path_factory) -> str:
    tmp_path = tmp_path_factory.mktemp("max13")
    env = rescale_job(tmp_path, "1", parallelism=2, n=N, rate=FIRST_RATE, max_parallelism=13)
    env.configure(Configuration().set_string("execution.runner", "local"))
    client = env.execute_async("first run")
    path = stop_with_savepoint(client)
    return path


def _refused(tmp_path: Path, path: str, match: str, **job) -> None:
    before = sorted(os.listdir(path))
    env = rescale_job(tmp_path, "2", n=N, rate=None, restore_path=path, **job)
    env.configure(Configuration().set_string("execution.runner", "local"))
    with pytest.raises(JobExecutionException, match=match) as err:
        env.execute("refused")
    assert "Traceback" not in str(err.value)
    assert sorted(os.listdir(path)) == before
    assert not (tmp_path / "out").exists()  # no sink was started
    assert not (tmp_path / "probes-2").exists()  # nor any other operator  # no operator was started


def test_a_restore_with_another_max_parallelism_is_refused(tmp_path, savepoint_of_max_13):
    _refused(
        tmp_path,
        savepoint_of_max_13,
        r"configured max parallelism 64 differs from the snapshot's 13.*Set it to 13",
        parallelism=2,
        max_parallelism=64,
    )


def test_a_restore_with_a_parallelism_above_the_max_parallelism_is_refused(
    tmp_path, savepoint_of_max_13
):
    _refused(
        tmp_path,
        savepoint_of_max_13,
        r"parallelism 14: the snapshot has 13 key groups.*at most 13",
        parallelism=14,
    )


def test_one_operator_above_the_max_parallelism_is_refused_naming_it(tmp_path, savepoint_of_max_13):
    _refused(
        tmp_path,
        savepoint_of_max_13,
        r"operator '.*Process.*' has parallelism 20.*at most 13",
        parallelism=2,
        count_parallelism=20,
    )


CLI_JOB = """
import sys
from pathlib import Path
from tests.e2e.rescale_jobs import rescale_job

env = rescale_job(Path(sys.argv[1]), "2", parallelism=2, n=100, rate=None)
env.execute("cli rescale")
"""


def test_tidegate_run_with_a_parallelism_above_the_max_parallelism_is_refused(
    tmp_path, savepoint_of_max_13
):
    job = tmp_path / "job.py"
    job.write_text(CLI_JOB)
    result = subprocess.run(
        [sys.executable, "-m", "tidegate", "run", str(job), "--runner", "local", "-p", "14",
         "--from-savepoint", savepoint_of_max_13, "--", str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "the snapshot has 13 key groups" in result.stderr
    assert "at most 13" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
