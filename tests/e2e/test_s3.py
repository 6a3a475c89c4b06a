"""Checkpoints and files on S3-compatible storage, for real: a private SeaweedFS server (the
`s3_server` fixture) that refuses requests without its access key, reached only through the
job's configuration keys (`s3.endpoint`, `s3.access-key`, `s3.secret-key`,
`s3.path.style.access`). The job's committed output is compared with the reference, record
for record."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.jobs import count_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import wait_for_checkpoints, wait_until
from tidegate.common import Configuration, Row, Types
from tidegate.common.filesystems import FileSystems
from tidegate.common.job_status import JobStatus
from tidegate.connectors.file_sink import (
    BucketAssigner,
    FileSink,
    FileSinkCommittable,
    FileSinkCommitter,
)
from tidegate.connectors.file_source import FileSource, StreamFormat
from tidegate.datastream import ExternalizedCheckpointRetention
from tidegate.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat

N = 20_000


def _root(s3_server) -> str:
    """A fresh prefix of the bucket for one test."""
    return s3_server.url(f"test-{uuid.uuid4().hex[:12]}")


def test_the_server_refuses_a_client_without_the_configured_keys(s3_server):
    wrong = {**s3_server.configuration(), "s3.secret-key": "not-the-secret"}
    fs, bucket = FileSystems.from_configuration(Configuration().add_all(wrong)).resolve(
        s3_server.url()
    )
    with pytest.raises(PermissionError):
        fs.ls(bucket)


def test_a_job_on_s3_restarts_from_its_s3_checkpoint_and_is_resumed_from_it_exactly_once(
    spark, s3_server
):
    root = _root(s3_server)
    chk, out1, out2 = f"{root}/chk", f"{root}/out1", f"{root}/out2"
    keys = s3_server.configuration()  # the only way the job learns the endpoint and keys
    # incremental rocksdb checkpoints: their shared files on S3 are downloaded on restore
    keys |= {"state.backend.type": "rocksdb", "state.backend.incremental": "true"}
    # Step 1: an exception mid-stream (value 6,000 of the first split, read after ~3 s); the
    # restart restores from the latest checkpoint on S3. Cancelled later, checkpoints retained.
    env = count_job(
        out1, chk, runner="spark", n=N, rate=4_000, fail_at={0: 6_000}, configuration=keys
    )
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    client = env.execute_async("s3, cancelled")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.restarts == 1, "the injected failure restarted the job", job=client)
    wait_for_checkpoints(client, 2)
    assert jm.stats.restored_from is not None  # the restart read a checkpoint from S3
    client.cancel().result(timeout=120)
    assert client.get_job_status().result() is JobStatus.CANCELED
    first = committed_lines(out1, filesystems=s3_server.filesystems)
    assert 0 < len(first) < N

    # Step 2: a new job restored from the first one's job directory on S3
    job_dir = f"{chk}/{client.get_job_id()}"
    env = count_job(out2, chk, runner="spark", n=N, restore_path=job_dir, configuration=keys)
    resumed = env.execute_async("s3, resumed")
    resumed.get_job_execution_result().result(timeout=300)
    assert resumed.jobmaster.stats.restored_from is not None

    lines = first + committed_lines(out2, filesystems=s3_server.filesystems)
    check_exactly_once(lines, N, 2)
    fs, path = s3_server.filesystems.resolve(root)
    files = fs.find(path)
    assert any("/shared/" in p for p in files)  # the first job's, retained on cancellation
    left = [p for p in files if ".storage-check-" in p]
    assert left == [], "the drivers delete their check files when their jobs end"


def test_a_commit_interrupted_between_its_copy_and_its_delete_completes_on_s3(s3_server):
    """On S3 a commit is a copy (which creates the final object whole) and a delete."""
    base = _root(s3_server)
    fs, root = s3_server.filesystems.resolve(base)
    copied = FileSinkCommittable(f"{root}/.part-0-0-0.inprogress", f"{root}/part-0-0-0")
    pending = FileSinkCommittable(f"{root}/.part-0-0-1.inprogress", f"{root}/part-0-0-1")
    fs.pipe_file(copied.in_progress_path, b"a\n")
    fs.pipe_file(copied.final_path, b"a\n")  # copied, then the process died before the delete
    fs.pipe_file(pending.in_progress_path, b"b\n")
    committer = FileSinkCommitter(base, s3_server.filesystems)

    committer.commit([copied, pending])
    committer.commit([copied, pending])  # committed again after a restore: nothing changes

    assert sorted(fs.ls(root, detail=False)) == [copied.final_path, pending.final_path]
    assert committed_lines(base, filesystems=s3_server.filesystems) == ["a", "b"]


def test_a_file_source_reads_every_visible_file_under_an_s3_prefix(s3_server):
    base = _root(s3_server)
    fs, root = s3_server.filesystems.resolve(base)
    fs.pipe_file(f"{root}/b/2.txt", b"3\n4")
    fs.pipe_file(f"{root}/a.txt", b"1\n2\n")
    fs.pipe_file(f"{root}/.hidden.inprogress", b"never\n")
    text = StreamFormat.text_line_format()
    source = FileSource.for_record_stream_format(text, base).build()
    source = source.with_filesystems(s3_server.filesystems)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    lines = []
    while (batch := reader.poll_batch(10)) is not None:
        lines += batch
    assert lines == ["1", "2", "3", "4"]


def test_parquet_part_files_are_committed_and_read_back_on_s3(s3_server):
    """The bulk FileSink's Parquet writer streams into an S3 object, the commit copies it to
    its visible name, and the Parquet FileSource reads it back (footer first) from S3."""
    base = _root(s3_server)
    row_type = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
    sink = (
        FileSink.for_bulk_format(base, ParquetBulkWriters.for_row_type(row_type))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
        .with_filesystems(s3_server.filesystems)
    )
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([(i, f"n{i}") for i in range(1_000)])
    sink.create_committer().commit(writer.prepare_commit(1))

    fmt = ParquetColumnarRowInputFormat(row_type=row_type)
    source = FileSource.for_bulk_file_format(fmt, base).build()
    source = source.with_filesystems(s3_server.filesystems)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    rows = []
    while (batch := reader.poll_batch(300)) is not None:
        rows += batch
    assert rows == [Row(id=i, name=f"n{i}") for i in range(1_000)]
