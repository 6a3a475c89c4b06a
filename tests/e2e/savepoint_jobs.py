"""The keyed running count of jobs.py, shaped for the savepoint tests: a configurable uid for
the counting operator, an operator that shows whether `finish()` ran (drain), a function that
declines checkpoints while a flag file exists, and helpers to wait on a running job and to
fingerprint a snapshot directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.e2e.jobs import NUM_KEYS, InjectedFailure, RunningCount
from tidegate.common import Configuration, Encoder, RestartStrategies
from tidegate.datastream import CheckpointedFunction, MapFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
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
    conf = Configuration().set_string("execution.runner", runner)
    conf.add_all(config or {})
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(checkpoints))
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1_000)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if decline_flag is not None:
        ds = ds.map(DeclineWhileFlagged(str(decline_flag))).uid("decline")
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(RunningCount())
    if count_uid is not None:
        ds = ds.uid(count_uid)
    if finish_probe:
        ds = ds._add("finish-probe", "Finish probe", FinishProbe).uid("finish-probe")
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    ds.sink_to(sink).uid("sink")
    return env


def split_probe_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the FinishProbe's lines, the running count's lines)."""
    finished = [line for line in lines if line.startswith(f"{FINISHED},")]
    return finished, [line for line in lines if not line.startswith(f"{FINISHED},")]


def wait_until(client, condition, what: str) -> None:
    """Wait until `condition()` holds while the job is still running."""
    jm = client.jobmaster
    while not condition():
        assert not jm.done.is_set(), f"the job ended ({jm.status.name}) before {what}"
        time.sleep(0.02)


def running_with_checkpoints(client, count: int = 1) -> None:
    jm = client.jobmaster
    target = jm.stats.completed_checkpoints + count
    wait_until(
        client,
        lambda: jm.status.name == "RUNNING" and jm.stats.completed_checkpoints >= target,
        f"{count} more completed checkpoint(s)",
    )


def fingerprint(directory: str | Path) -> dict[str, bytes]:
    """Every file under `directory` (relative name -> bytes)."""
    root = Path(directory)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
