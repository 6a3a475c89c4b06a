"""Writer fencing (checkpoint/fencing.py) with real writers: several CheckpointStorage objects
on one job directory, as a JobMaster, the slots of its attempts, and a second driver of the
same job id have them — also racing each other on threads."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from tidegate.checkpoint.errors import CheckpointStorageError, FencedWriterError
from tidegate.checkpoint.fencing import FENCE_DIR_NAME, KEPT_GENERATIONS
from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.storage import CheckpointStorage


def metadata(
    checkpoint_id: int, generation: int, writer: str | None = None, file: str = ""
) -> CheckpointMetadata:
    """A checkpoint's metadata; `writer` and `file` (the job name, `writer:file`) say who
    wrote it and which state file it names."""
    return CheckpointMetadata(
        job_id="job",
        checkpoint_id=checkpoint_id,
        timestamp_ms=checkpoint_id,
        generation=generation,
        job_name=None if writer is None else f"{writer}:{file}",
    )


def written_by(metadata: CheckpointMetadata) -> tuple[str, str]:
    writer, file = metadata.job_name.split(":", 1)
    return writer, file


@pytest.fixture(params=["local", "memory"])
def base(request, tmp_path) -> str:
    return str(tmp_path) if request.param == "local" else f"memory://fence-{uuid.uuid4().hex}"


def writer(base: str, generation: int | None = None) -> CheckpointStorage:
    return CheckpointStorage(base, "job", generation=generation)


def test_generations_increase_across_attempts_and_drivers_of_one_job_directory(base):
    driver_a = writer(base)
    assert [driver_a.start_generation() for _ in range(3)] == [1, 2, 3]  # three attempts
    driver_b = writer(base)  # a second driver started with the same job id
    assert driver_b.start_generation() == 4
    assert writer(base).fence.current() == 4
    other_job = CheckpointStorage(base, "other-job")
    assert other_job.start_generation() == 1


def test_a_superseded_driver_cannot_take_the_directory_back(base):
    driver_a, driver_b = writer(base), writer(base)
    driver_a.start_generation()
    driver_b.start_generation()
    with pytest.raises(FencedWriterError, match=r"generation 2.*this writer is generation 1"):
        driver_a.start_generation()  # its next attempt
    assert writer(base).fence.current() == 2


def test_a_stale_writer_can_neither_write_nor_delete(base):
    driver_a = writer(base)
    generation_a = driver_a.start_generation()
    slot_of_a = writer(base, generation=generation_a)  # a slot of A's attempt
    directory = driver_a.create_checkpoint_dir(1)
    with slot_of_a.create_artifact(directory, "op-0", ".state") as f:
        f.write(b"state of generation 1")
    driver_a.write_metadata(directory, metadata(1, generation_a))

    driver_b = writer(base)
    driver_b.start_generation()
    with pytest.raises(FencedWriterError, match=r"refusing to write a file into .*chk-1"):
        slot_of_a.create_artifact(directory, "op-0", ".state")
    with pytest.raises(FencedWriterError, match=r"refusing to write .*chk-2/_metadata"):
        driver_a.write_metadata(driver_a.create_checkpoint_dir(2), metadata(2, generation_a))
    with pytest.raises(FencedWriterError, match=r"refusing to delete .*chk-1"):
        driver_a.discard_checkpoint_dir(directory)  # B may be restoring from it
    assert driver_b.read_metadata(directory).generation == generation_a
    assert driver_b.read_bytes(f"{directory}/{f.name}") == b"state of generation 1"
    assert [cid for cid, _ in driver_b.list_checkpoints()] == [1]


def test_a_writer_superseded_while_it_publishes_metadata_is_told_so(tmp_path, monkeypatch):
    driver_a, driver_b = writer(str(tmp_path)), writer(str(tmp_path))
    generation_a = driver_a.start_generation()
    check = driver_a.fence.check
    takeovers = []

    def take_over_after_first_check(generation: int, action: str) -> None:
        check(generation, action)
        if not takeovers:  # fault injection: B takes over between A's check and its write
            takeovers.append(driver_b.start_generation())

    monkeypatch.setattr(driver_a.fence, "check", take_over_after_first_check)
    directory = driver_a.create_checkpoint_dir(1)
    with pytest.raises(FencedWriterError, match="refusing to complete the checkpoint"):
        driver_a.write_metadata(directory, metadata(1, generation_a))
    # published, but A must not act on it (notify sinks); B sees a consistent checkpoint
    assert takeovers == [2]
    assert driver_b.read_metadata(directory).generation == generation_a


def test_racing_drivers_never_share_a_generation(tmp_path):
    drivers = [writer(str(tmp_path)) for _ in range(8)]
    barrier = threading.Barrier(len(drivers))
    taken: list[int] = []

    def start(driver: CheckpointStorage) -> None:
        barrier.wait()
        taken.append(driver.start_generation())

    threads = [threading.Thread(target=start, args=(d,)) for d in drivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(1, 9))
    survivors = [d for d in drivers if d.generation == 8]
    assert len(survivors) == 1
    for d in drivers:
        if d is not survivors[0]:
            with pytest.raises(FencedWriterError):
                d.create_artifact(d.checkpoint_dir(1), "x", ".state")


def test_a_stale_writer_racing_a_new_one_never_replaces_or_adds_to_its_checkpoints(tmp_path):
    """A (generation 1) keeps writing state files and `_metadata` for checkpoints 1..N while B
    takes over and writes its own for the same ids. Once A has seen B's takeover, every write
    of A fails; whatever B published is never replaced; every `_metadata` is one writer's."""
    base = str(tmp_path)
    a, b = writer(base), writer(base)
    a.start_generation()
    taken_over = threading.Event()
    a_results: list[tuple[int, bool, bool]] = []  # (checkpoint, after takeover, succeeded)

    def stale_writer() -> None:
        for cid in range(1, 201):
            after = taken_over.is_set()
            directory = a.create_checkpoint_dir(cid)
            try:
                with a.create_artifact(directory, "op-0", ".state") as f:
                    f.write(b"A")
                a.write_metadata(directory, metadata(cid, 1, writer="A", file=f.name))
                a_results.append((cid, after, True))
            except CheckpointStorageError:  # fenced, or B published this id first
                a_results.append((cid, after, False))

    thread = threading.Thread(target=stale_writer)
    thread.start()
    wait_until(lambda: a_results, "the stale writer wrote its first checkpoint", interval=0.001)
    b.start_generation()
    taken_over.set()
    b_published = {}
    for cid in range(1, 201):
        directory = b.create_checkpoint_dir(cid)
        with b.create_artifact(directory, "op-0", ".state") as f:
            f.write(b"B")
        try:
            b.write_metadata(directory, metadata(cid, 2, writer="B", file=f.name))
            b_published[cid] = f.name
        except CheckpointStorageError as e:  # A published this id before it was fenced
            assert "exists already" in str(e)
    thread.join()

    assert a_results[0] == (1, False, True)  # A wrote before B took over
    assert all(not ok for _cid, after, ok in a_results if after)  # fenced once it saw B
    assert b_published  # B completed checkpoints
    for cid in range(1, 201):
        directory = b.checkpoint_dir(cid)
        document = b.read_metadata(directory)  # decodes: never a torn or mixed file
        if cid in b_published:
            assert written_by(document) == ("B", b_published[cid])
        else:
            assert written_by(document)[0] == "A"
        author, state_file = written_by(document)
        state = b.read_bytes(f"{directory}/{state_file}")
        assert state == author.encode()  # each file holds its own writer's bytes


def test_old_generation_files_are_pruned_and_the_newest_always_stay(tmp_path):
    driver = writer(str(tmp_path))
    for _ in range(KEPT_GENERATIONS + 4):
        driver.start_generation()
    fence_dir = Path(tmp_path, "job", FENCE_DIR_NAME)
    kept = range(5, KEPT_GENERATIONS + 5)
    assert sorted(os.listdir(fence_dir)) == sorted(f"generation-{g}" for g in kept)
    with pytest.raises(FencedWriterError, match=r"registered by pid \d+ on "):
        writer(str(tmp_path), generation=3).create_artifact(driver.checkpoint_dir(1), "x", "")


def test_unfenced_tools_are_not_affected_by_the_fence(tmp_path):
    writer(str(tmp_path)).start_generation()
    writer(str(tmp_path)).start_generation()  # a second driver: generation 1 is fenced off
    tool = writer(str(tmp_path))  # e.g. `tidegate checkpoints`, tests: no generation
    directory = tool.create_checkpoint_dir(1)
    tool.write_metadata(directory, metadata(1, 0, writer="tool"))
    assert written_by(tool.read_metadata(directory)) == ("tool", "")
    assert [cid for cid, _ in tool.list_checkpoints()] == [1]
    tool.discard_checkpoint_dir(directory)
    assert not os.path.exists(directory)
    assert tool.list_checkpoints() == []
    assert writer(str(tmp_path)).fence.current() == 2  # the tool took no generation
