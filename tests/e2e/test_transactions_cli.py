"""`tidegate transactions` on what a killed job left in a FileSink and an exactly-once KafkaSink
(the PostgreSQL kind: test_jdbc.py): one job on Spark without restarts writes its running count
into both and fails after its checkpoint 2 completed, before the sinks committed it; a writer
of the job that died mid-write left one more in-progress file. The CLI lists what is left,
refuses to commit the uncovered and to abort the covered, commits and aborts them; then both
sinks hold exactly what checkpoints 1 and 2 cover: the same records, a consistent prefix of the
reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.e2e.connector_jobs import FailingAfterCheckpoint, run_failing_after_checkpoint_2
from tests.e2e.kafka_jobs import exactly_once_sink
from tests.support.environments import file_sink
from tests.support.kafka import read_topic
from tests.support.output import committed_lines
from tests.support.references import check_consistent_prefix
from tests.support.waiting import wait_until
from tidegate.cli import cli
from tidegate.common import Types
from tidegate.common.serialization import SimpleStringSchema
from tidegate.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _kafka_sink(kafka, topic: str) -> KafkaSink:
    serializer = (
        KafkaRecordSerializationSchema.builder()
        .set_topic(topic)
        .set_value_serialization_schema(SimpleStringSchema())
        .build()
    )
    return exactly_once_sink(kafka, topic, serializer)


def _listed(job_dir: str, *options: str) -> list[dict[str, Any]]:
    listed = _cli("transactions", "list", job_dir, *options, "--json")
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)


def test_the_cli_resolves_the_pending_files_and_kafka_transactions_a_killed_job_left(
    spark, kafka, tmp_path
):
    out, topic = tmp_path / "out", kafka.create_topic()
    files = file_sink(out)
    job_id = run_failing_after_checkpoint_2(
        [files, _kafka_sink(kafka, topic)],
        tmp_path / "chk",
        n=50_000,
        rate=5_000,
        as_record=(FailingAfterCheckpoint(), Types.STRING()),
    )
    dead = files.create_writer(1, 2, 0)  # a writer that died mid-write
    dead.write_batch(["0,999999999,1"])
    dead.close()
    job_dir = str(tmp_path / "chk" / job_id)

    # files: no option needed; Kafka is hinted at
    listed = _cli("transactions", "list", job_dir)
    assert "pass --kafka BOOTSTRAP" in listed.stderr and " chk-2 " in listed.stdout
    rows = _listed(job_dir)
    assert {r["kind"] for r in rows} == {"files"}
    covered = [r["id"] for r in rows if r["covered_by_checkpoint"] is not None]
    uncovered = [r["id"] for r in rows if r["covered_by_checkpoint"] is None]
    assert covered and uncovered, rows
    assert all(r["checkpoint_id"] == 2 for r in rows if r["id"] in covered)
    covered_lines = [line for path in covered for line in Path(path).read_text().splitlines()]
    uncovered_lines = [line for path in uncovered for line in Path(path).read_text().splitlines()]
    assert "0,999999999,1" in uncovered_lines

    refused = _cli("transactions", "commit", job_dir, uncovered[0])
    assert refused.exit_code == 2 and "refusing to commit" in refused.stderr
    refused = _cli("transactions", "abort", job_dir, covered[0])
    assert refused.exit_code == 2 and "refusing to abort" in refused.stderr
    unknown = _cli("transactions", "abort", job_dir, str(out / ".nothing.inprogress"))
    assert unknown.exit_code == 2 and "is not a lingering sink transaction" in unknown.stderr
    before = committed_lines(out)
    assert _cli("transactions", "commit", job_dir, *covered).exit_code == 0
    assert _cli("transactions", "abort", job_dir, *uncovered).exit_code == 0
    assert _listed(job_dir) == []
    lines = committed_lines(out)
    assert sorted(lines) == sorted(before + covered_lines)
    assert not set(uncovered_lines) & set(lines)
    check_consistent_prefix(lines)

    # Kafka: checkpoint 2's pre-committed transactions are covered, every other id of the
    # sink's range may hold an open transaction
    unreachable = _cli("transactions", "list", job_dir, "--kafka", "127.0.0.1:1")
    assert unreachable.exit_code == 2 and "cannot reach Kafka at 127.0.0.1:1" in unreachable.stderr
    rows = _listed(job_dir, "--kafka", kafka.bootstrap_servers)
    covered = [r["id"] for r in rows if r["covered_by_checkpoint"] is not None]
    uncovered = [r["id"] for r in rows if r["covered_by_checkpoint"] is None]
    assert {r["kind"] for r in rows} == {"kafka"}
    assert covered and all(r["checkpoint_id"] == 2 for r in rows if r["id"] in covered)
    assert len(covered) + len(uncovered) == 2 * 5  # two writers, the default pool of 5
    kafka_options = ("--kafka", kafka.bootstrap_servers)
    refused = _cli("transactions", "commit", job_dir, uncovered[0], *kafka_options)
    assert refused.exit_code == 2 and "refusing to commit" in refused.stderr
    refused = _cli("transactions", "abort", job_dir, covered[0], *kafka_options)
    assert refused.exit_code == 2 and "refusing to abort" in refused.stderr
    assert _cli("transactions", "commit", job_dir, *covered, *kafka_options).exit_code == 0
    assert _cli("transactions", "abort", job_dir, *uncovered, *kafka_options).exit_code == 0
    # the marker check of a commit just made: Tansu's stable-offset fetch may lag (support/kafka.py)
    wait_until(
        lambda: (
            [r["covered_by_checkpoint"] for r in _listed(job_dir, *kafka_options)] == [None] * 10
        ),
        "the markers of the committed transactions",
        timeout=10,
        interval=0.5,
    )

    records = [r.value for r in read_topic(kafka, topic)]
    if not kafka.is_tansu:
        assert sorted(records) == sorted(lines)
    else:  # Tansu shows aborted records too (test_kafka_sink.py)
        assert set(lines) <= set(records)
