"""The orphan sweep (checkpoint/sweep.py): what the pure plan deletes and keeps, and a sweep of
a real job directory whose completed checkpoints (full, incremental with shared files, channel
state) stay intact and restorable while what failures left goes."""

from __future__ import annotations

import os

from tidegate.checkpoint.metadata import (
    ChannelStateMetadata,
    CheckpointMetadata,
    OperatorMetadata,
)
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.checkpoint.sweep import (
    UNREADABLE,
    SweepPlan,
    plan_job_dir_sweep,
    plan_sweep,
    sweep_job_dir,
)
from tidegate.state.handles import (
    ChannelStateHandle,
    IncrementalFile,
    IncrementalHandle,
    StateHandle,
)


def test_the_plan_deletes_unfinished_checkpoints_and_unreferenced_files_only():
    files = [
        "_fence/generation-3",
        ".storage-check-abc",
        "chk-1/_metadata",
        "chk-1/op-0-g1-aa.state",
        "chk-1/op-1-g1-bb.state",  # written by a subtask after its checkpoint went on
        "chk-1/_metadata.tmp-1234",  # a driver died writing it
        "chk-1/notes.txt",  # not named like a checkpoint's file: not ours to delete
        "chk-2/op-0-g2-cc.state",  # chk-2 never completed
        "shared/1.sst",
        "shared/2.sst",  # uploaded for chk-2
    ]
    references = {"chk-1": frozenset({"chk-1/op-0-g1-aa.state", "shared/1.sst"})}
    assert plan_sweep(files, references) == SweepPlan(
        directories=("chk-2",),
        files=("chk-1/_metadata.tmp-1234", "chk-1/op-1-g1-bb.state", "shared/2.sst"),
    )
    assert not plan_sweep(["chk-1/_metadata", "chk-1/op-0-g1-aa.state", "shared/1.sst"], references)


def test_the_plan_deletes_an_empty_unfinished_checkpoint_directory():
    # a discard of chk-3 raced a writer of the failed attempt, which then deleted its partial
    # file: an empty chk-3 is left, which no file in the listing shows
    files = ["chk-1/_metadata", "chk-1/a.state"]
    plan = plan_sweep(files, {"chk-1": frozenset({"chk-1/a.state"})}, ["chk-1", "chk-3"])
    assert plan == SweepPlan(directories=("chk-3",))


def test_an_unreadable_metadata_keeps_its_checkpoint_and_every_shared_file():
    files = ["chk-1/_metadata", "chk-1/a.state", "chk-2/_metadata", "chk-2/b.state", "shared/x"]
    plan = plan_sweep(files, {"chk-1": UNREADABLE, "chk-2": frozenset()})
    assert plan == SweepPlan(files=("chk-2/b.state",))


def _write(storage: CheckpointStorage, path: str) -> None:
    full = os.path.join(storage.job_dir, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(b"x")


def test_a_sweep_of_a_job_directory_keeps_what_completed_checkpoints_reference(tmp_path):
    storage = CheckpointStorage(str(tmp_path), "job")
    storage.start_generation()
    inc = IncrementalHandle(
        backend_id="b1", base_checkpoint_id=None, key_group_range=range(0, 128),
        max_parallelism=128, state_kinds={"count": "value"},
        shared=(IncrementalFile(name="1.sst", file="../shared/1.sst", size=1, uploaded=True),),
        private=(IncrementalFile(name="CURRENT", file="CURRENT-1", size=1),),
    )  # fmt: skip
    kept = ["chk-4/a.state", "chk-4/CURRENT-1", "shared/1.sst", "chk-4/channels-op-0.inflight"]
    metadata = CheckpointMetadata(
        job_id="job",
        checkpoint_id=4,
        timestamp_ms=1,
        generation=1,
        operators={
            "op": OperatorMetadata(
                "op", 1, {0: StateHandle(file="a.state", index=None, incremental=inc)}
            )
        },
        channel_state={
            "op": ChannelStateMetadata(
                1, ((1, 0),), {0: ChannelStateHandle(file="channels-op-0.inflight")}
            )
        },
    )
    left = ["chk-4/op-1-g1-dd.state", "chk-5/op-0-g1-ee.state", "shared/2.sst"]
    for path in kept + left:
        _write(storage, path)
    os.makedirs(storage.checkpoint_dir(6))  # empty: a discard raced a writer
    storage.write_metadata(storage.checkpoint_dir(4), metadata)

    listed = storage.list_files()
    planned = plan_job_dir_sweep(storage)  # what a sweep would delete; deletes nothing
    assert storage.list_files() == listed

    plan = sweep_job_dir(storage)

    assert (
        plan
        == planned
        == SweepPlan(
            directories=("chk-5", "chk-6"), files=("chk-4/op-1-g1-dd.state", "shared/2.sst")
        )
    )
    remaining = storage.list_files()
    assert all(path in remaining for path in kept)
    assert not any(path in remaining for path in left)
    assert not os.path.exists(storage.checkpoint_dir(5))
    assert not os.path.exists(storage.checkpoint_dir(6))
    assert storage.read_metadata(storage.checkpoint_dir(4)) == metadata
    assert not sweep_job_dir(storage)  # nothing left to sweep
