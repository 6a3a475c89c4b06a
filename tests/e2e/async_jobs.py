"""Async I/O jobs for the end-to-end tests (test_async_io.py), against the real local lookup
service of bench/lookup_service.py, and their references.

* `lookup_job`: datagen (0..n-1) -> AsyncDataStream (ordered or unordered) `Lookup` ->
  FileSink: lines `i,i*i`. Reference: exactly those n lines; in ordered mode each subtask's
  part files keep its source split's order.
* `event_time_lookup_job`: the records of event_time_jobs (two halves through the same event
  time, out of order within the watermark's bound) -> unordered async echo through the service
  -> key_by -> WindowSums (event-time windows, which flag late records) -> FileSink.
  Reference: event_time_jobs.reference; a record emitted after a watermark that covers it
  would be late (a LATE line), a lost timestamp would trip WindowSums' assertion.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from bench.lookup_service import Lookup, LookupClient
from tests.e2e.event_time_jobs import BOUND_MS, Generate, ThirdField, WindowSums
from tests.e2e.timer_jobs import FailurePlan
from tidegate.common import Configuration, Duration, Encoder, RestartStrategies, WatermarkStrategy
from tidegate.common.time import Time
from tidegate.datastream import AsyncDataStream, AsyncFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink


def _env(runner: str, checkpoints: Path, parallelism: int, interval_ms: int, restarts: int):
    conf = Configuration().set_string("execution.runner", runner)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(checkpoints))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    return env


def _sink(out: Path) -> FileSink:
    return (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )


def lookup_job(
    out: Path,
    checkpoints: Path,
    service: Any,
    *,
    runner: str,
    n: int,
    ordered: bool,
    parallelism: int = 2,
    rate: float | None = None,
    capacity: int = 100,
    interval_ms: int = 300,
    restarts: int = 5,
    fail_at: dict[int, int] | None = None,
) -> StreamExecutionEnvironment:
    env = _env(runner, checkpoints, parallelism, interval_ms, restarts)
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    function = Lookup(service.host, service.port, fail_at)
    looked_up = wait(ds, function, Time.seconds(10), capacity).name("lookup").uid("lookup")
    looked_up.sink_to(_sink(out)).uid("sink")
    return env


def reference(n: int) -> list[str]:
    return sorted(f"{i},{i * i}" for i in range(n))


def committed_files(out: Path) -> list[list[int]]:
    """The values of each committed part file, in file order."""
    files = []
    for path in sorted(glob.glob(f"{out}/**/*", recursive=True)):
        if os.path.isfile(path) and not os.path.basename(path).startswith("."):
            with open(path) as f:
                files.append([int(line.split(",")[0]) for line in f])
    return files


class Echo(AsyncFunction):
    """Asks the service about the record's index and returns the record if the answer is
    right (it always is): a request with the service's latency, the record unchanged."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def open(self, runtime_context: Any) -> None:
        self.client = LookupClient(self.host, self.port)

    async def async_invoke(self, value: tuple[int, int, int]) -> list:
        i = value[1]
        answer = await self.client.lookup(i)
        return [value] if answer == i * i else []

    def close(self) -> None:
        self.client.close()


def event_time_lookup_job(
    out: Path, checkpoints: Path, service: Any, *, runner: str, n: int, rate: float
) -> StreamExecutionEnvironment:
    env = _env(runner, checkpoints, 2, 300, 0)
    env.get_config().set_auto_watermark_interval(50)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(BOUND_MS)
    ).with_timestamp_assigner(ThirdField())
    source = DataGeneratorSource(Generate(n), count=n, records_per_second=rate)
    ds = env.from_source(source, strategy, "records").uid("records")
    echoed = AsyncDataStream.unordered_wait(ds, Echo(service.host, service.port), 10_000, 50)
    sums = echoed.uid("echo").key_by(lambda r: r[0]).process(WindowSums(FailurePlan()))
    sums.uid("windows").sink_to(_sink(out)).uid("sink")
    return env
