"""Job metrics from the counters slots report, the failure timeline, and the backpressure
measurement where a send blocks (runtime/network.py)."""

from __future__ import annotations

import threading
import time

from tests.support.waiting import wait_until
from tidegate.common.job_status import JobStatus
from tidegate.deploy.attempt import JobFailure
from tidegate.metrics.failures import MAX_FAILURES, JobTimeline
from tidegate.metrics.job_metrics import JobMetrics, SubtaskRates, backpressure_level
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import SlotMetrics, SubtaskMetrics
from tidegate.runtime.network import LocalTransport, RecordWriter
from tidegate.runtime.plan import JobGraph, VertexSpec


def graph() -> JobGraph:
    vertices = {
        1: VertexSpec(1, "Source: numbers", 2, operators=(), input_edges=(), is_source=True),
        2: VertexSpec(2, "Map -> Sink", 2, operators=(), input_edges=(1,), is_source=False),
    }
    return JobGraph("job", vertices, {}, 128)


def sample(attempt, slot, at, **subtasks) -> SlotMetrics:
    """subtasks: s<vertex>_<index>=(in, out, backpressured_s, idle_s)."""
    metrics = {
        (int(k[1]), int(k[3])): SubtaskMetrics(*v) for k, v in subtasks.items()
    }  # fmt: skip
    return SlotMetrics(attempt, slot, metrics, at)


def test_rates_and_ratios_are_differences_between_two_samples_of_a_slot():
    metrics = JobMetrics(graph())
    metrics.update(sample(0, 0, 10.0, s1_0=(1_000, 1_000, 0.0, 0.0), s2_0=(500, 500, 0.0, 1.0)))
    metrics.update(sample(0, 0, 12.0, s1_0=(5_000, 5_000, 1.5, 0.0), s2_0=(4_500, 4_500, 0.0, 1.5)))
    _, source = metrics.subtask((1, 0))
    assert source == SubtaskRates(2_000.0, 2_000.0, backpressure_ratio=0.75, idle_ratio=0.0)
    assert source.busy_ratio == 0.25
    _, sink = metrics.subtask((2, 0))
    assert (sink.records_in_per_s, sink.idle_ratio, sink.busy_ratio) == (2_000.0, 0.25, 0.75)
    assert (metrics.records_read, metrics.records_in, metrics.records_per_s) == (
        5_000,
        4_500,
        2_000,
    )


def test_samples_closer_than_the_rate_window_keep_the_older_base():
    metrics = JobMetrics(graph())
    metrics.update(sample(0, 0, 10.0, s1_0=(0, 0, 0.0, 0.0)))
    metrics.update(sample(0, 0, 10.2, s1_0=(100, 100, 0.0, 0.0)))
    assert metrics.subtask((1, 0))[1] == SubtaskRates()  # not yet known
    metrics.update(sample(0, 0, 11.0, s1_0=(1_000, 1_000, 0.0, 0.0)))
    assert metrics.subtask((1, 0))[1].records_in_per_s == 1_000.0


def test_a_new_attempt_clears_the_counters_and_a_zombie_of_an_old_one_is_ignored():
    metrics = JobMetrics(graph())
    metrics.update(sample(0, 0, 10.0, s1_0=(9_000, 9_000, 0.0, 0.0)))
    metrics.update(sample(1, 0, 50.0, s1_0=(10, 10, 0.0, 0.0)))
    metrics.update(sample(0, 1, 11.0, s1_1=(7_000, 7_000, 0.0, 0.0)))
    assert metrics.records_read == 10


def test_vertices_sum_records_and_show_the_highest_backpressure_of_their_subtasks():
    metrics = JobMetrics(graph())
    metrics.update(sample(0, 0, 0.0, s1_0=(0, 0, 0.0, 0.0), s2_0=(0, 0, 0.0, 0.0)))
    metrics.update(sample(0, 1, 0.0, s1_1=(0, 0, 0.0, 0.0), s2_1=(0, 0, 0.0, 0.0)))
    metrics.update(sample(0, 0, 1.0, s1_0=(100, 100, 0.05, 0.0), s2_0=(80, 0, 0.0, 0.5)))
    metrics.update(sample(0, 1, 1.0, s1_1=(300, 300, 0.9, 0.0), s2_1=(250, 0, 0.0, 0.1)))
    source, sink = metrics.vertices_json()
    assert source["name"] == "Source: numbers"
    assert source["metrics"]["read-records"] == 400
    assert source["metrics"]["read-records-per-second"] == 400.0
    assert source["metrics"]["backpressure-ratio"] == 0.9
    assert source["metrics"]["backpressure-level"] == "high"
    assert [s["backpressure-level"] for s in source["subtasks"]] == ["ok", "high"]
    assert sink["metrics"]["busy-ratio"] == 0.9 and sink["metrics"]["idle-ratio"] == 0.1
    assert sink["subtasks"][1]["accumulated-idle-time"] == 100


def test_backpressure_levels_follow_flink():
    assert [backpressure_level(r) for r in (0.0, 0.1, 0.11, 0.5, 0.51)] == [
        "ok", "ok", "low", "low", "high",
    ]  # fmt: skip


def test_a_writer_counts_the_time_a_full_downstream_gate_blocks_it():
    gate = InputGate(capacity=1)
    writer = RecordWriter([(LocalTransport(gate), 0)], lambda recs, bufs: bufs[0].extend(recs), 1)
    waits: list[float] = []
    real_wait = gate._not_full.wait
    gate._not_full.wait = lambda timeout: waits.append(timeout) or real_wait(timeout)
    started = time.perf_counter()
    writer.process_batch([1])  # fills the gate, without waiting
    took = time.perf_counter() - started
    assert waits == [] and writer.backpressured_s(time.perf_counter()) <= took
    blocked = threading.Thread(target=writer.process_batch, args=([2],))
    blocked.start()  # blocks until a reader takes the first frame
    wait_until(lambda: writer._blocked[1] is not None, "the send started", interval=0.01)
    time.sleep(0.3)
    during = writer.backpressured_s(time.perf_counter())  # a send still blocked counts
    assert during >= 0.25
    gate.get(0)
    blocked.join(5)
    assert not blocked.is_alive(), "the send did not end once the gate had room"
    after = writer.backpressured_s(time.perf_counter())
    assert after >= during  # never decreases


def test_the_timeline_keeps_failures_once_and_the_time_of_each_status():
    timeline = JobTimeline()
    timeline.status_changed(JobStatus.RUNNING)
    error = JobFailure("slot 1 failed: ValueError: boom", "Traceback ...")
    timeline.record_failure(0, error)
    timeline.record_failure(0, error)  # the same error object, set twice
    timeline.record_failure(1, JobFailure("slot 0 was lost"))
    view = timeline.to_json()
    assert view["root-exception"] == "slot 0 was lost"
    entries = view["exceptionHistory"]["entries"]
    assert [(e["attempt"], e["exceptionName"]) for e in entries] == [
        (1, "JobFailure"), (0, "JobFailure"),
    ]  # fmt: skip
    assert entries[1]["stacktrace"] == "Traceback ..."
    assert set(timeline.status_timestamps) == {"RUNNING"}


def test_the_timeline_says_when_old_failures_were_dropped():
    timeline = JobTimeline()
    for i in range(MAX_FAILURES + 1):
        timeline.record_failure(i, JobFailure(f"failure {i}"))
    view = timeline.to_json()["exceptionHistory"]
    assert view["truncated"] and len(view["entries"]) == MAX_FAILURES
