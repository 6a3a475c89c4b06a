"""The checkpoint statistics tracker, fed as the JobMaster feeds it (triggers, acks, completions,
aborts, restores) with explicit timestamps."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.metrics.checkpoint_stats import (
    CheckpointKind,
    CheckpointStatsTracker,
    CheckpointStatus,
    details_json,
    state_size_of,
)
from tidegate.runtime.messages import AcknowledgeCheckpoint
from tidegate.runtime.restore import CHANNEL_STATE_KEY
from tidegate.state.handles import ChannelStateHandle, StateHandle
from tidegate.state.snapshot_format import StateFileIndex

SUBTASKS = [(1, 0), (1, 1), (2, 0)]
CHECKPOINT = CheckpointOptions()
SAVEPOINT = CheckpointOptions(CheckpointType.SAVEPOINT, target_location="/sp/savepoint-x")


def handle(size: int) -> StateHandle:
    return StateHandle(file="f.state", size=size, index=StateFileIndex({}, None, size))


def channel_handle(size: int) -> ChannelStateHandle:
    return ChannelStateHandle(file="c.inflight", size=size, frames=2)


def ack(
    cid: int, subtask, *, size=100, persisted=0, unaligned=False, **timings
) -> AcknowledgeCheckpoint:
    state = {"op": handle(size)}
    if persisted:
        state[CHANNEL_STATE_KEY] = channel_handle(persisted)
    return AcknowledgeCheckpoint(
        0, subtask, cid, state,
        sync_ms=timings.get("sync", 1.0), async_ms=timings.get("async", 5.0),
        alignment_ms=timings.get("alignment", 0.0), start_delay_ms=timings.get("delay", 2.0),
        channel_state_bytes=persisted, unaligned=unaligned,
    )  # fmt: skip


def completed(
    cid: int, trigger_ms: int, completed_ms: int, *, savepoint=False
) -> CompletedCheckpoint:
    return CompletedCheckpoint(
        cid, trigger_ms, completed_ms, completed_ms - trigger_ms, f"/chk/chk-{cid}", 300,
        savepoint, {},
    )  # fmt: skip


def run_checkpoint(tracker, cid, trigger_ms, *, options=CHECKPOINT, size=100, **kw):
    tracker.report_triggered(cid, trigger_ms, options, len(SUBTASKS))
    for i, subtask in enumerate(SUBTASKS):
        tracker.report_ack(ack(cid, subtask, size=size, **kw), now_ms=trigger_ms + 10 * (i + 1))
    end = trigger_ms + 10 * len(SUBTASKS) + 5
    tracker.report_completed(completed(cid, trigger_ms, end, savepoint=options.is_savepoint))


def test_a_triggered_checkpoint_is_in_progress_until_every_subtask_acked_and_it_completed():
    tracker = CheckpointStatsTracker()
    tracker.report_triggered(1, 1_000, CheckpointOptions(), 3)
    tracker.report_ack(ack(1, (1, 0), size=10, sync=1.5, alignment=0.0, delay=3.0), now_ms=1_020)
    stats = tracker.checkpoint(1)
    assert stats.status is CheckpointStatus.IN_PROGRESS
    assert (stats.num_acknowledged_subtasks, stats.num_subtasks) == (1, 3)
    assert stats.end_to_end_duration_ms(now_ms=1_500) == 500
    subtask = stats.subtasks[(1, 0)]
    assert subtask.end_to_end_duration_ms == 20
    assert (subtask.sync_duration_ms, subtask.start_delay_ms, subtask.state_size) == (1.5, 3.0, 10)
    assert tracker.counts.in_progress == 1 and tracker.counts.total == 1

    tracker.report_ack(ack(1, (1, 1), size=20), now_ms=1_030)
    tracker.report_ack(ack(1, (2, 0), size=30, alignment=7.0), now_ms=1_040)
    tracker.report_completed(completed(1, 1_000, 1_045))
    stats = tracker.checkpoint(1)
    assert stats.status is CheckpointStatus.COMPLETED
    assert stats.state_size == 60
    assert stats.latest_ack_timestamp_ms == 1_040
    assert stats.end_to_end_duration_ms(now_ms=9_999) == 45
    assert stats.external_path == "/chk/chk-1"
    assert tracker.counts.to_json() == {
        "restored": 0, "total": 1, "in_progress": 0, "completed": 1, "failed": 0,
    }  # fmt: skip
    assert tracker.latest_completed.checkpoint_id == 1


def test_a_snapshot_handed_out_does_not_change_when_more_acks_arrive():
    tracker = CheckpointStatsTracker()
    tracker.report_triggered(1, 1_000, CheckpointOptions(), 3)
    before = tracker.checkpoint(1)
    tracker.report_ack(ack(1, (1, 0)), now_ms=1_010)
    assert before.subtasks == {} and before.status is CheckpointStatus.IN_PROGRESS
    assert len(tracker.checkpoint(1).subtasks) == 1


def test_an_aborted_checkpoint_is_failed_with_its_reason_and_later_acks_are_ignored():
    tracker = CheckpointStatsTracker()
    tracker.report_triggered(4, 1_000, CheckpointOptions(), 3)
    tracker.report_ack(ack(4, (1, 0)), now_ms=1_010)
    tracker.report_failed(4, "declined: by (2, 0): snapshot failed", now_ms=1_100)
    tracker.report_ack(ack(4, (1, 1)), now_ms=1_200)
    tracker.report_failed(4, "again", now_ms=1_300)  # a second abort report changes nothing
    stats = tracker.checkpoint(4)
    assert stats.status is CheckpointStatus.FAILED
    assert stats.failure_message == "declined: by (2, 0): snapshot failed"
    assert stats.end_to_end_duration_ms(now_ms=5_000) == 100
    assert stats.num_acknowledged_subtasks == 1
    assert tracker.counts.failed == 1 and tracker.counts.in_progress == 0
    assert tracker.to_json(now_ms=2_000)["latest"]["failed"]["id"] == 4


def test_the_history_keeps_the_newest_n_but_counts_and_summary_cover_every_checkpoint():
    tracker = CheckpointStatsTracker(history_size=3)
    for cid in range(1, 6):
        run_checkpoint(tracker, cid, 1_000 * cid, size=cid * 100)
    assert [s.checkpoint_id for s in tracker.history()] == [3, 4, 5]
    assert tracker.checkpoint(1) is None
    view = tracker.to_json(now_ms=10_000)
    assert [h["id"] for h in view["history"]] == [5, 4, 3]  # newest first, as Flink
    assert view["counts"]["completed"] == 5
    assert view["summary"]["state_size"] == {"min": 300, "max": 1500, "avg": 900.0}
    assert view["summary"]["end_to_end_duration"] == {"min": 35, "max": 35, "avg": 35.0}


def test_a_checkpoint_evicted_while_in_progress_still_counts_when_it_ends():
    tracker = CheckpointStatsTracker(history_size=1)
    tracker.report_triggered(1, 1_000, CheckpointOptions(), 3)
    tracker.report_triggered(2, 1_100, CheckpointOptions(), 3)
    tracker.report_completed(completed(1, 1_000, 1_300))
    tracker.report_failed(2, "expired")
    assert tracker.counts.to_json() == {
        "restored": 0, "total": 2, "in_progress": 0, "completed": 1, "failed": 1,
    }  # fmt: skip
    assert tracker.latest_completed.checkpoint_id == 1


def test_kinds_tell_savepoints_stop_savepoints_and_unaligned_checkpoints_apart():
    assert CheckpointKind.of(CheckpointOptions()) is CheckpointKind.CHECKPOINT
    assert (
        CheckpointKind.of(CheckpointOptions(unaligned=True)) is CheckpointKind.UNALIGNED_CHECKPOINT
    )
    assert CheckpointKind.of(SAVEPOINT) is CheckpointKind.SAVEPOINT
    stop = CheckpointOptions(CheckpointType.SAVEPOINT, is_final=True)
    assert CheckpointKind.of(stop) is CheckpointKind.SYNC_SAVEPOINT


def test_the_latest_savepoint_and_unaligned_in_flight_data_are_reported():
    tracker = CheckpointStatsTracker()
    timeout = CheckpointOptions(aligned_timeout_ms=50)
    run_checkpoint(tracker, 1, 1_000, options=timeout, persisted=400, unaligned=True)
    run_checkpoint(tracker, 2, 2_000, options=SAVEPOINT)
    run_checkpoint(tracker, 3, 3_000)
    one = tracker.checkpoint(1)
    assert one.kind is CheckpointKind.CHECKPOINT and one.unaligned  # switched after a timeout
    assert one.persisted_data == 1_200 and one.state_size == 300
    view = tracker.to_json(now_ms=4_000)
    assert view["latest"]["savepoint"]["id"] == 2
    assert view["latest"]["savepoint"]["checkpoint_type"] == "SAVEPOINT"
    assert view["latest"]["completed"]["id"] == 3
    assert view["summary"]["persisted_data"] == {"min": 0, "max": 1200, "avg": 400.0}


def test_restores_are_counted_and_the_latest_is_shown():
    tracker = CheckpointStatsTracker()
    tracker.report_restored(7, "/chk/chk-7", is_savepoint=False, attempt=1, now_ms=5_000)
    tracker.report_restored(9, "/sp/savepoint-1", is_savepoint=True, attempt=2, now_ms=6_000)
    assert tracker.counts.restored == 2
    assert tracker.latest_restored.checkpoint_id == 9
    assert tracker.to_json()["latest"]["restored"] == {
        "id": 9, "restore_timestamp": 6_000, "is_savepoint": True,
        "external_path": "/sp/savepoint-1", "attempt": 2,
    }  # fmt: skip
    assert [r.checkpoint_id for r in tracker.restores()] == [7, 9]


def test_details_list_every_subtask_of_every_vertex_with_a_summary_per_vertex():
    tracker = CheckpointStatsTracker()
    tracker.report_triggered(1, 1_000, CheckpointOptions(), 3)
    tracker.report_ack(ack(1, (1, 0), size=10, sync=1.0), now_ms=1_010)
    tracker.report_ack(ack(1, (1, 1), size=30, sync=3.0), now_ms=1_030)
    detail = details_json(tracker.checkpoint(1), {1: ("Source", 2), 2: ("Sink", 1)}, 1_100)
    source, sink = detail["tasks"]["1"], detail["tasks"]["2"]
    assert (source["num_acknowledged_subtasks"], source["state_size"]) == (2, 40)
    assert source["summary"]["sync_duration"] == {"min": 1.0, "max": 3.0, "avg": 2.0}
    assert [s["ack_timestamp"] for s in source["subtasks"]] == [1_010, 1_030]
    assert sink["num_acknowledged_subtasks"] == 0
    assert sink["subtasks"] == [{"index": 0, "status": "pending_or_failed"}]
    assert detail["end_to_end_duration"] == 100


def test_state_size_counts_state_files_not_channel_state():
    state = {"a": handle(5), "b": handle(7), CHANNEL_STATE_KEY: channel_handle(100)}
    assert state_size_of(state) == 12


def test_the_history_size_must_be_positive():
    with pytest.raises(ValueError, match="history size"):
        CheckpointStatsTracker(history_size=0)
