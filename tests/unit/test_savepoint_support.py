"""The pieces of savepoints: directory naming and deletion, which snapshot a failover restores,
state matching by uid on restore, the restore settings, and the JobMaster's answers when it
cannot take a snapshot (the requests themselves: test_snapshot_requests.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from tests.support.snapshots import metadata_of
from tidegate.checkpoint.errors import (
    JobNotRunningError,
    NoSavepointDirectoryError,
)
from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata, encode_metadata
from tidegate.checkpoint.savepoints import discard_snapshot_dir, newest_snapshot, savepoint_location
from tidegate.checkpoint.storage import CheckpointStorage, read_checkpoint_metadata
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.common import Configuration, Encoder
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.file_system import FileSink
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.deploy.job_spec import RestoreMode
from tidegate.deploy.jobmaster import JobMaster
from tidegate.deploy.restore import IncompatibleCheckpointError, plan_restore, warn_generated_uids
from tidegate.deploy.snapshot_requests import SnapshotRequest
from tidegate.graph.job_graph import build_job_graph
from tidegate.state.snapshot_format import write_state_file

JOB_ID = "0123456789abcdef0123456789abcdef"


def _completed(checkpoint_id: int, *, savepoint: bool = False) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id, 0, 1, 1, f"/snapshots/{checkpoint_id}", 10, savepoint)


# ---------------------------------------------------------------------- savepoint directories


def test_a_savepoint_directory_is_named_after_the_job_and_is_unique(tmp_path):
    first = savepoint_location(str(tmp_path / "savepoints"), JOB_ID)
    second = savepoint_location(str(tmp_path / "savepoints") + "/", JOB_ID)
    assert first.startswith(f"{tmp_path}/savepoints/savepoint-012345-")
    assert len(first.rsplit("-", 1)[1]) == 12 and first != second
    assert second.startswith(f"{tmp_path}/savepoints/savepoint-012345-")


def test_a_relative_savepoint_directory_is_made_absolute_and_a_uri_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert savepoint_location("sp", JOB_ID).startswith(f"{tmp_path}/sp/savepoint-012345-")
    assert savepoint_location("s3://bucket/sp", JOB_ID).startswith("s3://bucket/sp/savepoint-")
    with pytest.raises(ValueError, match="must not be empty"):
        savepoint_location("", JOB_ID)


def test_state_files_and_metadata_can_go_to_another_filesystem_than_the_checkpoints(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), JOB_ID)
    target = savepoint_location("memory://savepoints", JOB_ID)
    storage.create_dir(target)
    with storage.open_write(f"{target}/a.state") as f:
        f.write(b"state")
    with storage.create_artifact(target, "b", ".state") as g:  # checksummed, as subtasks write
        g.write(b"more state")
    metadata = metadata_of(
        job_id=JOB_ID,
        checkpoint_id=3,
        timestamp_ms=1,
        generation=1,
        operators={},
    )
    storage.write_metadata(target, metadata)
    assert storage.read_bytes(f"{target}/a.state") == b"state"
    assert storage.read_bytes(f"{target}/{g.name}") == b"more state"
    assert read_checkpoint_metadata(target).checkpoint_id == 3
    assert not (tmp_path / "chk" / JOB_ID).exists()
    discard_snapshot_dir(target)


def test_discarding_deletes_a_savepoint_or_checkpoint_directory_and_nothing_else(tmp_path):
    failed = tmp_path / "savepoint-012345-abcdefabcdef"
    failed.mkdir()
    (failed / "x.state").write_bytes(b"1")
    claimed = tmp_path / "renamed"
    claimed.mkdir()
    (claimed / METADATA_FILE_NAME).write_text("{}")
    other = tmp_path / "my-data"
    other.mkdir()
    discard_snapshot_dir(str(failed))
    discard_snapshot_dir(str(claimed))
    discard_snapshot_dir(str(failed))  # already gone: fine
    with pytest.raises(ValueError, match="refusing to delete"):
        discard_snapshot_dir(str(other))
    assert not failed.exists() and not claimed.exists() and other.exists()


def test_a_failover_restores_the_newest_of_the_latest_checkpoint_and_savepoint():
    checkpoint, savepoint = _completed(4), _completed(5, savepoint=True)
    assert newest_snapshot(checkpoint, savepoint) is savepoint
    assert newest_snapshot(_completed(6), savepoint).checkpoint_id == 6
    assert newest_snapshot(None, savepoint) is savepoint
    assert newest_snapshot(checkpoint, None) is checkpoint
    assert newest_snapshot(None, None) is None


# ---------------------------------------------------------------------- restore: uids


def _env(count_uid: str | None = "count"):
    env = StreamExecutionEnvironment.get_execution_environment()
    sink = FileSink.for_row_format("/tmp/unused-out", Encoder.simple_string_encoder()).build()
    numbers = env.from_source(NumberSequenceSource(1, 10), None, "numbers").uid("numbers")
    counted = numbers.key_by(lambda v: v % 3).reduce(lambda a, b: a + b)
    if count_uid is not None:
        counted = counted.uid(count_uid)
    counted.map(str).sink_to(sink).uid("sink")
    return env


def _graph(count_uid: str | None = "count"):
    return build_job_graph(_env(count_uid)._stream_graph, "job", 1, None)


def _snapshot(tmp_path, uids: dict[str, str]) -> tuple[str, CheckpointMetadata]:
    """A one-subtask snapshot holding operator state for each uid (uid -> operator name)."""
    directory = tmp_path / "savepoint-012345-abcdefabcdef"
    directory.mkdir()
    operators = {}
    for uid, name in uids.items():
        with open(directory / f"{uid}-0.state", "wb") as f:
            index = write_state_file(f, None, {"x": ("split", [uid])})
        handle = {"file": f"{uid}-0.state", "index": index.to_json()}
        operators[uid] = {"name": name, "parallelism": 1, "subtasks": {"0": handle}}
    metadata = metadata_of(checkpoint_id=9, max_parallelism=128, operators=operators)
    (directory / METADATA_FILE_NAME).write_bytes(encode_metadata(metadata))
    return str(directory), metadata


def test_state_of_an_operator_the_job_does_not_have_fails_the_restore_listing_it(tmp_path):
    directory, metadata = _snapshot(
        tmp_path, {"numbers": "Source: numbers", "total": "Reduce", "old": "Map"}
    )
    with pytest.raises(IncompatibleCheckpointError) as err:
        plan_restore(_graph(), metadata, directory)
    message = str(err.value)
    assert "2 operator(s)" in message
    assert "uid 'old' (Map), uid 'total' (Reduce)" in message
    assert ".uid(...)" in message and "--allow-non-restored-state" in message
    assert "execution.state-recovery.ignore-unclaimed-state" in message


def test_allowing_non_restored_state_drops_it_with_a_warning_and_restores_the_rest(
    tmp_path, caplog
):
    directory, metadata = _snapshot(tmp_path, {"numbers": "Source: numbers", "total": "Reduce"})
    graph = _graph()
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        plan, _max_p = plan_restore(graph, metadata, directory, allow_non_restored_state=True)
    assert "uid 'total' (Reduce)" in caplog.text and "dropped" in caplog.text
    restored = {uid for per_subtask in plan.values() for uid in per_subtask}
    assert restored == {"numbers"}
    assert "total" in metadata.operators  # the caller's metadata is left as it was


def test_only_stateful_operators_without_an_explicit_uid_are_warned_about(caplog):
    graph = _graph(count_uid=None)
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        warn_generated_uids(graph, {"numbers", "reduce-2", "sink"}, "savepoint /sp")
    assert "savepoint /sp: the stateful operator(s) Keyed Reduce (reduce-2) have no explicit" in (
        caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidegate"):
        warn_generated_uids(_graph(), {"numbers", "count", "sink"}, "savepoint /sp")
        warn_generated_uids(graph, {"numbers", "sink"}, "savepoint /sp")  # map-3 has no state
    assert caplog.text == ""


# ---------------------------------------------------------------------- settings


def test_restore_modes_parse_flink_spellings():
    assert RestoreMode.parse("claim") is RestoreMode.CLAIM
    assert RestoreMode.parse("NO_CLAIM") is RestoreMode.NO_CLAIM
    assert RestoreMode.parse("no-claim") is RestoreMode.NO_CLAIM
    assert RestoreMode.parse(RestoreMode.CLAIM) is RestoreMode.CLAIM
    with pytest.raises(ValueError, match=r"use NO_CLAIM .* or CLAIM"):
        RestoreMode.parse("LEGACY")


def test_boolean_configuration_values_are_checked():
    conf = Configuration().set_string("a", "TRUE").set_boolean("b", False).set_string("c", "yes")
    assert conf.get_boolean("a", False) is True and conf.get_boolean("b", True) is False
    assert conf.get_boolean("missing", True) is True
    with pytest.raises(ValueError, match="must be true or false"):
        conf.get_boolean("c", False)


@pytest.mark.parametrize(
    ("config", "savepoint_dir", "allow", "mode"),
    [
        ({}, None, False, RestoreMode.NO_CLAIM),
        (
            {
                "execution.checkpointing.savepoint-dir": "s3://b/sp",
                "execution.state-recovery.ignore-unclaimed-state": "true",
                "execution.state-recovery.claim-mode": "CLAIM",
            },
            "s3://b/sp",
            True,
            RestoreMode.CLAIM,
        ),
        (  # Flink 1's keys
            {
                "state.savepoints.dir": "hdfs:///sp",
                "execution.savepoint.ignore-unclaimed-state": "true",
                "execution.savepoint-restore-mode": "CLAIM",
            },
            "hdfs:///sp",
            True,
            RestoreMode.CLAIM,
        ),
    ],
)
def test_savepoint_and_restore_settings_come_from_the_configuration(
    config, savepoint_dir, allow, mode
):
    env = _env()
    env.configure(Configuration().add_all(config))
    spec = env._job_spec("job")
    assert spec.checkpoint.savepoint_dir == savepoint_dir
    assert (spec.allow_non_restored_state, spec.restore_mode) == (allow, mode)


def test_the_default_savepoint_directory_set_in_code_wins_over_the_configuration(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    env = _env().configure(Configuration().set_string("state.savepoints.dir", "/elsewhere"))
    assert env.set_default_savepoint_directory("sp") is env
    assert env.get_default_savepoint_directory() == str(tmp_path / "sp")
    assert env.get_checkpoint_config().get_default_savepoint_directory() == str(tmp_path / "sp")
    assert env._job_spec("job").checkpoint.savepoint_dir == str(tmp_path / "sp")
    env.get_checkpoint_config().set_default_savepoint_directory("gs://b/sp")
    assert env._job_spec("job").checkpoint.savepoint_dir == "gs://b/sp"


def test_cli_overrides_win_over_the_restore_configuration(monkeypatch):
    env = _env().configure(
        Configuration().set_string("execution.state-recovery.claim-mode", "CLAIM")
    )
    overrides = {"allow_non_restored_state": True, "restore_mode": "NO_CLAIM"}
    monkeypatch.setattr(StreamExecutionEnvironment, "cli_overrides", overrides)
    spec = env._job_spec("job")
    assert spec.allow_non_restored_state and spec.restore_mode is RestoreMode.NO_CLAIM


# ---------------------------------------------------------------------- the JobMaster


def _jobmaster(tmp_path, savepoint_dir: str | None = None) -> JobMaster:
    spec = _env()._job_spec("requests")
    checkpoint = replace(spec.checkpoint, storage=str(tmp_path), savepoint_dir=savepoint_dir)
    return JobMaster(replace(spec, checkpoint=checkpoint))


def test_a_job_that_is_not_running_answers_every_request_at_once(tmp_path):
    jm = _jobmaster(tmp_path, savepoint_dir=str(tmp_path / "sp"))
    futures = [jm.trigger_checkpoint(), jm.trigger_savepoint(), jm.stop_with_savepoint(drain=True)]
    for future in futures:
        with pytest.raises(JobNotRunningError, match="is INITIALIZING, not RUNNING"):
            future.result(timeout=0)
    assert jm.events.empty()


def test_a_savepoint_without_a_directory_says_how_to_configure_one(tmp_path):
    jm = _jobmaster(tmp_path)
    jm.status = jm.status.RUNNING  # as if running: the request fails before it is queued
    for future in (jm.trigger_savepoint(), jm.stop_with_savepoint()):
        with pytest.raises(NoSavepointDirectoryError, match="set_default_savepoint_directory"):
            future.result(timeout=0)
    assert jm.events.empty()
    request = jm.trigger_savepoint(str(tmp_path / "given"))
    assert not request.done() and isinstance(jm.events.get_nowait(), SnapshotRequest)
