"""Retention of completed checkpoints."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.store import CompletedCheckpoint, CompletedCheckpointStore


def completed(checkpoint_id: int, is_savepoint: bool = False) -> CompletedCheckpoint:
    return CompletedCheckpoint(
        checkpoint_id=checkpoint_id,
        timestamp_ms=checkpoint_id * 1000,
        completed_ms=checkpoint_id * 1000 + 50,
        duration_ms=50,
        path=f"/ckpt/job/chk-{checkpoint_id}",
        size_bytes=100,
        is_savepoint=is_savepoint,
    )


def test_the_store_keeps_the_newest_checkpoints_and_returns_the_ones_it_drops():
    store = CompletedCheckpointStore(max_retained=2)
    assert store.latest() is None
    assert store.add(completed(1)) == []
    assert store.add(completed(2)) == []
    assert store.add(completed(3)) == [completed(1)]
    assert [cp.checkpoint_id for cp in store.all()] == [2, 3]
    assert store.latest() == completed(3)


def test_savepoints_pass_through_the_store_untouched():
    store = CompletedCheckpointStore(max_retained=1)
    store.add(completed(1))
    assert store.add(completed(2, is_savepoint=True)) == []
    assert store.all() == [completed(1)]
    assert store.add(completed(3)) == [completed(1)]


def test_the_store_rejects_a_checkpoint_not_newer_than_its_latest():
    store = CompletedCheckpointStore(max_retained=3)
    store.add(completed(5))
    with pytest.raises(ValueError, match="not newer"):
        store.add(completed(4))
    with pytest.raises(ValueError):
        store.add(completed(5))


def test_the_store_retains_at_least_one_checkpoint():
    with pytest.raises(ValueError):
        CompletedCheckpointStore(max_retained=0)
