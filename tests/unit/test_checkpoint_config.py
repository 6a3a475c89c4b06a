"""CheckpointConfig: PyFlink's setters and getters (milliseconds), their validation, and the
CheckpointSettings the JobMaster receives."""

from __future__ import annotations

import os

import pytest

from tidegate.checkpoint.options import CheckpointOptions
from tidegate.common.time import Duration
from tidegate.datastream import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointRetention,
    FileSystemCheckpointStorage,
    StreamExecutionEnvironment,
)
from tidegate.datastream.checkpoint_config import ExternalizedCheckpointCleanup
from tidegate.deploy.job_spec import CheckpointRetention, CheckpointSettings


@pytest.fixture
def config() -> CheckpointConfig:
    return CheckpointConfig()


# defaults -----------------------------------------------------------------------------------
def test_a_new_config_has_checkpointing_disabled_and_flinks_defaults(config):
    assert not config.is_checkpointing_enabled()
    assert config.get_checkpoint_interval() == -1
    assert config.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
    assert config.get_checkpoint_timeout() == 600_000
    assert config.get_min_pause_between_checkpoints() == 0
    assert config.get_max_concurrent_checkpoints() == 1
    assert config.get_tolerable_checkpoint_failure_number() == 0
    assert config.get_num_retained_checkpoints() == 1
    assert config.get_checkpoint_storage() is None
    assert (
        config.get_externalized_checkpoint_retention()
        is ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
    )
    assert not config.is_externalized_checkpoints_enabled()
    assert config.settings == CheckpointSettings()


# setters and getters ------------------------------------------------------------------------
def test_set_checkpoint_interval_enables_checkpointing(config):
    assert config.set_checkpoint_interval(250) is config
    assert config.is_checkpointing_enabled()
    assert config.get_checkpoint_interval() == 250
    assert config.settings.interval_ms == 250


@pytest.mark.parametrize("mode", list(CheckpointingMode))
def test_checkpointing_mode_round_trips(config, mode):
    assert config.set_checkpointing_mode(mode) is config
    assert config.get_checkpointing_mode() is mode
    assert config.settings.exactly_once is (mode is CheckpointingMode.EXACTLY_ONCE)


@pytest.mark.parametrize(
    ("setter", "getter", "value", "field"),
    [
        ("set_checkpoint_timeout", "get_checkpoint_timeout", 30_000, "timeout_ms"),
        (
            "set_min_pause_between_checkpoints",
            "get_min_pause_between_checkpoints",
            500,
            "min_pause_ms",
        ),
        (
            "set_min_pause_between_checkpoints",
            "get_min_pause_between_checkpoints",
            0,
            "min_pause_ms",
        ),
        ("set_max_concurrent_checkpoints", "get_max_concurrent_checkpoints", 3, "max_concurrent"),
        (
            "set_tolerable_checkpoint_failure_number",
            "get_tolerable_checkpoint_failure_number",
            5,
            "tolerable_failures",
        ),
        (
            "set_tolerable_checkpoint_failure_number",
            "get_tolerable_checkpoint_failure_number",
            0,
            "tolerable_failures",
        ),
        ("set_num_retained_checkpoints", "get_num_retained_checkpoints", 4, "max_retained"),
    ],
)
def test_each_setter_is_read_back_by_its_getter_and_reaches_the_settings(
    config, setter, getter, value, field
):
    assert getattr(config, setter)(value) is config
    assert getattr(config, getter)() == value
    assert getattr(config.settings, field) == value


def test_setters_chain_and_leave_the_other_settings_alone(config):
    (
        config.set_checkpoint_interval(100)
        .set_checkpoint_timeout(2_000)
        .set_max_concurrent_checkpoints(2)
        .set_checkpointing_mode(CheckpointingMode.AT_LEAST_ONCE)
    )
    assert config.settings == CheckpointSettings(
        interval_ms=100, exactly_once=False, timeout_ms=2_000, max_concurrent=2
    )


# validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("setter", "bad"),
    [
        ("set_checkpoint_interval", 9),
        ("set_checkpoint_interval", 0),
        ("set_checkpoint_interval", -1),
        ("set_checkpoint_timeout", 0),
        ("set_checkpoint_timeout", -5),
        ("set_min_pause_between_checkpoints", -1),
        ("set_max_concurrent_checkpoints", 0),
        ("set_tolerable_checkpoint_failure_number", -1),
        ("set_num_retained_checkpoints", 0),
    ],
)
def test_out_of_range_values_are_rejected_with_the_setting_named(config, setter, bad):
    before = config.settings
    with pytest.raises(ValueError, match=str(bad)):
        getattr(config, setter)(bad)
    assert config.settings == before


def test_the_smallest_interval_is_10_ms_as_in_flink(config):
    config.set_checkpoint_interval(10)
    assert config.get_checkpoint_interval() == 10


@pytest.mark.parametrize("bad", ["EXACTLY_ONCE", 0, None, True])
def test_a_checkpointing_mode_that_is_not_a_checkpointing_mode_is_rejected(config, bad):
    # Silently turning a typo into AT_LEAST_ONCE would weaken the guarantee without a word.
    with pytest.raises((TypeError, ValueError)):
        config.set_checkpointing_mode(bad)
    assert config.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE


def test_an_unknown_retention_is_rejected(config):
    with pytest.raises(ValueError):
        config.set_externalized_checkpoint_retention("KEEP_FOREVER")


def test_an_empty_checkpoint_storage_path_is_rejected(config):
    with pytest.raises(ValueError):
        config.set_checkpoint_storage_dir("")


# storage ------------------------------------------------------------------------------------
def test_a_relative_storage_dir_becomes_absolute_in_the_settings(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config.set_checkpoint_storage_dir("chk") is config
    expected = os.path.join(str(tmp_path), "chk")
    assert config.get_checkpoint_storage() == FileSystemCheckpointStorage(expected)
    assert config.get_checkpoint_storage().checkpoint_path == expected
    assert config.settings.storage == expected
    assert os.path.isabs(config.settings.storage)


def test_an_absolute_storage_dir_is_kept(config, tmp_path):
    config.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    assert config.settings.storage == str(tmp_path / "chk")


@pytest.mark.parametrize("uri", ["s3://bucket/checkpoints", "file:///tmp/chk", "hdfs://nn/chk"])
def test_a_storage_uri_is_kept_as_given(config, uri):
    config.set_checkpoint_storage(FileSystemCheckpointStorage(uri))
    assert config.settings.storage == uri


def test_the_storage_object_is_returned_as_set(config, tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path))
    config.set_checkpoint_storage(storage)
    assert config.get_checkpoint_storage() is storage


def test_the_environment_uses_a_temporary_directory_when_no_storage_is_set(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).print()
    spec = env._job_spec("x")
    assert spec.checkpoint.storage is not None
    assert os.path.isabs(spec.checkpoint.storage)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    assert env._job_spec("x").checkpoint.storage == str(tmp_path)


# retention ----------------------------------------------------------------------------------
def test_pyflinks_and_flink2s_retention_names_are_the_same_enum():
    assert ExternalizedCheckpointCleanup is ExternalizedCheckpointRetention is CheckpointRetention
    assert {m.name for m in ExternalizedCheckpointCleanup} == {
        "NO_EXTERNALIZED_CHECKPOINTS",
        "DELETE_ON_CANCELLATION",
        "RETAIN_ON_CANCELLATION",
    }


@pytest.mark.parametrize(
    ("retention", "enabled"),
    [
        (ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION, True),
        (ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION, True),
        (ExternalizedCheckpointCleanup.NO_EXTERNALIZED_CHECKPOINTS, False),
    ],
)
@pytest.mark.parametrize(
    "setter",
    [
        "set_externalized_checkpoint_retention",
        "set_externalized_checkpoint_cleanup",
        "enable_externalized_checkpoints",
    ],
)
def test_every_retention_setter_maps_onto_the_settings(config, setter, retention, enabled):
    assert getattr(config, setter)(retention) is config
    assert config.get_externalized_checkpoint_retention() is retention
    assert config.get_externalized_checkpoint_cleanup() is retention
    assert config.is_externalized_checkpoints_enabled() is enabled
    assert config.settings.retention is retention


def test_a_retention_given_by_its_name_is_accepted(config):
    config.set_externalized_checkpoint_retention("RETAIN_ON_CANCELLATION")
    assert config.settings.retention is CheckpointRetention.RETAIN_ON_CANCELLATION


# the environment's shortcuts -----------------------------------------------------------------
def test_enable_checkpointing_sets_interval_and_mode_on_the_environments_config():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_checkpoint_interval() == -1
    env.enable_checkpointing(300, CheckpointingMode.AT_LEAST_ONCE)
    assert env.get_checkpoint_interval() == 300
    assert env.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE
    assert env.get_checkpoint_config().get_checkpoint_interval() == 300
    env.enable_checkpointing(400)
    assert env.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE  # mode kept


def test_enable_checkpointing_validates_the_interval():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError):
        env.enable_checkpointing(5)
    assert env.get_checkpoint_interval() == -1


def test_the_job_spec_carries_the_configured_settings(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(100, CheckpointingMode.AT_LEAST_ONCE)
    cfg = env.get_checkpoint_config()
    cfg.set_checkpoint_storage_dir(str(tmp_path))
    cfg.set_num_retained_checkpoints(3)
    cfg.set_externalized_checkpoint_retention(CheckpointRetention.RETAIN_ON_CANCELLATION)
    env.from_collection([1, 2]).print()
    spec = env._job_spec("job")
    assert spec.checkpoint == CheckpointSettings(
        interval_ms=100,
        exactly_once=False,
        max_retained=3,
        storage=str(tmp_path),
        retention=CheckpointRetention.RETAIN_ON_CANCELLATION,
    )


def test_unaligned_checkpoints_are_off_by_default_and_map_onto_checkpoint_options(config):
    assert not config.is_unaligned_checkpoints_enabled()
    assert config.get_aligned_checkpoint_timeout() == Duration(0)
    assert config.settings.options == CheckpointOptions()
    config.enable_unaligned_checkpoints()
    assert config.is_unaligned_checkpoints_enabled()
    assert config.settings.options == CheckpointOptions(unaligned=True)
    config.set_aligned_checkpoint_timeout(Duration.of_millis(250))
    assert config.get_aligned_checkpoint_timeout() == Duration(250)
    assert config.settings.options == CheckpointOptions(aligned_timeout_ms=250)
    config.set_alignment_timeout(40)  # PyFlink's older name, in ms
    assert config.settings.options == CheckpointOptions(aligned_timeout_ms=40)
    config.disable_unaligned_checkpoints()
    assert config.settings.options == CheckpointOptions()  # the timeout alone does nothing


def test_unaligned_checkpoints_refuse_at_least_once_and_concurrent_checkpoints(config):
    config.enable_unaligned_checkpoints()
    config.set_checkpointing_mode(CheckpointingMode.AT_LEAST_ONCE)
    with pytest.raises(ValueError, match=r"need CheckpointingMode\.EXACTLY_ONCE"):
        _ = config.settings
    config.set_checkpointing_mode(CheckpointingMode.EXACTLY_ONCE)
    config.set_max_concurrent_checkpoints(2)
    with pytest.raises(ValueError, match="one at a time"):
        _ = config.settings
    with pytest.raises(ValueError, match="aligned checkpoint timeout must be >= 0"):
        config.set_aligned_checkpoint_timeout(-1)
