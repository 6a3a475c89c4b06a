"""Verifying a checkpoint's files against its `_metadata` (checkpoint/verification.py) and
choosing the checkpoint a restore uses (checkpoint/selection.py), on real checkpoint
directories written the way subtasks and the JobMaster write them."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

import pytest

from tidegate.checkpoint.errors import (
    CheckpointIntegrityError,
    ChecksumMismatchError,
    CorruptCheckpointError,
    MissingCheckpointFileError,
    UnsupportedFormatVersionError,
)
from tidegate.checkpoint.metadata import (
    ChannelStateMetadata,
    CheckpointMetadata,
    OperatorMetadata,
)
from tidegate.checkpoint.selection import RestoreCandidate, choose_checkpoint
from tidegate.checkpoint.storage import CheckpointStorage, checkpoint_candidates
from tidegate.checkpoint.verification import checkpoint_artifacts, verify_checkpoint
from tidegate.state.channel_state import write_channel_state
from tidegate.state.handles import ChannelStateHandle, StateHandle
from tidegate.state.snapshot_format import write_state_file

OPERATORS = {"source": 2, "count": 3}


def write_checkpoint(
    storage: CheckpointStorage, checkpoint_id: int
) -> tuple[str, CheckpointMetadata]:
    """A completed checkpoint: one state file per operator subtask (plus the channel state of
    count's subtask 1), written through `create_artifact` as StreamTask does."""
    directory = storage.create_checkpoint_dir(checkpoint_id)
    operators = {}
    for uid, parallelism in OPERATORS.items():
        subtasks = {}
        for i in range(parallelism):
            with storage.create_artifact(directory, f"{uid}-{i}", ".state") as f:
                entries = [uid, i, checkpoint_id] * 100
                index = write_state_file(f, None, {"entries": ("split", entries)})
            subtasks[i] = StateHandle(file=f.name, size=f.size, checksum=f.checksum, index=index)
        operators[uid] = OperatorMetadata(uid, parallelism, subtasks)
    with storage.create_artifact(directory, "channels-count-1", ".inflight") as f:
        write_channel_state(f, [b"in-flight frame"])
    channel = ChannelStateHandle(file=f.name, size=f.size, checksum=f.checksum, frames=1)
    metadata = CheckpointMetadata(
        job_id=storage.job_id,
        checkpoint_id=checkpoint_id,
        timestamp_ms=1_000 * checkpoint_id,
        generation=storage.generation,
        max_parallelism=128,
        operators=operators,
        channel_state={"count": ChannelStateMetadata(3, (), {1: channel})},
    )
    storage.write_metadata(directory, metadata)
    return directory, storage.read_metadata(directory)


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    storage = CheckpointStorage(str(tmp_path / "chk"), "job")
    storage.start_generation()
    return storage


def file_of(metadata: CheckpointMetadata, uid: str, subtask: int) -> str:
    return metadata.operators[uid].subtasks[subtask].file


def flip_byte(path: str, offset: int | None = None) -> None:
    data = bytearray(Path(path).read_bytes())
    position = len(data) // 2 if offset is None else offset
    data[position] ^= 0x01
    Path(path).write_bytes(bytes(data))


def snapshot_of(directory: str) -> dict[str, bytes]:
    return {name: Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))}


# ------------------------------------------------------------------ verify_checkpoint


def test_every_state_and_channel_state_file_of_an_intact_checkpoint_verifies(storage):
    directory, metadata = write_checkpoint(storage, 1)
    report = verify_checkpoint(metadata, directory)
    assert report.ok and report.files == 6  # 2 + 3 state files, 1 channel-state file
    on_disk = sum(os.path.getsize(f"{directory}/{a.file}") for a in checkpoint_artifacts(metadata))
    assert report.bytes == on_disk
    report.raise_for_problems()


def test_a_flipped_byte_is_a_checksum_mismatch_naming_the_file_operator_and_subtask(storage):
    directory, metadata = write_checkpoint(storage, 1)
    victim = file_of(metadata, "count", 2)
    flip_byte(f"{directory}/{victim}")
    report = verify_checkpoint(metadata, directory)
    assert [(p.artifact.uid, p.artifact.subtask, p.missing) for p in report.problems] == [
        ("count", 2, False)
    ]
    with pytest.raises(ChecksumMismatchError) as raised:
        report.raise_for_problems()
    message = str(raised.value)
    assert f"state file {victim} (operator 'count', subtask 2)" in message
    assert "does not match its checksum" in message and "Nothing was changed" in message
    assert "checkpoint 1 in" in message and "--verify" in message
    assert raised.value.problems == report.problems


def test_a_truncated_file_is_reported_with_its_sizes(storage):
    directory, metadata = write_checkpoint(storage, 1)
    victim = f"{directory}/{file_of(metadata, 'source', 0)}"
    size = os.path.getsize(victim)
    os.truncate(victim, size - 7)
    with pytest.raises(ChecksumMismatchError, match=f"has {size - 7} bytes, but {size} were"):
        verify_checkpoint(metadata, directory).raise_for_problems()


def test_a_missing_file_is_reported_as_missing(storage):
    directory, metadata = write_checkpoint(storage, 1)
    os.remove(f"{directory}/{file_of(metadata, 'source', 1)}")
    flip_byte(f"{directory}/{file_of(metadata, 'count', 0)}")
    with pytest.raises(MissingCheckpointFileError) as raised:
        verify_checkpoint(metadata, directory).raise_for_problems()
    assert "(operator 'source', subtask 1) does not exist" in str(raised.value)
    assert "(operator 'count', subtask 0) does not match" in str(raised.value)


def test_a_damaged_channel_state_file_is_named_as_such(storage):
    directory, metadata = write_checkpoint(storage, 1)
    victim = metadata.channel_state["count"].subtasks[1].file
    flip_byte(f"{directory}/{victim}", offset=-1)
    with pytest.raises(ChecksumMismatchError, match=rf"channel-state file {victim} \(operator"):
        verify_checkpoint(metadata, directory).raise_for_problems()


def test_only_the_files_of_the_restored_operators_are_read(storage):
    directory, metadata = write_checkpoint(storage, 1)
    os.remove(f"{directory}/{file_of(metadata, 'count', 0)}")
    report = verify_checkpoint(metadata, directory, uids={"source"})
    assert report.ok and report.files == 2


def test_a_handle_without_a_checksum_is_damaged_metadata(storage):
    directory, metadata = write_checkpoint(storage, 1)
    source = metadata.operators["source"]
    unchecked = dataclasses.replace(source.subtasks[0], checksum=None)
    metadata = metadata.replace(
        operators={
            **metadata.operators,
            "source": dataclasses.replace(source, subtasks={**source.subtasks, 0: unchecked}),
        }
    )
    with pytest.raises(ChecksumMismatchError, match="has no valid size and checksum"):
        verify_checkpoint(metadata, directory).raise_for_problems()


def test_many_problems_are_summarised_but_all_are_kept(storage):
    directory, metadata = write_checkpoint(storage, 1)
    for artifact in checkpoint_artifacts(metadata):
        os.remove(f"{directory}/{artifact.file}")
    with pytest.raises(MissingCheckpointFileError, match="and 1 more") as raised:
        verify_checkpoint(metadata, directory, threads=3).raise_for_problems()
    assert len(raised.value.problems) == 6


# ------------------------------------------------------------------ choose_checkpoint


def job_dir_candidates(storage: CheckpointStorage) -> list[RestoreCandidate]:
    return [RestoreCandidate(d) for d in checkpoint_candidates(storage.job_dir)]


def damage(kind: str, directory: str, metadata: CheckpointMetadata) -> None:
    """Damage a checkpoint the way the bad-input tests do."""
    match kind:
        case "checksum":
            flip_byte(f"{directory}/{file_of(metadata, 'count', 1)}")
        case "missing":
            os.remove(f"{directory}/{file_of(metadata, 'count', 1)}")
        case "metadata":
            Path(directory, "_metadata").write_text('{"format": "tidegate-checkpoint", "ver')
        case "version":
            document = json.loads(Path(directory, "_metadata").read_text())
            Path(directory, "_metadata").write_text(json.dumps({**document, "version": 99}))


DAMAGE = {
    "checksum": (ChecksumMismatchError, "does not match its checksum"),
    "missing": (MissingCheckpointFileError, "does not exist"),
    "metadata": (CorruptCheckpointError, "not valid checkpoint metadata"),
    "version": (UnsupportedFormatVersionError, "upgrade tidegate"),
}


def test_the_newest_intact_checkpoint_is_chosen(storage):
    write_checkpoint(storage, 1)
    newest, _ = write_checkpoint(storage, 2)
    metadata, directory = choose_checkpoint(
        job_dir_candidates(storage), uids=None, allow_fallback=False
    )
    assert directory == newest and metadata.checkpoint_id == 2


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_without_fallback_a_damaged_newest_checkpoint_is_a_clear_error_and_stays(storage, kind):
    older, _ = write_checkpoint(storage, 1)
    newest, metadata = write_checkpoint(storage, 2)
    damage(kind, newest, metadata)
    before = snapshot_of(newest), snapshot_of(older)
    error_type, text = DAMAGE[kind]
    with pytest.raises(error_type, match=text) as raised:
        choose_checkpoint(job_dir_candidates(storage), uids=None, allow_fallback=False)
    message = str(raised.value)
    assert newest in message
    assert f"An older checkpoint is retained ({older})" in message
    assert "execution.checkpointing.restore-fallback=true" in message
    assert (snapshot_of(newest), snapshot_of(older)) == before


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_with_fallback_a_damaged_checkpoint_is_skipped_with_a_warning(storage, kind, caplog):
    older, _ = write_checkpoint(storage, 1)
    newest, metadata = write_checkpoint(storage, 2)
    damage(kind, newest, metadata)
    before = snapshot_of(newest)
    with caplog.at_level(logging.WARNING, logger="tidegate.restore"):
        chosen, directory = choose_checkpoint(
            job_dir_candidates(storage), uids=None, allow_fallback=True
        )
    assert directory == older and chosen.checkpoint_id == 1
    skipped = [r.getMessage() for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and newest in skipped[0] and DAMAGE[kind][1] in skipped[0]
    assert any(
        f"restoring from the older checkpoint {older}" in r.getMessage() for r in caplog.records
    )
    assert snapshot_of(newest) == before


def test_with_fallback_and_nothing_intact_every_skipped_checkpoint_is_listed(storage):
    for cid in (1, 2):
        directory, metadata = write_checkpoint(storage, cid)
        damage("checksum", directory, metadata)
    with pytest.raises(CheckpointIntegrityError, match="no usable checkpoint") as raised:
        choose_checkpoint(job_dir_candidates(storage), uids=None, allow_fallback=True)
    assert "chk-1" in str(raised.value) and "chk-2" in str(raised.value)
    assert "Nothing was deleted" in str(raised.value)


def test_known_metadata_is_not_read_again_but_the_files_are_verified(storage):
    directory, metadata = write_checkpoint(storage, 1)
    os.remove(f"{directory}/_metadata")  # a retained checkpoint's metadata is in memory
    assert choose_checkpoint(
        [RestoreCandidate(directory, metadata)], uids=None, allow_fallback=False
    ) == (metadata, directory)
    flip_byte(f"{directory}/{file_of(metadata, 'source', 0)}")
    with pytest.raises(ChecksumMismatchError, match="There is no older checkpoint"):
        choose_checkpoint([RestoreCandidate(directory, metadata)], uids=None, allow_fallback=False)


def test_damage_in_files_the_job_does_not_read_does_not_prevent_the_restore(storage):
    directory, metadata = write_checkpoint(storage, 1)
    damage("checksum", directory, metadata)
    _, chosen = choose_checkpoint(
        [RestoreCandidate(directory)], uids={"source"}, allow_fallback=False
    )
    assert chosen == directory
