"""Checkpoints and files on S3-compatible storage, for real: a private SeaweedFS server (the
`s3_server` fixture) that refuses requests without its access key, reached only through the
job's configuration keys (`s3.endpoint`, `s3.access-key`, `s3.secret-key`,
`s3.path.style.access`). The job's committed output is compared with the reference, record
for record."""

from __future__ import annotations

import http.client
import http.server
import os
import subprocess
import sys
import threading
import urllib.parse
import uuid

import pytest

from tests.e2e.jobs import count_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.checkpoint.storage import CheckpointStorage
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


def test_a_job_on_s3_restarts_from_its_s3_checkpoint_and_is_resumed_rescaled_exactly_once(
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
    resolved(client.cancel(), "the job to be cancelled", timeout=120)
    assert client.get_job_status().result() is JobStatus.CANCELED
    first = committed_lines(out1, filesystems=s3_server.filesystems)

    # Step 2: a new job restored from the first one's job directory on S3, rescaled 2 -> 3
    # (its keyed state redistributed from the incremental files on S3)
    job_dir = f"{chk}/{client.get_job_id()}"
    env = count_job(
        out2, chk, runner="spark", n=N, parallelism=3, restore_path=job_dir, configuration=keys
    )
    resumed = env.execute_async("s3, resumed")
    resolved(resumed.get_job_execution_result(), "the job to finish", timeout=300)
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


def test_a_state_file_whose_writing_fails_leaves_no_object_and_no_open_upload(s3_server):
    """An exception while a checkpoint file is written (here after two multipart parts went
    up) aborts the upload: no partial object is published, no uploaded part is left to bill."""
    base = _root(s3_server)
    # parts of S3's minimum size (5 MiB) instead of s3fs's 50 MiB: fewer bytes to upload
    keys = {**s3_server.configuration(), "fs.s3.default_block_size": str(5 << 20)}
    filesystems = FileSystems.from_configuration(Configuration().add_all(keys))
    storage = CheckpointStorage(f"{base}/chk", "job", filesystems)
    part = b"x" * (6 << 20)
    fs, shared = filesystems.resolve(f"{base}/chk/job/shared")
    bucket, _, prefix = shared.partition("/")
    writer = storage.create_artifact(f"{base}/chk/job/shared", "state", ".state")
    with pytest.raises(RuntimeError, match="snapshot failed"), writer as f:
        for _ in range(3):
            f.write(part)
            f.flush()  # s3fs uploads a part once its buffer holds a block
        assert fs.list_multipart_uploads(bucket), "the upload has begun"
        raise RuntimeError("snapshot failed")
    assert not fs.exists(f"{shared}/{writer.name}")
    assert [u for u in fs.list_multipart_uploads(bucket) if u["Key"].startswith(prefix)] == []


def test_a_new_attempt_aborts_the_uploads_a_killed_writer_left_open(s3_server):
    """A writer killed mid-upload leaves an unfinished multipart upload; the next writer
    generation of the job aborts every such upload under the job directory, and only those."""
    base = _root(s3_server)
    storage = CheckpointStorage(f"{base}/chk", "job", s3_server.filesystems)
    fs, job_dir = s3_server.filesystems.resolve(storage.job_dir)
    bucket, _, job_prefix = job_dir.partition("/")
    _, other = s3_server.filesystems.resolve(f"{base}/elsewhere/part")
    for key in (f"{job_prefix}/shared/state-1.state", other.partition("/")[2]):
        fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)

    storage.start_generation()

    keys = [
        u["Key"]
        for u in fs.list_multipart_uploads(bucket)
        if u["Key"].startswith(job_prefix.rsplit("/", 2)[0])
    ]
    assert keys == [other.partition("/")[2]]


def test_credentials_and_endpoint_come_from_the_aws_environment_without_configuration(
    s3_server, tmp_path
):
    """With no s3.* keys, s3fs finds the keys and the endpoint in the usual AWS variables."""
    path = _root(s3_server) + "/from-env.txt"
    script = (
        "import sys\n"
        "from tidegate.common import Configuration\n"
        "from tidegate.common.filesystems import FileSystems\n"
        "fs, p = FileSystems.from_configuration(Configuration()).resolve(sys.argv[1])\n"
        "fs.pipe_file(p, b'written with AWS_* credentials')\n"
        "print(fs.cat_file(p).decode())\n"
    )
    keys = s3_server.configuration()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_ACCESS_KEY_ID": keys["s3.access-key"],
        "AWS_SECRET_ACCESS_KEY": keys["s3.secret-key"],
        "AWS_ENDPOINT_URL": keys["s3.endpoint"],
        "AWS_CONFIG_FILE": str(tmp_path / "none"),  # nothing from this machine's ~/.aws
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, path], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "written with AWS_* credentials"


class _Throttling(http.server.BaseHTTPRequestHandler):
    """In front of the S3 server: answers the first `throttled` requests with S3's 503
    SlowDown, forwards the others unchanged (the Host header too, which the signature covers)."""

    protocol_version = "HTTP/1.1"  # answers botocore's `Expect: 100-continue`
    upstream: tuple[str, int]
    throttled: int
    seen = 0
    lock = threading.Lock()

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).seen += 1
            throttle = type(self).seen <= self.throttled
        if throttle:
            error = (
                b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
            )
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
        conn.request(self.command, self.path, body, headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(key, value)
        # a HEAD answer's length is the object's, with no body
        length = answer.getheader("Content-Length") if self.command == "HEAD" else len(data)
        self.send_header("Content-Length", str(length or 0))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

    def log_message(self, *args) -> None:
        pass


def test_requests_the_store_throttles_are_retried_until_the_checkpoint_file_is_written(
    s3_server,
):
    upstream = urllib.parse.urlsplit(s3_server.endpoint)
    handler = type(
        "Handler", (_Throttling,), {"upstream": (upstream.hostname, upstream.port), "throttled": 3}
    )
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        keys = {**s3_server.configuration(), "s3.endpoint": f"http://127.0.0.1:{proxy.server_port}"}
        storage = CheckpointStorage(
            _root(s3_server), "job", FileSystems.from_configuration(Configuration().add_all(keys))
        )
        data = b"state" * 1000
        storage.write_bytes(f"{storage.job_dir}/chk-1/state-0", data)
        assert handler.seen > 3, "the first requests were throttled"
        assert storage.read_bytes(f"{storage.job_dir}/chk-1/state-0") == data
    finally:
        proxy.shutdown()
        proxy.server_close()


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
