"""Bad input when restoring a job from a retained checkpoint (damaged, missing or unwritable
checkpoints) and in the job itself: each gives a clear error and loses nothing (the checkpoint
is left as it was). A successful resume from a retained checkpoint is in test_savepoints."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest

from tests.e2e.jobs import AlwaysBroken, CountThenFailAfterCheckpoint, count_job
from tests.e2e.savepoint_jobs import retained_checkpoint
from tests.support.environments import job_environment
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.snapshots import checkpoint_dirs, fingerprint
from tests.support.waiting import resolved
from tidegate.common.configuration import Configuration
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import ExternalizedCheckpointRetention


def test_a_corrupt_metadata_file_fails_the_restore_clearly_and_is_left_untouched(tmp_path):
    job_dir, _chk, _lines = retained_checkpoint(tmp_path, "local", 50_000)
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
    _job_dir, chk, _lines = retained_checkpoint(tmp_path, "local", 50_000)
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
    from tidegate.common import Encoder
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource

    env = job_environment(runner, tmp_path / "chk", interval_ms=100, restarts=2)
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    env.from_source(NumberSequenceSource(1, 1_000), None, "n").map(AlwaysBroken()).sink_to(sink)
    client = env.execute_async("always broken")
    with pytest.raises(JobExecutionException, match="ValueError: always broken") as err:
        resolved(client.get_job_execution_result(), "the job to finish", timeout=120)
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
        resolved(client.get_job_execution_result(), "the job to finish", timeout=120)
    assert client.jobmaster.stats.restarts == 0
    assert "driver_only_module" in str(err.value)
    assert "importable on every worker" in str(err.value)


# --------------------------------------------------------------------------- integrity (§4)
# A damaged checkpoint (checksum mismatch, missing file, corrupt `_metadata`, unknown format
# version) is refused with an error naming the file and the checkpoint stays as it was. With
# restore fallback allowed, the job restores the older retained checkpoint instead. For that
# to be exactly-once, the damaged checkpoint must not have been committed by the sinks: the
# job below fails right after the checkpoint completed, before its sink is notified.

N = 20_000


def _damaging_job(
    tmp_path, runner: str, *, damage: bool, restarts: int, fallback: bool, retain: bool
):
    env = count_job(
        tmp_path / "out1",
        tmp_path / "chk",
        runner=runner,
        n=N,
        rate=5_000,
        restarts=restarts,
        count=CountThenFailAfterCheckpoint(str(tmp_path / "chk"), damage),
    )
    config = env.get_checkpoint_config()
    config.set_num_retained_checkpoints(2)
    if retain:
        config.set_externalized_checkpoint_retention(
            ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
        )
    if fallback:
        env.configure(
            Configuration().set_string("execution.checkpointing.restore-fallback", "true")
        )
    return env


def _resume(tmp_path, runner: str, job_dir: str, fallback: bool):
    env = count_job(tmp_path / "out2", tmp_path / "chk", runner=runner, n=N, restore_path=job_dir)
    if fallback:
        env.configure(
            Configuration().set_string("execution.checkpointing.restore-fallback", "true")
        )
    return env.execute_async("resumed")


def test_with_restore_fallback_a_restart_skips_a_damaged_checkpoint_exactly_once(
    runner, tmp_path, caplog
):
    env = _damaging_job(tmp_path, runner, damage=True, restarts=3, fallback=True, retain=False)
    client = env.execute_async("fallback on restart")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    jm = client.jobmaster
    skipped = [r.getMessage() for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    assert len(skipped) == 1, skipped
    damaged_id = int(skipped[0].split("chk-", 1)[1].split(" ", 1)[0])
    assert "does not match its checksum" in skipped[0] and "operator 'count'" in skipped[0]
    assert jm.stats.restarts == 1 and jm.stats.restored_from < damaged_id
    check_exactly_once(committed_lines(tmp_path / "out1"), N, 2)


def test_a_damaged_checkpoint_fails_the_restart_naming_the_file_and_everything_is_kept(
    runner, tmp_path
):
    """A state file that no longer matches its checksum: the restart refuses it and keeps
    everything; restoring the job directory refuses it too (the file named, nothing changed,
    nothing committed), and with fallback restores the older checkpoint, exactly-once."""
    # default retention: a failed job deletes its checkpoints, but not after finding damage
    env = _damaging_job(tmp_path, runner, damage=True, restarts=3, fallback=False, retain=False)
    client = env.execute_async("no fallback")
    with pytest.raises(JobExecutionException, match="ChecksumMismatchError") as err:
        resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    jm = client.jobmaster
    message = str(err.value)
    named = r"state file (count-\d-g1-[0-9a-f]{12}\.state) \(operator 'count', subtask \d\)"
    damaged_file = re.search(named, message).group(1)
    assert "does not match its checksum" in message and "restore-fallback" in message
    assert jm.stats.restarts == 1  # the restart's restore refused it; no further attempts
    # nothing deleted: the refused checkpoint still holds the damaged file, the older one too
    job_dir = str(tmp_path / "chk" / jm.job_id)
    retained = [d for d in checkpoint_dirs(job_dir) if os.path.exists(f"{d}/_metadata")]
    assert len(retained) == 2
    assert os.path.exists(f"{retained[-1]}/{damaged_file}")
    first_output = committed_lines(tmp_path / "out1")
    assert len(set(first_output)) == len(first_output) < N
    # restoring the job directory: without fallback the same clear error, with it exactly-once
    before = {d: fingerprint(d) for d in retained}
    with pytest.raises(JobExecutionException, match=damaged_file) as again:
        _resume(tmp_path, runner, job_dir, fallback=False).get_job_execution_result().result(
            timeout=300
        )
    assert "does not match its checksum" in str(again.value)
    assert f"An older checkpoint is retained ({retained[-2]})" in str(again.value)
    assert {d: fingerprint(d) for d in retained} == before
    assert not committed_lines(tmp_path / "out2")
    resumed = _resume(tmp_path, runner, job_dir, fallback=True)
    resolved(resumed.get_job_execution_result(), "the job to finish", timeout=300)
    assert resumed.jobmaster.stats.restored_from == int(retained[-2].rsplit("-", 1)[1])
    check_exactly_once(first_output + committed_lines(tmp_path / "out2"), N, 2)
    assert {d: fingerprint(d) for d in retained} == before  # NO_CLAIM: never modified


def _damage(kind: str, checkpoint: str) -> str:
    """Damage `checkpoint` like a storage fault or a wrong tool would; returns the file named."""
    state_file = sorted(glob.glob(f"{checkpoint}/count-*.state"))[0]
    match kind:
        case "missing file":
            os.remove(state_file)
        case "corrupt metadata":
            with open(f"{checkpoint}/_metadata", "r+b") as f:
                f.truncate(os.path.getsize(f"{checkpoint}/_metadata") // 2)
            return f"{checkpoint}/_metadata"
        case "unknown format version":
            with open(f"{checkpoint}/_metadata") as f:
                document = json.load(f)
            with open(f"{checkpoint}/_metadata", "w") as f:
                json.dump({**document, "version": 7}, f)
            return f"{checkpoint}/_metadata"
    return os.path.basename(state_file)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("missing file", "does not exist"),
        ("corrupt metadata", "not valid checkpoint metadata"),
        ("unknown format version", "version 7, but this tidegate reads version 2; it was"),
    ],
)
def test_restoring_a_job_directory_with_a_damaged_latest_checkpoint(tmp_path, kind, error):
    """Without fallback: a clear error naming the file, the checkpoint untouched. With it: the
    older retained checkpoint, exactly-once. (A checksum mismatch: the test above.)"""
    env = _damaging_job(tmp_path, "local", damage=False, restarts=0, fallback=False, retain=True)
    first = env.execute_async("fails after its second checkpoint")
    with pytest.raises(JobExecutionException, match="injected failure after checkpoint"):
        resolved(first.get_job_execution_result(), "the job to finish", timeout=300)
    job_dir = str(tmp_path / "chk" / first.jobmaster.job_id)
    older, latest = [d for d in checkpoint_dirs(job_dir) if os.path.exists(f"{d}/_metadata")]
    named = _damage(kind, latest)
    before = fingerprint(latest), fingerprint(older)
    with pytest.raises(JobExecutionException) as err:
        _resume(tmp_path, "local", job_dir, fallback=False).get_job_execution_result().result(
            timeout=300
        )
    assert named in str(err.value) and error in str(err.value)
    assert f"An older checkpoint is retained ({older})" in str(err.value)
    assert (fingerprint(latest), fingerprint(older)) == before
    assert not committed_lines(tmp_path / "out2")
    resumed = _resume(tmp_path, "local", job_dir, fallback=True)
    resolved(resumed.get_job_execution_result(), "the job to finish", timeout=300)
    assert resumed.jobmaster.stats.restored_from == int(older.rsplit("-", 1)[1])
    check_exactly_once(
        committed_lines(tmp_path / "out1") + committed_lines(tmp_path / "out2"), N, 2
    )
    assert (fingerprint(latest), fingerprint(older)) == before  # NO_CLAIM: never modified
