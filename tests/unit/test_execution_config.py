"""`env.get_config()` is PyFlink's ExecutionConfig: a view of the environment whose settings
are the Flink configuration keys, whichever way they are set."""

from __future__ import annotations

import pickle

import pytest

from tidegate.common import Configuration, ExecutionConfig
from tidegate.common.execution_config import job_parameters
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.number_seq import NumberSequenceSource


def _env(**config: str) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment(Configuration().add_all(config))


def test_get_config_is_an_execution_config_over_the_environment():
    env = _env()
    config = env.get_config()
    assert isinstance(config, ExecutionConfig)
    assert config.set_parallelism(3) is config and env.get_parallelism() == 3
    env.set_parallelism(2)
    assert config.get_parallelism() == 2
    config.set_max_parallelism(64)
    assert (env.get_max_parallelism(), config.get_max_parallelism()) == (64, 64)
    ds = env.from_collection([1])
    assert ds.get_execution_environment() is env
    assert ds.get_execution_config().get_parallelism() == 2


def test_global_job_parameters_round_trip_as_strings_and_through_the_configuration_key():
    env = _env()
    config = env.get_config()
    assert config.get_global_job_parameters() == {}
    config.set_global_job_parameters({"threshold": 5, "path": "s3://b/k:v, x", "quote": "it's"})
    expected = {"threshold": "5", "path": "s3://b/k:v, x", "quote": "it's"}
    assert config.get_global_job_parameters() == expected
    env2 = _env(**{"pipeline.global-job-parameters": "a:1, b:'x,y:z'"})
    assert env2.get_config().get_global_job_parameters() == {"a": "1", "b": "x,y:z"}
    with pytest.raises(ValueError, match="not key:value"):
        job_parameters(Configuration().set_string("pipeline.global-job-parameters", "a"))


def test_the_job_graph_carries_the_parameters_to_the_functions():
    env = _env()
    env.get_config().set_global_job_parameters({"k": "v"})
    env.from_source(NumberSequenceSource(0, 1), None, "n").print()
    spec = env._job_spec("params")
    assert spec.graph.job_parameters == {"k": "v"}
    assert pickle.loads(pickle.dumps(spec.graph.job_parameters)) == {"k": "v"}


def test_without_auto_generated_uids_an_operator_without_uid_is_refused_by_name():
    env = _env()
    assert env.get_config().has_auto_generated_uids_enabled()
    env.get_config().disable_auto_generated_uids()
    assert env.configure(Configuration()).get_config().has_auto_generated_uids_enabled() is False
    ds = env.from_source(NumberSequenceSource(0, 1), None, "numbers").uid("numbers")
    ds.map(str).name("Format").print()
    with pytest.raises(ValueError, match=r"no uid: \['Format', 'Sink: Print to Std. Out'\]"):
        env._job_spec("uids")
    env2 = _env(**{"pipeline.auto-generate-uids": "false"})
    ds = env2.from_source(NumberSequenceSource(0, 1), None, "numbers").uid("numbers")
    ds.map(str).uid("format").print().uid("print")
    assert env2._job_spec("uids").graph.vertices
    env2.get_config().enable_auto_generated_uids()
    assert env2.get_config().has_auto_generated_uids_enabled()
