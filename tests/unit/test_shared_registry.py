"""SharedStateRegistry driven by scripted checkpoint sequences, including the cases Flink got
wrong: retaining 1 checkpoint plus a savepoint, restoring after the checkpoints a snapshot shares
files with were subsumed, NO_CLAIM vs CLAIM, and a backend still on an older base."""

from __future__ import annotations

import pytest

from tests.support.snapshots import metadata_of
from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore
from tidegate.state.incremental_handles import (
    relative_to,
    resolve,
)
from tidegate.state.shared_registry import (
    CheckpointReferences,
    SharedReference,
    SharedStateRegistry,
)
from tidegate.state.snapshot_format import StateFileIndex


def refs(cid: int, base: int | None, reused=(), uploaded=(), backend="b0") -> CheckpointReferences:
    files = [SharedReference(p, backend, False) for p in reused]
    files += [SharedReference(p, backend, True) for p in uploaded]
    return CheckpointReferences(cid, tuple(files), {backend: base})


def checkpoint(cid: int, savepoint=False) -> CompletedCheckpoint:
    return CompletedCheckpoint(cid, 0, 0, 0, f"/c/job/chk-{cid}", 0, savepoint)


class Recorder:
    """A store with a registry, as the JobMaster wires them; records what is deleted."""

    def __init__(self, retained: int) -> None:
        self.registry = SharedStateRegistry()
        self.references: dict[int, CheckpointReferences] = {}
        self.store = CompletedCheckpointStore(
            retained, self.registry, references=lambda cp: self.references[cp.checkpoint_id]
        )
        self.deleted: list[str] = []

    def complete(self, cid: int, references: CheckpointReferences, savepoint=False) -> None:
        self.references[cid] = references
        self.store.add(checkpoint(cid, savepoint))
        self.deleted += self.registry.take_unused()

    def claim(self, cid: int, references: CheckpointReferences) -> None:
        """A restore with RestoreMode.CLAIM of checkpoint `cid`."""
        self.references[cid] = references
        self.store.add_restored(checkpoint(cid))


def test_a_file_is_deleted_once_no_retained_checkpoint_references_it():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    r.complete(2, refs(2, 1, reused=["a"], uploaded=["c"]))
    assert r.deleted == ["b"]
    assert r.registry.registered == {"a": 1, "c": 1}


def test_no_file_is_deleted_while_one_of_several_retained_checkpoints_references_it():
    r = Recorder(retained=2)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    r.complete(2, refs(2, 1, reused=["a"], uploaded=["c"]))
    assert r.deleted == []  # b is still in checkpoint 1
    r.complete(3, refs(3, 2, reused=["a", "c"], uploaded=["d"]))
    assert r.deleted == ["b"]
    assert r.registry.registered == {"a": 2, "c": 2, "d": 1}


def test_a_backend_on_an_older_base_keeps_the_files_of_that_base_alive():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    # checkpoint 2 drops b, but the backend had not learned that 1 completed (base None)
    r.complete(2, refs(2, None, uploaded=["a2", "c"]))
    assert "b" not in r.deleted and "a" not in r.deleted
    # it learns of 1 and references b again in 3: b must still exist
    r.complete(3, refs(3, 1, reused=["a", "b"]))
    assert "b" not in r.deleted
    # once its base is 3 and 4 drops a and b, they go
    r.complete(4, refs(4, 3, uploaded=["d"]))
    assert sorted(r.deleted) == ["a", "a2", "b", "c"]


def test_files_of_a_backend_that_is_gone_are_deleted_at_once():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a"], backend="old"))
    r.complete(2, refs(2, None, uploaded=["n"], backend="new"))  # after a restart
    assert r.deleted == ["a"]


def test_retaining_one_checkpoint_plus_a_savepoint_deletes_nothing_the_checkpoint_uses():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    r.complete(2, CheckpointReferences(2), savepoint=True)  # canonical: no shared files
    assert r.deleted == [] and r.registry.registered == {"a": 1, "b": 1}
    r.complete(3, refs(3, 1, reused=["a", "b"], uploaded=["c"]))
    assert r.deleted == []
    r.complete(4, refs(4, 3, reused=["c"]))
    assert sorted(r.deleted) == ["a", "b"]


def test_an_uncompleted_checkpoint_loses_only_the_files_it_uploaded_itself():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a"]))
    declined = refs(2, 1, reused=["a"], uploaded=["x", "y"])
    assert r.registry.discard_uncompleted(declined) == ["x", "y"]
    assert r.registry.registered == {"a": 1}


def test_discarding_a_registered_checkpoint_as_uncompleted_deletes_nothing():
    r = Recorder(retained=2)
    r.complete(1, refs(1, None, uploaded=["a"]))
    assert r.registry.discard_uncompleted(refs(1, None, uploaded=["a"])) == []


def test_discarding_a_subsumed_checkpoint_releases_nothing_twice_nor_protected_files():
    r = Recorder(retained=1)
    r.registry.protect("/old/shared")
    claimed = refs(7, 6, uploaded=["/old/shared/a"], backend="old")
    r.claim(7, claimed)
    r.complete(8, refs(8, None, uploaded=["/job/shared/n"], backend="new"))
    assert r.deleted == []  # protected
    assert r.registry.discard_uncompleted(claimed) == []


def test_a_checkpoint_reusing_a_deleted_file_is_detected():
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a"]))
    r.complete(2, refs(2, 1, uploaded=["b"]))
    r.complete(3, refs(3, 2, reused=["b"]))
    assert "a" in r.deleted
    assert r.registry.references_unknown(refs(4, 1, reused=["a"])) == ["a"]


def test_restore_after_the_checkpoints_it_shares_files_with_were_subsumed_keeps_them():
    # job 1: checkpoint 2 shares a with checkpoint 1, which is subsumed
    r = Recorder(retained=1)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    r.complete(2, refs(2, 1, reused=["a"], uploaded=["c"]))
    assert r.deleted == ["b"]
    # a restarted driver claims checkpoint 2: rebuilt from its metadata
    new = Recorder(retained=1)
    new.claim(2, refs(2, 1, reused=["a"], uploaded=["c"]))
    assert new.registry.registered == {"a": 1, "c": 1}
    # the restored backend reuses a and c in checkpoint 3
    new.complete(3, refs(3, 2, reused=["a", "c"], uploaded=["d"], backend="b1"))
    assert new.deleted == []
    new.complete(4, refs(4, 3, reused=["d"], backend="b1"))
    assert sorted(new.deleted) == ["a", "c"]


def test_a_no_claim_restore_never_deletes_the_restored_snapshots_files():
    r = Recorder(retained=1)
    restored = refs(7, 6, reused=["a"], uploaded=["b"], backend="old")
    r.registry.pin(restored.paths)  # NO_CLAIM: not in the store, pinned
    r.complete(8, refs(8, None, uploaded=["n1"], backend="new"))  # first checkpoint is full
    r.complete(9, refs(9, 8, uploaded=["n2"], backend="new"))
    assert r.deleted == ["n1"]
    assert r.registry.discard_uncompleted(refs(10, None, uploaded=["a", "b"])) == []
    assert set(r.registry.release_all()) == {"n2"}


def test_a_claim_restore_may_delete_the_claimed_snapshots_files_but_not_its_siblings():
    r = Recorder(retained=1)
    r.registry.pin(["shared-with-chk-6"])  # chk-6 stays in the old job directory
    claimed = refs(7, 6, reused=["shared-with-chk-6"], uploaded=["b"], backend="old")
    r.claim(7, claimed)
    r.complete(8, refs(8, None, uploaded=["n1"], backend="new"))
    assert r.deleted == ["b"]


def test_protected_directories_keep_their_restored_files_but_not_the_jobs_own():
    r = Recorder(retained=1)
    r.registry.protect("/c/old/shared")
    r.claim(7, refs(7, 6, reused=["/c/old/shared/a"], backend="old"))
    r.complete(8, refs(8, None, uploaded=["/c/old/shared/own"], backend="new"))
    r.complete(9, refs(9, 8, uploaded=["/c/old/shared/own2"], backend="new"))
    assert r.deleted == ["/c/old/shared/own"]


def test_release_all_hands_out_every_owned_file_once():
    r = Recorder(retained=2)
    r.complete(1, refs(1, None, uploaded=["a", "b"]))
    r.complete(2, refs(2, 1, reused=["a"], uploaded=["c"]))
    assert r.registry.release_all() == ["a", "b", "c"]
    assert r.registry.release_all() == []


def test_registering_a_checkpoint_twice_is_refused():
    registry = SharedStateRegistry()
    registry.register(refs(1, None, uploaded=["a"]))
    with pytest.raises(ValueError, match="registered already"):
        registry.register(refs(1, None, uploaded=["a"]))


def test_relative_shared_paths_resolve_against_the_checkpoint_directory():
    assert resolve("/c/job/chk-3", "../shared/x.sst") == "/c/job/shared/x.sst"
    assert resolve("s3://bucket/c/job/chk-3", "../shared/x.sst") == "s3://bucket/c/job/shared/x.sst"
    assert resolve("/c/job/chk-3", "s3://b/x") == "s3://b/x"
    assert relative_to("/c/job/chk-3", "/c/job/shared/x.sst") == "../shared/x.sst"
    assert relative_to("s3://b/c/job/chk-3", "s3://b/c/job/shared/x") == "../shared/x"
    assert relative_to("s3://b/c/job/chk-3", "s3://other/shared/x") == "s3://other/shared/x"


INDEX = StateFileIndex({}, None, 0).to_json()


def test_references_are_read_from_metadata_handles():
    metadata = metadata_of(
        checkpoint_id=5,
        operators={
            "op": {
                "parallelism": 2,
                "subtasks": {
                    "0": {
                        "file": "op-0.state",
                        "index": INDEX,
                        "incremental": {
                            "backend_id": "b0",
                            "base_checkpoint_id": 4,
                            "key_group_range": [0, 64],
                            "max_parallelism": 128,
                            "shared": [
                                {"name": "1.sst", "file": "../shared/a.sst", "uploaded": False},
                                {"name": "2.sst", "file": "../shared/b.sst", "uploaded": True},
                            ],
                        },
                    },
                    "1": {"file": "op-1.state", "index": INDEX},
                },
            }
        },
    )
    found = metadata.references("/c/job/chk-5")
    assert found.bases == {"b0": 4}
    assert found.references == (
        SharedReference("/c/job/shared/a.sst", "b0", False),
        SharedReference("/c/job/shared/b.sst", "b0", True),
    )
