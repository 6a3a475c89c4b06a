"""The benchmark jobs and the two instrumented sinks they write to.

Everything here is shipped to the slot processes by value (see `register_by_value`), so the
slots never need `bench/` on their import path (Spark's Python workers start elsewhere).

Sinks (both follow `tidegate/connectors/base.py`'s two-phase-commit contract):

* `CountSink`: counts records per subtask; `prepare_commit` hands over the count since the
  previous checkpoint and the committer writes it to `count-<subtask>-<attempt>-<checkpoint>`
  (atomic rename, idempotent). The sum of committed counts is an exactly-once check.
* `TimedSink(inner)`: wraps any sink (here `FileSink` or `CountSink`). Its writer notes the
  wall time of its first and last batch and its record count, writes `first-<attempt>-<subtask>`
  on its first batch (recovery: "first record processed after restore") and
  `stats-<attempt>-<subtask>.json` on close. Steady-state throughput is measured from these
  timestamps, so Spark/JVM start-up, deployment and the final checkpoint are excluded.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import cloudpickle

from bench import stamped
from tidegate.common import Configuration, Encoder, RestartStrategies, Types, WatermarkStrategy
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.connectors.number_seq import NumberSequenceSource


def register_by_value() -> None:
    """Pickle this module's (and bench/stamped.py's) functions and classes by value (slots
    cannot import `bench`)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(stamped)


# sinks ---------------------------------------------------------------------------------------
def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class CountCommittable:
    subtask: int
    attempt: int
    checkpoint_id: int
    count: int


class CountWriter:
    def __init__(self, subtask: int, attempt: int) -> None:
        self.subtask, self.attempt = subtask, attempt
        self.uncommitted = 0

    def write_batch(self, records: list[Any]) -> None:
        self.uncommitted += len(records)

    def prepare_commit(self, checkpoint_id: int) -> list[CountCommittable]:
        c = CountCommittable(self.subtask, self.attempt, checkpoint_id, self.uncommitted)
        self.uncommitted = 0
        return [c]

    def close(self) -> None:
        pass


class CountCommitter:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def commit(self, committables: list[CountCommittable]) -> None:
        for c in committables:  # one file per committable: committing twice rewrites it
            name = f"count-{c.subtask}-{c.attempt}-{c.checkpoint_id}"
            _write_atomically(os.path.join(self.directory, name), str(c.count))


class CountSink:
    """Counts records per subtask and commits the counts to files on checkpoint completion."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> CountWriter:
        os.makedirs(self.directory, exist_ok=True)
        return CountWriter(subtask_index, attempt)

    def create_committer(self) -> CountCommitter:
        return CountCommitter(self.directory)

    def recover(self, subtask_index, parallelism, attempt, restored) -> None:
        os.makedirs(self.directory, exist_ok=True)  # uncommitted counts were only in memory


def committed_count(directory: str) -> int:
    total = 0
    for name in os.listdir(directory):
        if name.startswith("count-") and ".tmp-" not in name:
            with open(os.path.join(directory, name)) as f:
                total += int(f.read())
    return total


class TimedWriter:
    def __init__(self, inner: Any, marker_dir: str, subtask: int, attempt: int) -> None:
        self.inner = inner
        self.marker_dir, self.subtask, self.attempt = marker_dir, subtask, attempt
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def write_batch(self, records: list[Any]) -> None:
        now = time.time()
        if self.first is None:
            self.first = now
            _write_atomically(
                os.path.join(self.marker_dir, f"first-{self.attempt}-{self.subtask}"), repr(now)
            )
        self.last = now
        self.count += len(records)
        self.inner.write_batch(records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return self.inner.prepare_commit(checkpoint_id)

    def close(self) -> None:
        stats = {
            "first": self.first,
            "last": self.last,
            "count": self.count,
            "pid": os.getpid(),
            "tidegate": os.path.dirname(sys.modules["tidegate"].__file__),  # code the slot ran
        }
        _write_atomically(
            os.path.join(self.marker_dir, f"stats-{self.attempt}-{self.subtask}.json"),
            json.dumps(stats),
        )
        self.inner.close()


class TimedSink:
    def __init__(self, inner: Any, marker_dir: str) -> None:
        self.inner = inner
        self.marker_dir = marker_dir

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> TimedWriter:
        os.makedirs(self.marker_dir, exist_ok=True)
        inner = self.inner.create_writer(subtask_index, parallelism, attempt)
        return TimedWriter(inner, self.marker_dir, subtask_index, attempt)

    def create_committer(self) -> Any:
        return self.inner.create_committer()

    def recover(self, subtask_index, parallelism, attempt, restored) -> None:
        self.inner.recover(subtask_index, parallelism, attempt, restored)


def read_sink_stats(marker_dir: str, attempt: int | None = None) -> dict[str, Any]:
    """Merge the writers' `stats-*.json`: earliest first batch, latest last batch, total count."""
    firsts, lasts, count, writers, code = [], [], 0, 0, set()
    for name in os.listdir(marker_dir):
        if not (name.startswith("stats-") and name.endswith(".json")):
            continue
        if attempt is not None and not name.startswith(f"stats-{attempt}-"):
            continue
        with open(os.path.join(marker_dir, name)) as f:
            s = json.load(f)
        writers += 1
        count += s["count"]
        code.add(s.get("tidegate"))
        if s["first"] is not None:
            firsts.append(s["first"])
            lasts.append(s["last"])
    return {
        "first": min(firsts) if firsts else None,
        "last": max(lasts) if lasts else None,
        "count": count,
        "writers": writers,
        "code": sorted(c for c in code if c),
    }


def first_record_times(marker_dir: str, attempt: int) -> list[float]:
    times = []
    for name in os.listdir(marker_dir):
        if name.startswith(f"first-{attempt}-") and ".tmp-" not in name:
            with open(os.path.join(marker_dir, name)) as f:
                times.append(float(f.read()))
    return times


def count_lines(directory: str) -> int:
    """Lines in committed (visible) files under `directory` (FileSink's exactly-once view)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            if name.startswith("."):
                continue
            with open(os.path.join(root, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    total += chunk.count(b"\n")
    return total


# user functions (module level: pickled by value) ---------------------------------------------
def scale(x: int) -> int:
    return x * 3


def is_even(x: int) -> bool:
    return x % 2 == 0


def to_pair(x: int, keys: int) -> tuple[int, int]:
    return (x % keys, 1)


def first(t: tuple) -> Any:
    return t[0]


def add_counts(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def identity(i: int) -> int:
    return i


def slow(x: Any, seconds: float) -> Any:
    """A deliberately slow stage (backpressure): sleeps per record."""
    time.sleep(seconds)
    return x


# jobs -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobParams:
    #: "stateless" | "keyed" | "keyed-ts" (keyed, records with timestamps) | "keyed-stamped"
    #: (keyed, events stamped with their creation time on a schedule, latencies logged:
    #: bench/stamped.py; needs `records`)
    pipeline: str
    parallelism: int
    checkpoint_ms: int | None  # None: checkpointing off
    sink: str  # "file" | "count"
    records: int | None  # None: unbounded (DataGeneratorSource)
    keys: int = 10_000
    rate: float | None = None  # records/s limit of an unbounded source
    restarts: int = 0
    #: "aligned", "unaligned", or "timeout-<ms>" (aligned, unaligned after <ms> of alignment)
    alignment: str = "aligned"
    #: a slow stage before the sink: microseconds of sleep per record (0: none)
    slow_us: int = 0
    #: keyed pipelines: the pairs declare Types.TUPLE([INT, LONG]) (typed frames, not pickle)
    typed: bool = False
    #: execution.buffer-timeout (ms; -1: send only full buffers)
    buffer_timeout_ms: int = 10

    @property
    def label(self) -> str:
        ck = f"ckpt {self.checkpoint_ms}ms" if self.checkpoint_ms else "ckpt off"
        if self.checkpoint_ms and self.alignment != "aligned":
            ck += f" {self.alignment}"
        slow_stage = f" slow {self.slow_us}us" if self.slow_us else ""
        typed = " typed" if self.typed else ""
        timeout = f" buffer {self.buffer_timeout_ms}ms" if self.buffer_timeout_ms != 10 else ""
        return (
            f"{self.pipeline}{typed} p={self.parallelism} {ck} sink={self.sink}{slow_stage}"
            f"{timeout}"
        )

    def expected_sink_records(self) -> int | None:
        """Records the sink must have committed when the job finished (exactly once)."""
        if self.records is None:
            return None
        if self.pipeline.startswith("keyed"):
            return self.records
        return (self.records + 1) // 2  # x*3 is even iff x is: the evens of 0..n-1


def build_env(
    params: JobParams,
    *,
    runner: str,
    work_dir: str,
    spark: Any = None,
    restore_path: str | None = None,
) -> StreamExecutionEnvironment:
    conf = Configuration().set_string("execution.runner", runner)
    if restore_path is not None:
        conf.set_string("execution.state-recovery.path", restore_path)
    conf.set_integer("web.checkpoints.history", 100_000)  # phases of every checkpoint
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    if spark is not None:
        env.set_spark_session(spark)
    env.set_parallelism(params.parallelism)
    env.set_buffer_timeout(params.buffer_timeout_ms)
    if params.checkpoint_ms:
        env.enable_checkpointing(params.checkpoint_ms)
    if params.alignment != "aligned":
        env.get_checkpoint_config().enable_unaligned_checkpoints()
        if params.alignment.startswith("timeout-"):
            timeout_ms = int(params.alignment.removeprefix("timeout-"))
            env.get_checkpoint_config().set_aligned_checkpoint_timeout(timeout_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(work_dir, "chk"))
    if params.restarts:
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(params.restarts, 0))
    else:
        env.set_restart_strategy(RestartStrategies.no_restart())

    if params.pipeline == "keyed-stamped":
        latency_dir = os.path.join(work_dir, "latency")
        source: Any = stamped.ScheduledSource(params.records, params.rate, latency_dir)
    elif params.records is None or params.rate is not None:
        source = DataGeneratorSource(identity, count=params.records, records_per_second=params.rate)
    else:
        source = NumberSequenceSource(0, params.records - 1)
    ds = env.from_source(source, watermarks(params), "numbers").uid("numbers")
    if params.pipeline == "stateless":
        ds = ds.map(scale).uid("scale").filter(is_even).uid("even")
    elif params.pipeline in ("keyed", "keyed-ts"):
        pair_type = Types.TUPLE([Types.INT(), Types.LONG()]) if params.typed else None
        ds = ds.map(functools.partial(to_pair, keys=params.keys), pair_type).uid("pair")
        ds = ds.key_by(first).reduce(add_counts).uid("count")
    elif params.pipeline == "keyed-stamped":
        ds = ds.map(functools.partial(stamped.stamped_pair, keys=params.keys)).uid("pair")
        ds = ds.key_by(first).reduce(stamped.add_stamped_counts).uid("count")
    else:
        raise ValueError(f"unknown pipeline {params.pipeline!r}")
    if params.slow_us:
        ds = ds.map(functools.partial(slow, seconds=params.slow_us / 1e6)).uid("slow")

    out = os.path.join(work_dir, "out")
    if params.sink == "file":
        inner: Any = (
            FileSink.for_row_format(out, Encoder.simple_string_encoder())
            .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
            .build()
        )
    elif params.sink == "count":
        inner = CountSink(out)
    else:
        raise ValueError(f"unknown sink {params.sink!r}")
    if params.pipeline == "keyed-stamped":
        inner = stamped.LatencySink(inner, os.path.join(work_dir, "latency"))
    ds.sink_to(TimedSink(inner, os.path.join(work_dir, "markers"))).uid("sink")
    return env


def value_as_timestamp(value: int, _record_timestamp: int) -> int:
    return value


def watermarks(params: JobParams) -> WatermarkStrategy | None:
    """keyed-ts: every record gets a timestamp (its value, ms) and the source emits
    watermarks (what event time costs the keyed count)."""
    if params.pipeline != "keyed-ts":
        return None
    return WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(value_as_timestamp)


def committed_records(params: JobParams, work_dir: str) -> int:
    out = os.path.join(work_dir, "out")
    if not os.path.isdir(out):
        return 0
    return committed_count(out) if params.sink == "count" else count_lines(out)
