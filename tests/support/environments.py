"""Building the StreamExecutionEnvironment of a test job: the runner, checkpointing, checkpoint
storage, restarts and a restore path in one call, and the exactly-once file sink whose output
tests.support.output reads."""

from __future__ import annotations

from pathlib import Path

from tidegate.common import Configuration, Encoder, RestartStrategies
from tidegate.datastream import CheckpointingMode, StreamExecutionEnvironment
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink


def job_environment(
    runner: str = "spark",
    checkpoints: Path | str | None = None,
    *,
    parallelism: int = 2,
    interval_ms: int | None = 200,
    mode: CheckpointingMode | None = None,
    restarts: int | None = 10,
    restore_path: str | None = None,
    config: dict[str, str] | None = None,
    max_parallelism: int | None = None,
    watermark_interval_ms: int | None = None,
) -> StreamExecutionEnvironment:
    """An environment on `runner` ("spark" or "local") with `parallelism`.

    - `checkpoints`: the checkpoint storage directory (None: not set);
    - `interval_ms`: periodic checkpoints in `mode` (default exactly-once); None: none;
    - `restarts`: a fixed-delay restart strategy of that many restarts without delay; None:
      the environment's default;
    - `restore_path`: `execution.state-recovery.path` (a checkpoint, savepoint or job dir);
    - `config`: more configuration entries, set before the environment is created."""
    conf = Configuration().set_string("execution.runner", runner)
    conf.add_all(config or {})
    if restore_path:
        conf.set_string("execution.state-recovery.path", restore_path)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    if max_parallelism is not None:
        env.set_max_parallelism(max_parallelism)
    if watermark_interval_ms is not None:
        env.get_config().set_auto_watermark_interval(watermark_interval_ms)
    if interval_ms is not None:
        env.enable_checkpointing(interval_ms, mode)
    if checkpoints is not None:
        env.get_checkpoint_config().set_checkpoint_storage_dir(str(checkpoints))
    if restarts is not None:
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    return env


def file_sink(out: Path | str) -> FileSink:
    """A row-format FileSink of strings writing every part file directly into `out` (no date
    buckets), committed exactly once with the checkpoints; read with output.committed_lines."""
    return (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
