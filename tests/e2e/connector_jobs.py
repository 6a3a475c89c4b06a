"""The jobs the message-system connector tests run (Redis, NATS): a source's values through
a keyed running count into a FileSink, and generated numbers through the running count into
the sinks under test; failures by an exception at a planned value (jobs.FailAtValues) and by
kill -9 of a slot (jobs.kill_slots)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.jobs import FailAtValues, InjectedFailure, RunningCount, SlowMap
from tests.support.environments import file_sink, job_environment
from tests.support.references import NUM_KEYS
from tidegate.common import Row, Types, WatermarkStrategy
from tidegate.datastream import ExternalizedCheckpointRetention, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.functions import CheckpointListener, MapFunction


def source_count_job(
    source: Any,
    out: Path,
    checkpoints: Path,
    *,
    parallelism: int,
    seconds_per_record: float = 0.0,
    fail_at: dict[int, int] | None = None,
    restore_path: str | None = None,
) -> StreamExecutionEnvironment:
    """source (records: int values) -> [slow map] -> [failures] -> key_by(v % NUM_KEYS) ->
    running count -> FileSink(out); checkpoints every 200 ms, retained on cancel."""
    env = job_environment("spark", checkpoints, parallelism=parallelism, restore_path=restore_path)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "source").uid("source")
    if seconds_per_record:
        ds = ds.map(SlowMap(seconds_per_record)).uid("slow")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    counted = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    counted.sink_to(file_sink(out)).uid("sink")
    return env


#: a running-count line as a record (`as_row`), for sinks of typed records (JDBC)
COUNTED_ROW = Types.ROW_NAMED(["k", "v", "c"], [Types.INT(), Types.LONG(), Types.INT()])


def as_row(line: str) -> Row:
    """`key,value,count` -> Row(k, v, c)."""
    k, v, c = map(int, line.split(","))
    return Row(k=k, v=v, c=c)


class AsRowFailingAfterCheckpoint(MapFunction, CheckpointListener):
    """`as_row`; in the first attempt it fails when its second checkpoint completed, before
    the sink chained after it is notified: the sink's pre-committed transactions of that
    completed checkpoint are left to the restore to commit."""

    def open(self, runtime_context) -> None:
        self.first_attempt = runtime_context.get_attempt_number() == 0
        self.completed = 0

    def map(self, value: str) -> Row:
        return as_row(value)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed += 1
        if self.first_attempt and self.completed == 2:
            raise InjectedFailure(f"injected failure after checkpoint {checkpoint_id}")


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
