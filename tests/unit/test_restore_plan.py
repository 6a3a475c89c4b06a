"""State assignment on restore (deploy/restore.py): a pure function from a checkpoint's
metadata and the job graph to what each subtask loads."""

from __future__ import annotations

import json

import pytest

from tests.support.snapshots import metadata_of
from tidegate.common import Encoder
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.file_system import FileSink
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.deploy.restore import IncompatibleCheckpointError, plan_restore
from tidegate.graph.job_graph import build_job_graph
from tidegate.state.snapshot_format import write_state_file


def _graph(tmp_path, parallelism: int, max_parallelism: int | None = None):
    env = StreamExecutionEnvironment.get_execution_environment()
    if max_parallelism:
        env.set_max_parallelism(max_parallelism)
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    env.from_source(NumberSequenceSource(1, 10), None, "n").uid("src").sink_to(sink).uid("sink")
    return build_job_graph(env._stream_graph, "job", parallelism, env._max_parallelism or None)


def _checkpoint(tmp_path, sink_states: list[list], max_parallelism: int = 128) -> str:
    chk = tmp_path / "chk-5"
    chk.mkdir()
    subtasks = {}
    for i, entries in enumerate(sink_states):
        name = f"sink-{i}.state"
        with open(chk / name, "wb") as f:
            index = write_state_file(f, None, {"__committables__": ("split", entries)})
        subtasks[str(i)] = {"file": name, "index": index.to_json()}
    metadata = metadata_of(
        checkpoint_id=5,
        max_parallelism=max_parallelism,
        operators={"sink": {"name": "sink", "parallelism": len(sink_states), "subtasks": subtasks}},
    )
    (chk / "_metadata").write_text(json.dumps(metadata.to_json()))
    return str(chk), metadata


def test_at_the_same_parallelism_every_subtask_gets_its_own_operator_state_back(tmp_path):
    # Subtask 0 had nothing to commit, subtask 1 one file: redistributing would hand subtask 1's
    # committable to subtask 0, while subtask 1's recovery deletes that very file.
    directory, metadata = _checkpoint(tmp_path, [[], [(5, "file-of-subtask-1")]])
    graph = _graph(tmp_path, 2)
    plan, _max_p = plan_restore(graph, metadata, directory)
    sink_vertex = graph.operator("sink")[0].vertex_id
    assert plan[(sink_vertex, 0)]["sink"].operator_state["__committables__"][1] == []
    assert plan[(sink_vertex, 1)]["sink"].operator_state["__committables__"][1] == [
        (5, "file-of-subtask-1")
    ]


def test_a_restore_runs_with_the_snapshots_max_parallelism_when_the_job_sets_none(tmp_path):
    directory, metadata = _checkpoint(tmp_path, [[], []], max_parallelism=1024)
    _plan, max_p = plan_restore(_graph(tmp_path, 2), metadata, directory)
    assert max_p == 1024


def test_a_restore_refuses_an_explicitly_different_max_parallelism(tmp_path):
    directory, metadata = _checkpoint(tmp_path, [[], []], max_parallelism=1024)
    with pytest.raises(ValueError, match="max parallelism"):
        plan_restore(_graph(tmp_path, 2, max_parallelism=256), metadata, directory)


def test_at_the_same_parallelism_union_state_still_goes_whole_to_every_subtask(tmp_path):
    chk = tmp_path / "chk-5"
    chk.mkdir()
    subtasks = {}
    for i in range(2):
        with open(chk / f"s{i}.state", "wb") as f:
            index = write_state_file(
                f, None, {"all": ("union", [i]), "own": ("split", [] if i == 0 else [9])}
            )
        subtasks[str(i)] = {"file": f"s{i}.state", "index": index.to_json()}
    metadata = metadata_of(
        checkpoint_id=5,
        max_parallelism=128,
        operators={"sink": {"name": "s", "parallelism": 2, "subtasks": subtasks}},
    )
    graph = _graph(tmp_path, 2)
    plan, _ = plan_restore(graph, metadata, str(chk))
    vertex = graph.operator("sink")[0].vertex_id
    states = [plan[(vertex, i)]["sink"].operator_state for i in range(2)]
    assert [s["all"][1] for s in states] == [[0, 1], [0, 1]]
    assert [s["own"][1] for s in states] == [[], [9]]


def _two_subtask_checkpoint(tmp_path, max_parallelism: int = 128):
    chk = tmp_path / "chk-5"
    chk.mkdir()
    subtasks = {}
    for i, own in enumerate([["a0", "a1", "a2"], ["b0", "b1"]]):
        with open(chk / f"s{i}.state", "wb") as f:
            index = write_state_file(f, None, {"own": ("split", own), "all": ("union", [i])})
        subtasks[str(i)] = {"file": f"s{i}.state", "index": index.to_json()}
    metadata = metadata_of(
        checkpoint_id=5,
        max_parallelism=max_parallelism,
        operators={"sink": {"name": "s", "parallelism": 2, "subtasks": subtasks}},
    )
    return str(chk), metadata


def test_rescaling_two_to_three_splits_list_state_as_the_design_example_says(tmp_path):
    directory, metadata = _two_subtask_checkpoint(tmp_path)
    graph = _graph(tmp_path, 3)
    plan, _ = plan_restore(graph, metadata, directory)
    vertex = graph.operator("sink")[0].vertex_id
    states = [plan[(vertex, i)]["sink"].operator_state for i in range(3)]
    assert [s["own"][1] for s in states] == [["a0", "a1"], ["a2", "b0"], ["b1"]]
    assert [s["all"][1] for s in states] == [[0, 1]] * 3


def test_a_restore_refuses_one_operator_with_a_parallelism_above_the_max_naming_it(tmp_path):
    from tidegate.deploy.restore import IncompatibleCheckpointError, MaxParallelismError

    directory, metadata = _two_subtask_checkpoint(tmp_path, max_parallelism=13)
    env = StreamExecutionEnvironment.get_execution_environment()
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    src = env.from_source(NumberSequenceSource(1, 10), None, "n").uid("src")
    src.map(lambda v: v).name("wide").set_parallelism(14).sink_to(sink).uid("sink")
    graph = build_job_graph(env._stream_graph, "job", 2, None)
    with pytest.raises(MaxParallelismError, match="'wide' has parallelism 14") as err:
        plan_restore(graph, metadata, directory)
    assert isinstance(err.value, IncompatibleCheckpointError)  # a clean job failure
    assert "at most 13" in str(err.value)


@pytest.mark.parametrize("kind", [None, "changelog"])
def test_a_handle_that_is_not_a_canonical_state_file_is_refused_with_what_to_do(tmp_path, kind):
    directory, metadata = _checkpoint(tmp_path, [[], []])
    foreign = {"file": "sink-1.bin", **({"type": kind} if kind else {})}
    document = metadata.to_json()
    document["operators"]["sink"]["subtasks"]["1"] = foreign
    metadata = metadata_of(**{k: v for k, v in document.items() if k not in ("format", "version")})
    with pytest.raises(IncompatibleCheckpointError) as e:
        plan_restore(_graph(tmp_path, 2), metadata, directory)
    message = str(e.value)
    assert "'sink' subtask 1 (sink-1.bin)" in message
    assert (f"type {kind!r}" if kind else "without an index") in message
    assert "take a savepoint" in message
