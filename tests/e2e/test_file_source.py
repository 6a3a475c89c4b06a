"""The FileSource reading text lines on Spark: files as checkpointed splits with their read
positions, exactly once through an exception in each of two attempts and a kill -9 of a slot;
the committed running counts are compared with the files' content, record for record."""

from __future__ import annotations

from tests.e2e.connector_jobs import source_count_job
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.output import committed_lines
from tests.support.references import check_counted_exactly_once
from tests.support.waiting import resolved
from tidegate.datastream.connectors.file_system import FileSource, StreamFormat

FILES = 3


def test_text_files_are_read_exactly_once_through_an_exception_and_a_kill_9(spark, tmp_path):
    n = 12_000
    data = tmp_path / "in"
    data.mkdir()
    splits = [list(range(i, n, FILES)) for i in range(FILES)]  # file i: the values v % 3 == i
    for i, values in enumerate(splits):
        (data / f"part-{i}.txt").write_text("".join(f"{v}\n" for v in values))
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(data)).build()
    env = source_count_job(
        source,
        tmp_path / "out",
        tmp_path / "chk",
        parallelism=2,
        seconds_per_record=0.0003,
        fail_at={0: n // 3, 1: n // 3},
        parse=int,
    )
    job = env.execute_async("text files through failures")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish")
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))
    check_counted_exactly_once(committed_lines(tmp_path / "out"), splits)
