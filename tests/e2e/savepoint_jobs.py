"""The keyed running count of jobs.py, shaped for the savepoint tests: a configurable uid for
the counting operator, an operator that shows whether `finish()` ran (drain), and a function
that declines checkpoints while a flag file exists; and a cancelled run whose checkpoints are
retained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.jobs import InjectedFailure, RunningCount
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tests.support.references import NUM_KEYS
from tests.support.waiting import resolved, wait_for_checkpoints
from tidegate.checkpoint.storage import resolve_checkpoint_path
from tidegate.common import JobStatus
from tidegate.common.job_client import JobExecutionException
from tidegate.datastream import (
    CheckpointedFunction,
    ExternalizedCheckpointRetention,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.runtime.operators import StreamOperator

FINISHED = "finished"


class FinishProbe(StreamOperator):
    """Passes records on; at the end of input (a bounded source's end, or a drain) its
    `finish()` emits one `finished,<subtask>` line, so the output shows whether it ran."""

    def process_batch(self, records: list) -> None:
        self.emit(records)

    def finish(self) -> None:
        self.emit([f"{FINISHED},{self.ctx.subtask_index}"])


class DeclineWhileFlagged(MapFunction, CheckpointedFunction):
    """Its snapshot fails (so every checkpoint and savepoint is declined) while `flag` exists."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def initialize_state(self, context) -> None:
        pass

    def snapshot_state(self, context) -> None:
        if os.path.exists(self.flag):
            raise InjectedFailure(f"snapshots are refused while {self.flag} exists")

    def map(self, value):
        return value


def savepoint_job(
    out: Path,
    checkpoints: Path,
    *,
    runner: str,
    n: int,
    rate: float | None = 5_000,
    interval_ms: int = 200,
    restarts: int = 10,
    count_uid: str | None = "count",
    finish_probe: bool = False,
    decline_flag: Path | None = None,
    config: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    """numbers -> [decline] -> key_by -> running count (uid `count_uid`; None: generated)
    -> [finish probe] -> FileSink, with exactly-once checkpoints every `interval_ms`."""
    env = job_environment(
        runner, checkpoints, interval_ms=interval_ms, restarts=restarts, config=config
    )
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1_000)
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if decline_flag is not None:
        ds = ds.map(DeclineWhileFlagged(str(decline_flag))).uid("decline")
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount())
    if count_uid is not None:
        ds = ds.uid(count_uid)
    if finish_probe:
        ds = ds._add("finish-probe", "Finish probe", FinishProbe).uid("finish-probe")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def split_probe_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the FinishProbe's lines, the running count's lines)."""
    finished = [line for line in lines if line.startswith(f"{FINISHED},")]
    return finished, [line for line in lines if not line.startswith(f"{FINISHED},")]


def retained_checkpoint(tmp_path: Path, runner: str, n: int) -> tuple[str, str, list[str]]:
    """Run savepoint_job (checkpoints retained on cancellation) until two checkpoints completed,
    cancel it; returns its job directory, its latest checkpoint (a chk-<n> directory) and the
    output it committed."""
    env = savepoint_job(tmp_path / "out1", tmp_path / "chk", runner=runner, n=n)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    client = env.execute_async("to be cancelled")
    wait_for_checkpoints(client, 2)
    resolved(client.cancel(), "the job to be cancelled", timeout=120)
    assert client.get_job_status().result() is JobStatus.CANCELED
    with pytest.raises(JobExecutionException, match="cancelled"):
        resolved(client.get_job_execution_result(), "the job to finish")
    job_dir = str(tmp_path / "chk" / client.get_job_id())
    return job_dir, resolve_checkpoint_path(job_dir), committed_lines(tmp_path / "out1")
