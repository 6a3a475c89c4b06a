"""Every PyFlink import path of the API works with `pyflink` replaced by `tidegate`, so a
PyFlink DataStream program ports by changing its imports."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

FUNCTION_NAMES = [
    "KeyedProcessFunction",
    "ProcessFunction",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "ReduceFunction",
    "AggregateFunction",
    "KeySelector",
    "RuntimeContext",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "CoMapFunction",
    "CoFlatMapFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
]

PYFLINK_PATHS = {
    "tidegate.datastream": [
        "StreamExecutionEnvironment",
        "CheckpointingMode",
        *FUNCTION_NAMES,
        "BroadcastStream",
        "BroadcastConnectedStream",
        "ConnectedStreams",
        "AsyncDataStream",
        "AsyncFunction",
        "AsyncRetryStrategy",
    ],
    "tidegate.datastream.async_data_stream": ["AsyncDataStream"],
    "tidegate.datastream.async_retry_strategies": [
        "NoRetryStrategy",
        "FixedDelayRetryStrategy",
        "ExponentialBackoffDelayRetryStrategy",
        "RetryPredicate",
        "NO_RETRY_STRATEGY",
    ],
    "tidegate.datastream.async_retry_predicates": [
        "empty_result_predicate",
        "has_exception_predicate",
        "exception_type_predicate",
    ],
    "tidegate.datastream.data_stream": [
        "DataStream",
        "KeyedStream",
        "BroadcastStream",
        "BroadcastConnectedStream",
        "ConnectedStreams",
    ],
    "tidegate.datastream.stream_execution_environment": ["StreamExecutionEnvironment"],
    "tidegate.datastream.functions": [
        *FUNCTION_NAMES,
        "CheckpointedFunction",
        "CheckpointListener",
        "BaseBroadcastProcessFunction",
        "AsyncFunction",
        "AsyncRetryStrategy",
        "AsyncRetryPredicate",
    ],
    "tidegate.datastream.state": [
        "ValueStateDescriptor",
        "ListStateDescriptor",
        "MapStateDescriptor",
        "ReducingStateDescriptor",
        "AggregatingStateDescriptor",
        "ValueState",
        "ListState",
        "MapState",
        "ReducingState",
        "AggregatingState",
        "BroadcastState",
        "ReadOnlyBroadcastState",
        "StateTtlConfig",
    ],
    "tidegate.datastream.checkpoint_config": ["CheckpointConfig", "ExternalizedCheckpointCleanup"],
    "tidegate.datastream.checkpointing_mode": ["CheckpointingMode"],
    "tidegate.datastream.state_backend": ["EmbeddedRocksDBStateBackend", "HashMapStateBackend"],
    "tidegate.datastream.checkpoint_storage": ["FileSystemCheckpointStorage"],
    "tidegate.datastream.connectors.file_system": [
        "FileSink",
        "FileSource",
        "StreamFormat",
        "OutputFileConfig",
        "RollingPolicy",
        "BucketAssigner",
    ],
    "tidegate.datastream.connectors.number_seq": ["NumberSequenceSource"],
    "tidegate.datastream.connectors.jdbc": [
        "JdbcSink",
        "JdbcConnectionOptions",
        "JdbcExecutionOptions",
    ],
    "tidegate.common": [
        "Types",
        "TypeInformation",
        "Row",
        "RowKind",
        "Configuration",
        "WatermarkStrategy",
        "Duration",
        "Time",
        "RestartStrategies",
        "Encoder",
        "SimpleStringSchema",
        "SerializationSchema",
        "DeserializationSchema",
        "ByteArraySchema",
        "JobStatus",
    ],
    "tidegate.common.typeinfo": ["Types", "TypeInformation", "RowTypeInfo", "TupleTypeInfo"],
    "tidegate.common.types": ["Row", "RowKind"],
    "tidegate.common.restart_strategy": ["RestartStrategies"],
    "tidegate.common.serialization": [
        "Encoder",
        "SimpleStringSchema",
        "SerializationSchema",
        "DeserializationSchema",
        "ByteArraySchema",
    ],
    "tidegate.datastream.formats.json": [
        "JsonRowDeserializationSchema",
        "JsonRowSerializationSchema",
    ],
    "tidegate.datastream.formats.csv": [
        "CsvRowDeserializationSchema",
        "CsvRowSerializationSchema",
        "CsvSchema",
        "CsvSchemaBuilder",
        "CsvReaderFormat",
    ],
    "tidegate.datastream.formats.avro": [
        "AvroRowDeserializationSchema",
        "AvroRowSerializationSchema",
    ],
    "tidegate.common.watermark_strategy": ["WatermarkStrategy"],
    "tidegate.common.job_client": ["JobClient"],
    "tidegate.common.job_status": ["JobStatus"],
    "tidegate.common.configuration": ["Configuration"],
    "tidegate.common.time": ["Duration", "Time"],
}

CASES = [(module, name) for module, names in PYFLINK_PATHS.items() for name in names]
#: PyFlink names bound to a tidegate class or function of another name
ALIASES = {"ExternalizedCheckpointCleanup": "CheckpointRetention"}  # PyFlink's older name
#: PyFlink names of instances, and their class
INSTANCES = {"NO_RETRY_STRATEGY": "NoRetryStrategy"}


@pytest.mark.parametrize(("module", "name"), CASES, ids=[f"{m}.{n}" for m, n in CASES])
def test_the_pyflink_import_path_works_with_tidegate_as_the_package(module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"from {module} import {name} fails"
    value = getattr(mod, name)
    if name in INSTANCES:
        assert type(value).__name__ == INSTANCES[name]
        assert type(value).__module__.startswith("tidegate.")
    else:  # tidegate's class or function of that name, not a placeholder
        assert value.__name__ == ALIASES.get(name, name), f"{module}.{name} is {value!r}"
        assert value.__module__.startswith("tidegate."), f"{module}.{name} is {value!r}"


@pytest.mark.parametrize("module", list(PYFLINK_PATHS))
def test_a_star_import_of_each_module_exports_its_pyflink_names(module):
    namespace: dict = {}
    exec(f"from {module} import *", namespace)
    missing = [n for n in PYFLINK_PATHS[module] if n not in namespace]
    assert not missing, f"`from {module} import *` does not bring {missing}"


def test_each_name_is_one_object_whichever_path_it_is_imported_from():
    by_name: dict[str, set[int]] = {}
    for module, name in CASES:
        obj = getattr(importlib.import_module(module), name)
        by_name.setdefault(name, set()).add(id(obj))
    aliased = {name: len(ids) for name, ids in by_name.items() if len(ids) > 1}
    assert not aliased, f"names bound to different objects on different paths: {aliased}"


def test_the_function_classes_are_classes_a_user_program_can_subclass():
    from tidegate.datastream import functions

    for name in [*FUNCTION_NAMES, "CheckpointedFunction", "CheckpointListener"]:
        assert isinstance(getattr(functions, name), type), name


def test_externalized_checkpoint_cleanup_has_pyflinks_members():
    from tidegate.datastream.checkpoint_config import ExternalizedCheckpointCleanup

    names = {m.name for m in ExternalizedCheckpointCleanup}
    assert {"DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION"} <= names


def test_checkpointing_mode_has_pyflinks_members():
    from tidegate.datastream import CheckpointingMode

    assert {m.name for m in CheckpointingMode} >= {"EXACTLY_ONCE", "AT_LEAST_ONCE"}


@pytest.mark.parametrize(
    "module", ["tidegate.runtime.slot", "tidegate.deploy.jobmaster", "tidegate.datastream"]
)
def test_a_fresh_interpreter_imports_the_module_first_without_an_import_cycle(module):
    # A module imported first, alone, is the one that exposes cycles: in this test process
    # everything is already imported, so the check runs in a fresh interpreter.
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
