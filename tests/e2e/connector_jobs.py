"""The jobs the connector tests run (Redis, NATS, Parquet files, the table sinks): a source's
values through a keyed running count into a FileSink, and generated numbers through the running
count into
the sinks under test; failures by an exception at a planned value (jobs.FailAtValues) and by
kill -9 of a slot (jobs.kill_slots); and the rescale of either from 2 to 3 subtasks (a run at
2 cancelled after two checkpoints, restored at 3 from its retained checkpoint)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import FailAtValues, InjectedFailure, RunningCount, SlowMap
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tests.support.references import NUM_KEYS
from tests.support.waiting import resolved, wait_for_checkpoints
from tidegate.common import JobStatus, RestartStrategies, Row, Types, WatermarkStrategy
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import ExternalizedCheckpointRetention, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    OutputFileConfig,
)
from tidegate.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat
from tidegate.datastream.functions import CheckpointListener, MapFunction

#: the Parquet job's input rows; a running count's `key,value,count` line as a record
#: (`counted_row`), for sinks of typed records (Parquet, JDBC, tables)
VALUE_ROW = Types.ROW_NAMED(["value", "label"], [Types.LONG(), Types.STRING()])
COUNTED_ROW = Types.ROW_NAMED(["key", "value", "count"], [Types.INT(), Types.LONG(), Types.LONG()])


def source_count_job(
    source: Any,
    out: Path,
    checkpoints: Path,
    *,
    parallelism: int,
    seconds_per_record: float = 0.0,
    fail_at: dict[int, int] | None = None,
    restore_path: str | None = None,
    parse: Callable[[Any], int] | None = None,
) -> StreamExecutionEnvironment:
    """source (records: int values, or what `parse` makes them from) -> [slow map] ->
    [failures] -> key_by(v % NUM_KEYS) -> running count -> FileSink(out); checkpoints every
    200 ms, retained on cancel."""
    env = job_environment("spark", checkpoints, parallelism=parallelism, restore_path=restore_path)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "source").uid("source")
    if parse:
        ds = ds.map(parse).uid("parse")
    if seconds_per_record:
        ds = ds.map(SlowMap(seconds_per_record)).uid("slow")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    counted = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    counted.sink_to(file_sink(out)).uid("sink")
    return env


class FailingAfterCheckpoint(MapFunction, CheckpointListener):
    """Passes records on; in the first attempt it fails when its second checkpoint completed,
    before the sinks chained after it are notified: the sinks' pre-committed transactions of
    that completed checkpoint are left to the restore to commit."""

    def open(self, runtime_context) -> None:
        self.first_attempt = runtime_context.get_attempt_number() == 0
        self.completed = 0

    def map(self, value: Any) -> Any:
        return value

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed += 1
        if self.first_attempt and self.completed == 2:
            raise InjectedFailure(f"injected failure after checkpoint {checkpoint_id}")


class AsRowFailingAfterCheckpoint(FailingAfterCheckpoint):
    """`counted_row`, failing as FailingAfterCheckpoint."""

    def map(self, value: str) -> Row:
        return counted_row(value)


def run_failing_after_checkpoint_2(
    sinks: list[Any],
    checkpoints: Path,
    *,
    n: int,
    rate: float,
    as_record: tuple[FailingAfterCheckpoint, Any],
) -> str:
    """Runs `sink_count_job` into `sinks` at parallelism 2 without restarts, failing (by
    `as_record`) after its checkpoint 2 completed and before the sinks committed it, as a
    killed job leaves its sinks; returns the job id (its checkpoints are in
    `checkpoints / job id`)."""
    env = sink_count_job(sinks, checkpoints, n=n, rate=rate, as_record=as_record)
    env.set_restart_strategy(RestartStrategies.no_restart())
    job = env.execute_async("a job that fails after checkpoint 2")
    with pytest.raises(JobExecutionException, match="injected failure after checkpoint"):
        resolved(job.get_job_execution_result(), "the job to finish", timeout=120)
    return job.jobmaster.job_id


def sink_count_job(
    sinks: list[Any],
    checkpoints: Path,
    *,
    n: int,
    parallelism: int = 2,
    rate: float | None = None,
    fail_at: dict[int, int] | None = None,
    interval_ms: int = 200,
    restore_path: str | None = None,
    as_record: tuple[Callable[[str], Any], Any] | None = None,
) -> StreamExecutionEnvironment:
    """numbers 0..n-1 (`rate`/s) -> [failures] -> key_by -> running count (`key,value,count`)
    -> [`as_record`: (function, its output type) turning each line into a record] -> each of
    `sinks`; checkpoints retained on cancel."""
    env = job_environment(
        "spark",
        checkpoints,
        parallelism=parallelism,
        interval_ms=interval_ms,
        restore_path=restore_path,
    )
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    counted = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    if as_record is not None:
        function, output_type = as_record
        counted = counted.map(function, output_type=output_type).uid("as-record")
    for i, sink in enumerate(sinks):
        counted.sink_to(sink).uid(f"sink-{i}")
    return env


def rescaled_source_run(
    source: Any, tmp_path: Path, *, n: int, while_first_runs: Callable[[], None] = lambda: None
) -> list[str]:
    """`source_count_job` of `source` (`n` records) at 2 subtasks until two checkpoints
    completed (then `while_first_runs()`), cancelled, restored at 3 subtasks from its retained
    checkpoint and run to its end (the source is bounded). Returns the committed output."""
    out, checkpoints = tmp_path / "out", tmp_path / "chk"
    first = source_count_job(
        source, out, checkpoints, parallelism=2, seconds_per_record=0.0005
    ).execute_async("at 2")
    wait_for_checkpoints(first, 2)
    while_first_runs()
    resolved(first.cancel(), "the job to be cancelled")
    assert first.get_job_status().result() is JobStatus.CANCELED
    second = source_count_job(
        source,
        out,
        checkpoints,
        parallelism=3,
        seconds_per_record=0.00005,  # the same operators as the first run
        restore_path=str(checkpoints / first.jobmaster.job_id),
    ).execute_async("at 3")
    resolved(second.get_job_execution_result(), "the job to finish", timeout=300)
    assert second.jobmaster.stats.restored_from is not None
    return committed_lines(out)


def rescaled_sinks_run(
    sinks: Callable[[], list[Any]],
    checkpoints: Path,
    *,
    n: int,
    written: Callable[[], int],
    as_record: tuple[Callable[[str], Any], Any] | None = None,
) -> None:
    """`sink_count_job` into `sinks()` at 2 subtasks until two checkpoints completed,
    cancelled (`written()`, the records the sinks show, must lie between 0 and `n`), then
    restored at 3 subtasks from its retained checkpoint and run to its end: the batches of the
    checkpoint restored from are committed again by the subtasks that take over their writer
    indexes, which must make that a no-op. `as_record`: as for `sink_count_job`."""
    first = sink_count_job(
        sinks(), checkpoints, n=n, rate=3_000, as_record=as_record
    ).execute_async("sinks at 2")
    wait_for_checkpoints(first, 2)
    resolved(first.cancel(), "the job to be cancelled")
    assert 0 < written() < n, "the first run must stop midway"
    second = sink_count_job(
        sinks(),
        checkpoints,
        n=n,
        parallelism=3,
        restore_path=str(checkpoints / first.jobmaster.job_id),
        as_record=as_record,
    ).execute_async("sinks at 3")
    resolved(second.get_job_execution_result(), "the job to finish", timeout=300)


def counted_row(line: str) -> Row:
    """A running count's `key,value,count` line as a COUNTED_ROW."""
    key, value, count = map(int, line.split(","))
    return Row(key=key, value=value, count=count)


def parquet_count_job(
    inputs: Path,
    out: Path,
    checkpoints: Path,
    *,
    parallelism: int,
    seconds_per_record: float,
    fail_at: dict[int, int],
) -> StreamExecutionEnvironment:
    """Parquet files of VALUE_ROWs (FileSource, batches of 100 rows) -> value -> slow map
    (chained to the source: it bounds how fast the files are read) -> failures -> key_by ->
    running count -> COUNTED_ROWs -> bulk FileSink of Parquet part files (`.parquet`) in
    `out`; checkpoints every 200 ms."""
    env = job_environment("spark", checkpoints, parallelism=parallelism, interval_ms=200)
    fmt = ParquetColumnarRowInputFormat(row_type=VALUE_ROW, batch_size=100)
    source = FileSource.for_bulk_file_format(fmt, str(inputs)).build()
    values = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "parquet in")
        .uid("source")
        .map(lambda row: row.value, output_type=Types.LONG())
        .uid("value")
        .map(SlowMap(seconds_per_record))
        .uid("slow")
        .map(FailAtValues(fail_at))
        .uid("fail")
    )
    counted = values.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    sink = (
        FileSink.for_bulk_format(str(out), ParquetBulkWriters.for_row_type(COUNTED_ROW))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".parquet").build())
        .build()
    )
    counted.map(counted_row, output_type=COUNTED_ROW).uid("rows").sink_to(sink).uid("sink")
    return env
