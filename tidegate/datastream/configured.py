"""Flink's configuration keys for what the environment's methods set (parallelism,
checkpointing, restart strategy), applied when the environment is created with a
Configuration or `configure(...)` is called, as Flink does: a method called afterwards
overrides the key. Keys tidegate reads when the job starts (runner, state backend, ...) are
read there; docs/configuration.md lists every key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.common.configuration import Configuration
from tidegate.common.restart_strategy import RestartStrategies
from tidegate.datastream.checkpointing_mode import CheckpointingMode

if TYPE_CHECKING:
    from tidegate.datastream.stream_execution_environment import StreamExecutionEnvironment

PARALLELISM = "parallelism.default"
MAX_PARALLELISM = "pipeline.max-parallelism"
CHECKPOINT_INTERVAL = "execution.checkpointing.interval"
CHECKPOINT_MODE = "execution.checkpointing.mode"
CHECKPOINT_TIMEOUT = "execution.checkpointing.timeout"
MIN_PAUSE = "execution.checkpointing.min-pause"
MAX_CONCURRENT = "execution.checkpointing.max-concurrent-checkpoints"
TOLERABLE_FAILURES = "execution.checkpointing.tolerable-failed-checkpoints"
CHECKPOINT_DIRS = ("execution.checkpointing.dir", "state.checkpoints.dir")
RESTART_STRATEGY = "restart-strategy.type"
FIXED_DELAY_ATTEMPTS = "restart-strategy.fixed-delay.attempts"
FIXED_DELAY_DELAY = "restart-strategy.fixed-delay.delay"


def apply_configuration(env: StreamExecutionEnvironment, cfg: Configuration) -> None:
    """Set what `cfg` configures of `env` (only the keys it has)."""
    if cfg.contains_key(PARALLELISM):
        env.set_parallelism(cfg.get_integer(PARALLELISM, 1))
    if cfg.contains_key(MAX_PARALLELISM):
        env.set_max_parallelism(cfg.get_integer(MAX_PARALLELISM, 128))
    checkpoints = env.get_checkpoint_config()
    if cfg.contains_key(CHECKPOINT_INTERVAL):
        checkpoints.set_checkpoint_interval(cfg.get_duration_ms(CHECKPOINT_INTERVAL, 0))
    if cfg.contains_key(CHECKPOINT_MODE):
        mode = (cfg.get_string(CHECKPOINT_MODE) or "").strip().upper()
        if mode not in CheckpointingMode.__members__:
            raise ValueError(
                f"configuration {CHECKPOINT_MODE!r} must be EXACTLY_ONCE or AT_LEAST_ONCE, "
                f"got {cfg.get_string(CHECKPOINT_MODE)!r}"
            )
        checkpoints.set_checkpointing_mode(CheckpointingMode[mode])
    if cfg.contains_key(CHECKPOINT_TIMEOUT):
        checkpoints.set_checkpoint_timeout(cfg.get_duration_ms(CHECKPOINT_TIMEOUT, 0))
    if cfg.contains_key(MIN_PAUSE):
        checkpoints.set_min_pause_between_checkpoints(cfg.get_duration_ms(MIN_PAUSE, 0))
    if cfg.contains_key(MAX_CONCURRENT):
        checkpoints.set_max_concurrent_checkpoints(cfg.get_integer(MAX_CONCURRENT, 1))
    if cfg.contains_key(TOLERABLE_FAILURES):
        checkpoints.set_tolerable_checkpoint_failure_number(cfg.get_integer(TOLERABLE_FAILURES, 0))
    for key in CHECKPOINT_DIRS:
        if cfg.contains_key(key):
            checkpoints.set_checkpoint_storage_dir(cfg.get_string(key) or "")
            break
    if cfg.contains_key(RESTART_STRATEGY):
        env.set_restart_strategy(_restart_strategy(cfg))


def _restart_strategy(cfg: Configuration):
    kind = (cfg.get_string(RESTART_STRATEGY) or "").strip().lower()
    match kind:
        case "none" | "off" | "disable":
            return RestartStrategies.no_restart()
        case "fixed-delay" | "fixeddelay":
            attempts = cfg.get_integer(FIXED_DELAY_ATTEMPTS, 1)
            return RestartStrategies.fixed_delay_restart(
                attempts, cfg.get_duration_ms(FIXED_DELAY_DELAY, 1000)
            )
        case "exponential-delay" | "exponentialdelay":
            return RestartStrategies.exponential_delay_restart()
    raise ValueError(
        f"configuration {RESTART_STRATEGY!r} must be none, fixed-delay or exponential-delay, "
        f"got {cfg.get_string(RESTART_STRATEGY)!r}"
    )
