"""KafkaSink EXACTLY_ONCE end to end on Spark against the test broker: a keyed running count
written through Kafka transactions bound to checkpoints, through exceptions and a kill -9.

On Apache Kafka (TIDEGATE_TEST_KAFKA) a read_committed consumer gets the reference exactly.
Tansu also returns records of aborted transactions to read_committed consumers, and a consumer
cannot tell which transaction a record was in. There the test shows what it can: the distinct
records are the reference exactly (nothing lost, nothing wrong), every extra copy is identical
to a reference record, and of a record's copies at most one was produced by the last attempt
(each record carries the attempt that produced it in a header): the others come from failed
attempts, whose open transactions the restore fenced (aborted), or from a pre-committed
transaction of a killed worker that the restore aborted and re-produced from the checkpoint
(sink.py), which is why two copies may carry the same failed attempt. On Tansu such a pair
may also be two committed copies: a restore's marker check (sink.py, step 4) was seen to
answer "not committed" for a transaction the failed attempt had committed (Tansu returned no
committed offset for its marker group: tests/support/kafka.py), and the transaction was
re-produced. The test cannot tell these copies from aborted ones on Tansu.

read_committed consumers missed records in 2 of 54 runs of the kill -9 test and twice in CI
runs of the exceptions test (they stopped at an offset near the failure in every partition
while read_uncommitted held every record: a transaction nothing aborted; on 2026-11-27 they
stopped instead in the middle of the last attempt, ~2,800 records before the end, after which
every record was the last attempt's; 6 runs of the test right after all passed). One way to get
there was ours, and is closed: a writer of the failed attempt still running after the restore's
fence initialised an id for the first time, took the newest epoch, and left its transaction
open (writers now initialise every id when created; test_kafka_clients.py shows the lingering
writer fenced). Should it happen again, the failure says where each partition's read_committed
view stops and what follows (`hidden_records`).
"""

from __future__ import annotations

import collections

from tests.e2e.jobs import kill_slots
from tests.e2e.kafka_jobs import sink_job
from tests.support.kafka import read_topic
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved


def check_sink_output(kafka, topic: str, n: int, attempts: int) -> dict[str, int]:
    """The topic holds the reference (see the module docstring); returns how many records it
    holds and how many are extra copies."""
    records = read_topic(kafka, topic)
    lines = [r.value for r in records]
    assert len(set(lines)) >= n, hidden_records(kafka, topic, records, n)
    if not kafka.is_tansu:
        check_exactly_once(lines, n, 1)  # one source subtask
        return {"records": len(lines), "extra": 0}
    check_exactly_once(sorted(set(lines)), n, 1)
    copies = collections.defaultdict(list)
    for r in records:
        copies[r.value].append(int(dict(r.headers)["attempt"]))
    for line, tags in copies.items():
        assert sum(1 for a in tags if a == attempts - 1) <= 1, (line, tags)
    return {"records": len(lines), "extra": len(lines) - len(set(lines))}


def hidden_records(kafka, topic: str, committed: list, n: int) -> str:
    """Why a read_committed consumer got fewer than `n` distinct records: for each partition,
    the last offset it read and what a read_uncommitted consumer finds after it (a transaction
    the broker never resolved stops read_committed consumers there)."""
    everything = read_topic(kafka, topic, isolation="read_uncommitted")
    seen = {r.value for r in committed}
    report = [
        f"read_committed: {len(seen)} of {n} distinct records; read_uncommitted: "
        f"{len({r.value for r in everything})}"
    ]
    for p in sorted({r.partition for r in everything}):
        last = max((r.offset for r in committed if r.partition == p), default=-1)
        after = [r for r in everything if r.partition == p and r.offset > last]
        first = [(r.offset, r.value, dict(r.headers).get("attempt")) for r in after[:3]]
        report.append(
            f"partition {p}: read_committed stops after offset {last}; read_uncommitted has "
            f"{len(after)} records after it ({sum(r.value not in seen for r in after)} never "
            f"seen by read_committed), first (offset, value, attempt): {first}"
        )
    return "\n".join(report)


def test_exactly_once_through_exceptions(spark, kafka, tmp_path):
    n, parallelism = 10_000, 2
    topic = kafka.create_topic(3)
    env = sink_job(
        kafka,
        topic,
        tmp_path / "chk",
        n=n,
        parallelism=parallelism,
        rate=2_000,
        fail_at={0: 2_000, 1: 5_000},
    )
    client = env.execute_async("kafka sink, exceptions")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.restarts == 2
    check_sink_output(kafka, topic, n, client.jobmaster.stats.restarts + 1)


def test_exactly_once_through_a_kill_9(spark, kafka, tmp_path):
    n, parallelism = 12_000, 2
    topic = kafka.create_topic(3)
    env = sink_job(kafka, topic, tmp_path / "chk", n=n, parallelism=parallelism, rate=3_000)
    client = env.execute_async("kafka sink, kill -9")
    killer = kill_slots(client, kills=1, after_checkpoints=2)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_sink_output(kafka, topic, n, client.jobmaster.stats.restarts + 1)
