"""KafkaSource end to end on Spark against the test broker: the output of a keyed running
count over a topic equals the reference computed from the topic's content, record for record,
through an exception, a kill -9 of a worker, and a rescale 2 -> 3 from a checkpoint; a bounded
source ends the job; new partitions are found while the job runs; records carry their Kafka
timestamps; watermarks are generated per partition (the slowest one decides, an idle one does
not stall windows)."""

from __future__ import annotations

import threading
import uuid

from tests.e2e.jobs import check_restarts, kill_slots
from tests.e2e.kafka_jobs import (
    WithTimestamp,
    check_topic_counted_once,
    fill_numbers,
    kafka_source,
    source_job,
    window_job,
)
from tests.support.environments import file_sink, job_environment
from tests.support.kafka import produce
from tests.support.output import committed_lines
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.common import JobStatus, WatermarkStrategy
from tidegate.connectors.kafka.splits import split_owner

PARTITIONS = 6
#: event time of the window test's first records (Kafka takes a timestamp 0 for "now")
T0 = 1_000_000


def test_a_bounded_source_through_exceptions_counts_the_topic_exactly_once(spark, kafka, tmp_path):
    n = 12_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    env = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=3_000,
        fail_at={0: 4_000, 1: 9_000},
    )
    client = env.execute_async("kafka source, exceptions")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.restarts == 2
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_a_kill_9_of_a_worker_loses_and_duplicates_nothing_of_the_topic(spark, kafka, tmp_path):
    n = 15_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    env = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=2_500,
    )
    client = env.execute_async("kafka source, kill -9")
    killer = kill_slots(client, kills=1, after_checkpoints=2)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(client, kills=1)
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_a_rescale_from_two_to_three_subtasks_moves_partitions_exactly_once(spark, kafka, tmp_path):
    n = 12_000
    topic = fill_numbers(kafka, n, PARTITIONS)
    moved = [p for p in range(PARTITIONS) if split_owner(topic, p, 2) != split_owner(topic, p, 3)]
    assert moved  # partitions change subtask
    first = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        rate=1_000,
    ).execute_async("kafka source at 2")
    wait_until(lambda: committed_lines(tmp_path / "out"), "committed output", job=first)
    wait_for_checkpoints(first, 1)
    resolved(first.cancel(), "the job to be cancelled")
    assert first.get_job_status().result() is JobStatus.CANCELED
    before = committed_lines(tmp_path / "out")
    assert before  # committed before the cancel
    second = source_job(
        kafka_source(kafka, topic=topic),
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=3,
        rate=10_000,
        restore_path=str(tmp_path / "chk" / first.jobmaster.job_id),
    ).execute_async("kafka source at 3")
    resolved(second.get_job_execution_result(), "the job to finish", timeout=300)
    assert second.jobmaster.stats.restored_from is not None
    check_topic_counted_once(committed_lines(tmp_path / "out"), n, PARTITIONS)


def test_partitions_created_while_the_job_runs_are_read_from_their_start(spark, kafka, tmp_path):
    prefix = f"grow-{uuid.uuid4().hex[:8]}"
    old = kafka.create_topic(2, name=f"{prefix}-a")
    produce(kafka, old, ["0", "1"], partition=0)
    source = kafka_source(kafka, pattern=f"{prefix}-.*", bounded=False, discovery_ms=300)
    client = source_job(
        source, tmp_path / "out", tmp_path / "chk", parallelism=2, rate=10_000
    ).execute_async("kafka discovery")
    try:
        wait_until(
            lambda: len(committed_lines(tmp_path / "out")) == 2, "the first records", job=client
        )
        new = kafka.create_topic(3, name=f"{prefix}-b")
        for p in range(3):
            produce(kafka, new, [str(10 + p)], partition=p)
        produce(kafka, old, ["2"], partition=1)
        wait_until(
            lambda: len(committed_lines(tmp_path / "out")) == 6,
            "the new partitions' records",
            job=client,
            timeout=60,
        )
    finally:
        resolved(client.cancel(), "the job to be cancelled")
    values = sorted(int(line.split(",")[1]) for line in committed_lines(tmp_path / "out"))
    assert values == [0, 1, 2, 10, 11, 12]


def test_records_carry_their_kafka_timestamps_into_the_job(spark, kafka, tmp_path):
    topic = kafka.create_topic(2)
    for p in range(2):  # the i-th record of a partition has the timestamp 1_000_000 + i
        produce(kafka, topic, [f"{p}-{i}" for i in range(50)], partition=p)
    env = job_environment("spark", tmp_path / "chk", parallelism=2)
    watermarks = WatermarkStrategy.for_monotonous_timestamps()  # no assigner: Kafka's
    (
        env.from_source(kafka_source(kafka, topic=topic), watermarks, "kafka")
        .process(WithTimestamp())
        .sink_to(file_sink(tmp_path / "out"))
    )
    env.execute("kafka timestamps")
    expected = [f"{p}-{i},{1_000_000 + i}" for p in range(2) for i in range(50)]
    assert sorted(committed_lines(tmp_path / "out")) == sorted(expected)


class Trickle(threading.Thread):
    """Writes `p<partition>@<ts>` every `every_s` to one partition, its timestamp growing by
    `step_ms` from `start`, until stopped; `sent` holds the timestamps written."""

    def __init__(
        self, kafka, topic: str, partition: int, start: int, step_ms: int, every_s: float = 0.3
    ) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partition = kafka, topic, partition
        self.start_ms, self.every_s, self.step_ms = start, every_s, step_ms
        self.sent: list[int] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every_s if self.sent else 0):
            t = self.start_ms + len(self.sent) * self.step_ms
            produce(self.kafka, self.topic, [f"p{self.partition}@{t}"], self.partition, [t])
            self.sent.append(t)

    def stop(self) -> list[int]:
        self.stopped.set()
        if self.ident is not None:  # started
            self.join(10)
        return self.sent


def test_watermarks_follow_the_slowest_partition_and_skip_idle_ones(spark, kafka, tmp_path):
    """One source subtask reads three partitions: p1 trickles slowly through event time from
    T0, p0 jumps ahead to T0 + 29 s (then trickles on from T0 + 29.5 s, 1 ms per record), p2 stays
    empty. Per-partition watermarks: no 10 s window may fire while p1 is below T0 + 10 s (one
    watermark over the interleaved records would follow p0 and fire [T0, T0 + 10 s) and
    [T0 + 10 s, T0 + 20 s) with p0's records only, making p1's late); p2 goes idle and does
    not stall anything. When p1 passes T0 + 10 s, [T0, T0 + 10 s) fires with both partitions'
    records; when p1 falls quiet it goes idle too, and p0 alone fires [T0 + 10 s, T0 + 20 s)."""
    idle_ms = 3_000  # the trickles write well within it
    topic = kafka.create_topic(3)
    out = tmp_path / "out"
    slow = Trickle(kafka, topic, 1, start=T0, step_ms=100)
    slow.start()
    fast = Trickle(kafka, topic, 0, start=T0 + 29_500, step_ms=1)
    client = window_job(kafka, topic, 3, out, tmp_path / "chk", idle_ms).execute_async(
        "kafka per-partition watermarks"
    )
    try:
        wait_for_checkpoints(client, 1)  # reading
        ahead = list(range(T0, T0 + 30_000, 1_000))
        produce(kafka, topic, [f"p0@{t}" for t in ahead], partition=0, timestamps=ahead)
        fast.start()
        wait_for_checkpoints(client, 5)
        assert committed_lines(out) == []  # p1's watermark holds every window back
        sent = slow.stop()
        assert sent[-1] < T0 + 10_000
        produce(kafka, topic, ["p1@+14000"], partition=1, timestamps=[T0 + 14_000])
        wait_until(lambda: committed_lines(out), "the first window", job=client)
        assert committed_lines(out) == [f"{T0},10,{len(sent)},0"]
        wait_until(lambda: len(committed_lines(out)) >= 2, "p1 idle: the second window", job=client)
        wait_for_checkpoints(client, 3)
    finally:
        slow.stop()
        fast.stop()
        resolved(client.cancel(), "the job to be cancelled")
    # [T0 + 20 s, T0 + 30 s) does not fire: p0's watermark stays below T0 + 29.6 s
    assert sorted(committed_lines(out)) == [f"{T0},10,{len(sent)},0", f"{T0 + 10_000},10,1,0"]
