"""Flink's configuration keys for the environment's settings (datastream/configured.py): applied
at creation and by `configure`, overridden by methods called later, refused with the key's name
when malformed."""

from __future__ import annotations

import pytest

from tidegate.common import Configuration
from tidegate.common.restart_strategy import (
    FixedDelayRestartStrategyConfiguration,
    NoRestartStrategyConfiguration,
)
from tidegate.datastream import CheckpointingMode, StreamExecutionEnvironment


def test_flinks_keys_set_parallelism_checkpointing_and_restarts():
    conf = Configuration()
    for key, value in {
        "parallelism.default": "3",
        "pipeline.max-parallelism": "64",
        "execution.checkpointing.interval": "10 s",
        "execution.checkpointing.mode": "at_least_once",
        "execution.checkpointing.timeout": "2 min",
        "execution.checkpointing.min-pause": "500",
        "execution.checkpointing.max-concurrent-checkpoints": "2",
        "execution.checkpointing.tolerable-failed-checkpoints": "4",
        "state.checkpoints.dir": "/tmp/tidegate-test-chk",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "5",
        "restart-strategy.fixed-delay.delay": "2 s",
    }.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    checkpoints = env.get_checkpoint_config()
    assert (env.get_parallelism(), env.get_max_parallelism()) == (3, 64)
    assert env.get_checkpoint_interval() == 10_000
    assert env.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE
    assert checkpoints.get_checkpoint_timeout() == 120_000
    assert checkpoints.get_min_pause_between_checkpoints() == 500
    assert checkpoints.get_max_concurrent_checkpoints() == 2
    assert checkpoints.settings.tolerable_failures == 4
    assert checkpoints.settings.storage == "/tmp/tidegate-test-chk"
    strategy = env.get_restart_strategy()
    assert isinstance(strategy, FixedDelayRestartStrategyConfiguration)
    assert strategy.describe() == FixedDelayRestartStrategyConfiguration(5, 2000).describe()


def test_a_method_called_after_the_configuration_wins_and_configure_applies_again():
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("parallelism.default", "3")
    )
    env.set_parallelism(2)
    assert env.get_parallelism() == 2
    env.configure(Configuration().set_string("restart-strategy.type", "none"))
    assert isinstance(env.get_restart_strategy(), NoRestartStrategyConfiguration)
    assert env.get_parallelism() == 2  # configure applies only the keys it is given


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("execution.checkpointing.interval", "soon", "'execution.checkpointing.interval' must"),
        ("execution.checkpointing.mode", "twice", "EXACTLY_ONCE or AT_LEAST_ONCE"),
        ("restart-strategy.type", "sometimes", "none, fixed-delay or exponential-delay"),
        ("parallelism.default", "many", "'parallelism.default' must be an integer"),
    ],
)
def test_a_malformed_key_is_refused_naming_it(key, value, says):
    with pytest.raises(ValueError, match=says):
        StreamExecutionEnvironment.get_execution_environment(Configuration().set_string(key, value))
