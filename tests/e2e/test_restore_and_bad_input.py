"""Restoring a job from a retained checkpoint, and bad input: each gives a clear error and
loses nothing (the checkpoint is left as it was)."""

from __future__ import annotations

import glob
import os
import time

import pytest

from tests.e2e.jobs import AlwaysBroken, check_exactly_once, committed_lines, count_job
from tidegate.common import JobStatus
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import ExternalizedCheckpointRetention


def _retained_checkpoint(tmp_path, runner: str, n: int = 50_000) -> tuple[str, list[str]]:
    """Run a slow job until two checkpoints completed, cancel it (checkpoints retained on
    cancellation); returns the job's checkpoint directory and the output committed so far."""
    env = count_job(tmp_path / "out1", tmp_path / "chk", runner=runner, n=n, rate=5_000)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    client = env.execute_async("to be cancelled")
    jm = client.jobmaster
    deadline = time.monotonic() + 120
    while jm.stats.completed_checkpoints < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.cancel().result(timeout=120)
    assert client.get_job_status().result() is JobStatus.CANCELED
    with pytest.raises(JobExecutionException, match="cancelled"):
        client.get_job_execution_result().result()
    return str(tmp_path / "chk" / jm.job_id), committed_lines(tmp_path / "out1")


def test_a_cancelled_job_resumes_from_its_latest_retained_checkpoint_exactly_once(runner, tmp_path):
    n = 50_000
    job_dir, first_output = _retained_checkpoint(tmp_path, runner, n)
    assert 0 < len(first_output) < n
    env = count_job(tmp_path / "out2", tmp_path / "chk", runner=runner, n=n, restore_path=job_dir)
    client = env.execute_async("resumed")
    client.get_job_execution_result().result(timeout=300)
    assert client.jobmaster.stats.restored_from is not None
    check_exactly_once(first_output + committed_lines(tmp_path / "out2"), n, 2)


def test_a_corrupt_metadata_file_fails_the_restore_clearly_and_is_left_untouched(tmp_path):
    job_dir, _ = _retained_checkpoint(tmp_path, "local")
    metadata = sorted(glob.glob(f"{job_dir}/chk-*/_metadata"))[-1]
    with open(metadata, "w") as f:
        f.write('{"format": "tidegate-checkpoint", "version": 1, "job_id"')
    env = count_job(
        tmp_path / "out2",
        tmp_path / "chk",
        runner="local",
        n=10,
        restore_path=os.path.dirname(metadata),
    )
    with pytest.raises(JobExecutionException, match="_metadata") as err:
        env.execute("corrupt")
    assert "corrupt" in str(err.value).lower() or "not valid" in str(err.value).lower()
    assert os.path.exists(metadata)
    assert not committed_lines(tmp_path / "out2")


def test_restoring_from_a_path_without_a_checkpoint_names_the_path(tmp_path):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    env = count_job(
        tmp_path / "out", tmp_path / "chk", runner="local", n=10, restore_path=str(empty)
    )
    with pytest.raises(JobExecutionException, match="nothing-here"):
        env.execute("missing")


def test_a_missing_state_file_fails_the_restore_and_names_the_file(tmp_path):
    job_dir, _ = _retained_checkpoint(tmp_path, "local")
    chk = sorted(glob.glob(f"{job_dir}/chk-*"), key=lambda p: int(p.rsplit("-", 1)[1]))[-1]
    victim = sorted(glob.glob(f"{chk}/count-*.state"))[0]
    os.remove(victim)
    env = count_job(tmp_path / "out2", tmp_path / "chk", runner="local", n=10, restore_path=chk)
    with pytest.raises(JobExecutionException, match=os.path.basename(victim)):
        env.execute("missing state file")
    assert os.path.exists(f"{chk}/_metadata")


def test_an_unwritable_checkpoint_directory_fails_with_the_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = count_job(tmp_path / "out", blocker / "chk", runner="local", n=10)
    with pytest.raises(JobExecutionException, match="a-file"):
        env.execute("unwritable")


def test_a_function_that_always_raises_fails_the_job_with_the_users_error(runner, tmp_path):
    from tidegate.common import Configuration, Encoder, RestartStrategies
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", runner)
    )
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    env.from_source(NumberSequenceSource(1, 1_000), None, "n").map(AlwaysBroken()).sink_to(sink)
    client = env.execute_async("always broken")
    with pytest.raises(JobExecutionException, match="ValueError: always broken") as err:
        client.get_job_execution_result().result(timeout=120)
    assert client.jobmaster.stats.restarts == 2
    assert "always broken" in err.value.detail
    assert not committed_lines(tmp_path / "out")


def test_a_worker_that_cannot_import_the_users_module_says_so_with_a_hint(
    runner, tmp_path, monkeypatch
):
    from tidegate.common import Configuration, Encoder, RestartStrategies
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource

    (tmp_path / "driver_only_module.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable in the driver, not in workers
    from driver_only_module import double

    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", runner)
    )
    # restarts could not help: the job fails at once instead of using them up
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    env.from_source(NumberSequenceSource(1, 10), None, "n").map(double).sink_to(sink)
    client = env.execute_async("unimportable")
    with pytest.raises(JobExecutionException, match="could not load the job") as err:
        client.get_job_execution_result().result(timeout=120)
    assert client.jobmaster.stats.restarts == 0
    assert "driver_only_module" in str(err.value)
    assert "importable on every worker" in str(err.value)
