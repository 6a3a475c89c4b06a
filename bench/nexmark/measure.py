"""Measurements of the Nexmark benchmark: the generator alone, the bare-Python baselines, and
one tidegate job per query (bench/nexmark/run.py orchestrates them).

A job's steady rate is `events / (end - start)`: `start` is the earliest first batch a source
reader produced, `end` the latest of the last batch at the sink and the sources' last batch
(windowed queries emit at the end of input). Both are stamped in the slots (TimedSource here,
`bench.jobs.TimedSink`), so Spark start-up and deployment are excluded; the final checkpoint
is not (a bounded job's sink commits it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from bench.jobs import CountSink, TimedSink, committed_count, read_sink_stats
from bench.measure import CpuMonitor
from bench.nexmark.generator import NexmarkConfig, NexmarkGenerator
from bench.nexmark.handwritten import HANDWRITTEN
from bench.nexmark.queries import QUERIES, events_stream
from bench.nexmark.reference import REFERENCE
from bench.nexmark.source import NexmarkSource
from tidegate.common import Configuration, RestartStrategies
from tidegate.datastream import StreamExecutionEnvironment

BATCH = 1_000  # events per generator call in the single-process loops
#: the queries, and the variants written without the window API ("q5-timers": q5's results)
ALL_QUERIES = {**QUERIES, **HANDWRITTEN}


def reference_of(query: str) -> Any:
    """The reference computation of `query` (a variant has its query's)."""
    return REFERENCE[query.split("-")[0]]


def generated(config: NexmarkConfig, events: int) -> Iterator[Any]:
    """Events 0..events-1, generated lazily in batches (as a source reader does)."""
    generator = NexmarkGenerator(config)
    for first in range(0, events, BATCH):
        yield from generator.events(first, min(BATCH, events - first))


def generator_rate(config: NexmarkConfig, events: int) -> float:
    """Events per CPU-second of the generator alone, one process (a loop that only counts).
    CPU time, not wall time: other users' load on the machine does not count against it."""
    started = time.process_time()
    n = 0
    for _ in generated(config, events):
        n += 1
    return n / (time.process_time() - started)


def bare_rate(query: str, config: NexmarkConfig, events: int) -> tuple[float, int]:
    """The bare loop: generate and compute the query's reference result in one process.
    Returns events per CPU-second and the number of result rows (what a job must commit)."""
    started = time.process_time()
    rows = 0
    for _ in reference_of(query)(generated(config, events)):
        rows += 1  # a sink that counts, like the jobs' CountSink
    return events / (time.process_time() - started), rows


class TimedSource:
    """Wraps a Source; each reader writes the wall time of its first and last batch."""

    def __init__(self, inner: Any, marker_dir: str) -> None:
        self.inner = inner
        self.marker_dir = marker_dir
        self.boundedness = inner.boundedness

    def create_splits(self, parallelism: int) -> list[Any]:
        return self.inner.create_splits(parallelism)

    def create_reader(self, splits: list[Any], subtask_index: int, parallelism: int) -> Any:
        os.makedirs(self.marker_dir, exist_ok=True)
        inner = self.inner.create_reader(splits, subtask_index, parallelism)
        return TimedReader(inner, os.path.join(self.marker_dir, f"source-{subtask_index}.json"))


class TimedReader:
    def __init__(self, inner: Any, path: str) -> None:
        self.inner, self.path = inner, path
        self.first: float | None = None
        self.last: float | None = None

    def poll_batch(self, max_records: int) -> list[Any] | None:
        batch = self.inner.poll_batch(max_records)
        if batch:
            self.last = time.time()
            if self.first is None:
                self.first = self.last
        return batch

    def snapshot_splits(self) -> list[Any]:
        return self.inner.snapshot_splits()

    def close(self) -> None:
        with open(self.path, "w") as f:
            json.dump({"first": self.first, "last": self.last}, f)
        self.inner.close()


def source_times(marker_dir: str) -> tuple[float | None, float | None]:
    firsts, lasts = [], []
    for name in os.listdir(marker_dir):
        if name.startswith("source-"):
            with open(os.path.join(marker_dir, name)) as f:
                stamps = json.load(f)
            if stamps["first"] is not None:
                firsts.append(stamps["first"])
                lasts.append(stamps["last"])
    return (min(firsts) if firsts else None), (max(lasts) if lasts else None)


def state_backend(name: str) -> Any:
    """The backend object for `name`, or None when this tidegate has no such backend."""
    if name == "hashmap":
        from tidegate.datastream import HashMapStateBackend

        return HashMapStateBackend()
    import tidegate.datastream as ds

    cls = getattr(ds, "EmbeddedRocksDBStateBackend", None)
    return cls() if cls is not None else None


def run_query_job(
    query: str,
    backend: str,
    *,
    events: int,
    parallelism: int,
    checkpoint_ms: int,
    config: NexmarkConfig,
    expected_rows: int,
    spark: Any,
    work_root: str,
) -> dict[str, Any]:
    """One bounded job: NexmarkSource -> query -> CountSink; timings and the exactly-once check."""
    work = tempfile.mkdtemp(prefix=f"{query}-{backend}-", dir=work_root)
    markers, out = os.path.join(work, "markers"), os.path.join(work, "out")
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", "spark")
    )
    env.set_spark_session(spark)
    env.set_parallelism(parallelism)
    env.set_state_backend(state_backend(backend))
    env.enable_checkpointing(checkpoint_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(work, "chk"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    source = TimedSource(NexmarkSource(count=events, config=config), markers)
    ALL_QUERIES[query](events_stream(env, source)).sink_to(TimedSink(CountSink(out), markers))
    cpu = CpuMonitor()
    submitted = time.time()
    client = env.execute_async(f"nexmark {query} {backend}")
    error = None
    try:
        client.get_job_execution_result().result(timeout=1800)
    except Exception as e:  # reported, not raised: one bad run must not lose the others
        error = f"{type(e).__name__}: {e}"
    done = time.time()
    cores = cpu.stop()
    sink = read_sink_stats(markers)
    first, source_last = source_times(markers)
    end = max(t for t in (sink["last"], source_last) if t is not None) if first else None
    committed = committed_count(out) if os.path.isdir(out) else 0
    jm = client.jobmaster
    cpu_s = (cores["own_cores"] or 0) * (done - submitted)
    result = {
        "query": query,
        "backend": backend,
        "events": events,
        "parallelism": parallelism,
        "error": error,
        "wall_s": done - submitted,
        "steady_s": (end - first) if first else None,
        "steady_rate": events / (end - first) if first and end > first else None,
        # CPU-seconds of this benchmark's whole process tree (slots, driver, JVM) from submit
        # to the end: robust to other users' load, and an upper bound of the job's own cost
        "cpu_s": cpu_s,
        "events_per_cpu_s": events / cpu_s if cpu_s else None,
        "committed_rows": committed,
        "expected_rows": expected_rows,
        "exactly_once_ok": committed == expected_rows,
        "completed_checkpoints": jm.stats.completed_checkpoints,
        "failed_checkpoints": jm.stats.failed_checkpoints,
        **cores,
    }
    shutil.rmtree(work, ignore_errors=True)
    return result
