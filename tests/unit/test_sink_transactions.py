"""`tidegate transactions`: which lingering sink transactions each kind lists, and which are
covered by a completed checkpoint (pure decisions; the CLI against real sinks is in
tests/e2e/test_transactions_cli.py and test_jdbc.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tidegate.cli.transactions.files import FileTransactions, UnsupportedFilesystem, lingering_files
from tidegate.cli.transactions.kafka import lingering_kafka
from tidegate.cli.transactions.model import (
    Covered,
    JobCommittables,
    LingeringTransaction,
    refusal,
)
from tidegate.cli.transactions.postgres import lingering_prepared
from tidegate.connectors.file_sink import FileSinkCommittable
from tidegate.connectors.jdbc.gids import Gid
from tidegate.connectors.jdbc.transactions import PreparedTransaction
from tidegate.connectors.kafka.records import ProducerRecord
from tidegate.connectors.kafka.sink import KafkaCommittable
from tidegate.connectors.kafka.transactions import prefix_of


def _transaction(covered_by: int | None) -> LingeringTransaction:
    return LingeringTransaction("files", "/out/.part-0-0-0.inprogress", 0, 1, 0, 1.0, covered_by)


def test_commit_is_refused_for_an_uncovered_transaction_and_abort_for_a_covered_one():
    assert refusal(_transaction(3), commit=True, job_id="j") is None
    assert refusal(_transaction(None), commit=False, job_id="j") is None
    assert "refusing to commit" in refusal(_transaction(None), commit=True, job_id="j").message
    assert "refusing to abort" in refusal(_transaction(3), commit=False, job_id="j").message


def test_postgres_lists_the_jobs_prepared_transactions_and_those_its_checkpoints_cover():
    now = datetime.now(UTC)

    def prepared(job, checkpoint):
        gid = Gid(job, 0, 0, checkpoint, "n")
        return PreparedTransaction(gid, now - timedelta(seconds=30), "postgres", "db")

    found = [prepared("run-2", 7), prepared("run-1", 5), prepared("run-1", 6), prepared("x", 5)]
    covered = {str(Gid("run-1", 0, 0, 5, "n")): 7}  # run 2 restored run 1's checkpoint 5
    chosen = lingering_prepared(found, "run-2", covered, now)
    assert [(t.kind, t.checkpoint_id, t.covered_by, t.note) for t in chosen] == [
        ("postgres", 7, None, ""),
        ("postgres", 5, 7, "job run-1"),
        ("postgres", 6, None, "job run-1"),
    ]
    assert {t.age_s for t in chosen} == {30.0}


def _file(bucket: str, subtask: int, attempt: int, counter: int) -> FileSinkCommittable:
    name = f"part-{subtask}-{attempt}-{counter}.txt"
    return FileSinkCommittable(f"{bucket}/.{name}.inprogress", f"{bucket}/{name}")


def test_files_covers_the_pending_files_of_completed_checkpoints_and_not_the_others():
    committed = _file("/out/a", 0, 0, 0)  # its rename happened: no in-progress file
    pending = _file("/out/a", 1, 0, 3)  # checkpoint 2 completed, its rename did not happen
    later = _file("/out/a", 1, 1, 4)  # written after the last completed checkpoint
    covered = [
        Covered("sink", 1, 1_000, 0, 1, committed),
        Covered("sink", 2, 2_000, 1, 2, pending),
        Covered("sink", 3, 3_000, 1, 2, pending),  # still pending at checkpoint 3
    ]
    in_progress = {
        pending.in_progress_path: 100.0,
        later.in_progress_path: 130.0,
    }
    found = lingering_files(covered, in_progress, now=160.0)
    assert [(t.id, t.writer, t.checkpoint_id, t.attempt, t.age_s, t.covered_by) for t in found] == [
        (pending.in_progress_path, 1, 2, 0, 60.0, 2),
        (later.in_progress_path, 1, None, 1, 30.0, None),
    ]


def test_files_only_names_in_progress_files_of_the_sinks_part_names():
    covered = [Covered("sink", 1, 1_000, 0, 1, _file("/out", 0, 0, 0))]
    others = {
        "/out/.other-0-0-1.txt.inprogress": 1.0,  # another sink's prefix
        "/out/.part-0-0-1.csv.inprogress": 1.0,  # another suffix
        "/out/.part-0-0-1.txt": 1.0,  # not in progress
        "/out/.part-2-1-7.txt.inprogress": 1.0,
    }
    found = lingering_files(covered, others, now=2.0)
    assert [(t.id, t.writer, t.attempt) for t in found] == [
        ("/out/.part-2-1-7.txt.inprogress", 2, 1)
    ]


def test_files_on_an_object_store_are_refused_naming_the_path():
    on_s3 = FileSinkCommittable("bucket/out/.part-0-0-0.inprogress", "bucket/out/part-0-0-0")
    job = JobCommittables("j", (Covered("sink", 1, 1_000, 0, 1, on_s3),))
    with pytest.raises(UnsupportedFilesystem, match=re.escape(on_s3.in_progress_path)):
        FileTransactions(job)


def _kafka(writer: int, checkpoint: int, slot: int | None, pool_size: int = 2) -> KafkaCommittable:
    if slot is None:  # the writer wrote nothing in this checkpoint
        return KafkaCommittable(writer, checkpoint, None, None, None, (), pool_size)
    txn_id = f"job-a-{writer}-{slot}"
    record = ProducerRecord("t", b"v")
    return KafkaCommittable(writer, checkpoint, txn_id, "g", "t", (record,), pool_size)


def test_kafka_covers_the_uncommitted_transactions_of_completed_checkpoints():
    done, pending = _kafka(0, 1, 0), _kafka(0, 2, 1)
    covered = [
        Covered("sink", 1, 1_000, 0, 1, done),
        Covered("sink", 2, 2_000, 0, 2, pending),
        Covered("sink", 2, 2_000, 1, 2, _kafka(1, 2, None, pool_size=3)),
    ]
    found = lingering_kafka(covered, lambda c: c.committable is done, now_ms=5_000)
    rows = [(t.id, t.writer, t.checkpoint_id, t.age_s, t.covered_by) for t in found]
    assert rows == [
        ("job-a-0-1", 0, 2, 3.0, 2),
        # every other id of the prefix range (writers 0 and 1, the largest pool) may be open
        ("job-a-0-0", 0, None, None, None),
        ("job-a-0-2", 0, None, None, None),
        ("job-a-1-0", 1, None, None, None),
        ("job-a-1-1", 1, None, None, None),
        ("job-a-1-2", 1, None, None, None),
    ]


def test_kafka_lists_nothing_for_a_sink_that_never_wrote():
    covered = [Covered("sink", 1, 1_000, 0, 1, _kafka(0, 1, None))]
    assert lingering_kafka(covered, lambda c: False, now_ms=0) == []


def test_the_prefix_of_a_transactional_id_is_before_its_writer_and_slot():
    assert prefix_of("orders-job-1-4") == "orders-job"
    with pytest.raises(ValueError, match="not a transactional id"):
        prefix_of("orders-job-x-4")
