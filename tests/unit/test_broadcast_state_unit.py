"""Broadcast state: the `broadcast` operator-state mode (snapshot, restore, redistribution at any
parallelism), the broadcast process operator driven batch by batch, its read-only and
read-write views, the two-input dispatch, and the job graph and API of connect/broadcast."""

from __future__ import annotations

import io

import pytest

from tests.support.snapshots import metadata_of
from tidegate.checkpoint.assignment import redistribute_broadcast_state, redistribute_operator_state
from tidegate.datastream import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.datastream.data_stream import BroadcastConnectedStream, BroadcastStream
from tidegate.datastream.state import (
    BroadcastState,
    ListStateDescriptor,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    ValueStateDescriptor,
)
from tidegate.deploy.restore import plan_restore
from tidegate.graph.job_graph import build_job_graph
from tidegate.runtime.broadcast import BroadcastProcessOperator
from tidegate.runtime.operators import OperatorRuntime, StreamOperator
from tidegate.runtime.partitioners import BroadcastPartitioner, KeyGroupStreamPartitioner
from tidegate.runtime.restore import RestoredOperatorState
from tidegate.runtime.two_input import input_dispatch
from tidegate.state.broadcast_state import ReadOnlyBroadcastStateError
from tidegate.state.operator_state import OperatorStateBackend
from tidegate.state.snapshot_format import read_index, read_operator_state, write_state_file

RULES = MapStateDescriptor("rules")
MAX_P = 128


# helpers ------------------------------------------------------------------------------------
class Collect(StreamOperator):
    """A downstream operator that keeps what it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list = []

    def process_batch(self, records: list) -> None:
        self.received.extend(records)


class Thresholds(KeyedBroadcastProcessFunction):
    """Rules (name, limit) are broadcast; events (name, value) are keyed by name and emitted
    when above the limit, counted per key."""

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        limit = ctx.get_broadcast_state(RULES).get(ctx.get_current_key())
        self.count.update((self.count.value() or 0) + 1)
        if limit is not None and value[1] > limit:
            yield (ctx.get_current_key(), value[1], self.count.value())

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(*value)
        seen = []
        ctx.apply_to_keyed_state(ValueStateDescriptor("count"), lambda k, s: seen.append(k))
        yield ("keys", value[0], sorted(seen))


def make_operator(function, descriptors=(RULES,), keyed=True, subtask=0, parallelism=1,
                  restored=None):  # fmt: skip
    op = BroadcastProcessOperator(
        function, descriptors, (lambda v: v[0]) if keyed else None, name="broadcast"
    )
    sink = Collect()
    op.outputs = [sink]
    op.initialize_state(OperatorRuntime(subtask, parallelism, MAX_P, 0), restored)
    op.open()
    return op, sink


def operator_state_round_trip(op) -> dict:
    """The operator state as a checkpoint writes and reads it (the real state file format)."""
    snapshot = op.snapshot_state(1, 0)
    buffer = io.BytesIO()
    write_state_file(buffer, None, snapshot.operator)
    buffer.seek(0)
    return read_operator_state(buffer, read_index(buffer))


# redistribution -----------------------------------------------------------------------------
def test_every_new_subtask_gets_a_full_copy_of_the_broadcast_state_when_scaling_out():
    old = [[("a", 1), ("b", 2)], [("a", 1), ("b", 2)]]
    new = redistribute_broadcast_state(old, 3)
    assert new == [[("a", 1), ("b", 2)]] * 3
    new[0].append(("c", 3))  # each subtask has its own copy
    assert new[1] == [("a", 1), ("b", 2)]


def test_new_subtask_i_takes_old_subtask_is_copy_and_beyond_the_old_parallelism_subtask_0s():
    old = [["copy of 0"], ["copy of 1"]]
    assert redistribute_broadcast_state(old, 3) == [["copy of 0"], ["copy of 1"], ["copy of 0"]]
    assert redistribute_broadcast_state(old, 1) == [["copy of 0"]]
    three = [["0"], ["1"], ["2"]]
    assert redistribute_broadcast_state(three, 2) == [["0"], ["1"]]


def test_operator_state_redistribution_copies_broadcast_state_beside_split_list_state():
    old = [
        {"rules": ("broadcast", [("r", 1)]), "offsets": ("split", [1, 2])},
        {"rules": ("broadcast", [("r", 1)]), "offsets": ("split", [3])},
    ]
    new = redistribute_operator_state(old, 3)
    assert [s["rules"] for s in new] == [("broadcast", [("r", 1)])] * 3
    assert [s["offsets"][1] for s in new] == [[1], [2], [3]]


# the state backend --------------------------------------------------------------------------
def test_broadcast_state_is_a_map_snapshotted_and_restored_as_key_value_entries():
    backend = OperatorStateBackend()
    state = backend.get_broadcast_state(RULES)
    assert isinstance(state, BroadcastState) and backend.get_broadcast_state(RULES) is state
    state.put("a", 1)
    state.put_all({"b": 2, "c": 3})
    state.remove("c")
    snapshot = backend.snapshot()
    assert snapshot == {"rules": ("broadcast", [("a", 1), ("b", 2)])}
    state.put("a", 99)  # the snapshot is a copy
    assert snapshot["rules"][1] == [("a", 1), ("b", 2)]
    restored = OperatorStateBackend()
    restored.restore(snapshot)
    again = restored.get_broadcast_state(RULES)
    assert again.items() == [("a", 1), ("b", 2)] and again["b"] == 2 and "a" in again


def test_a_name_is_either_a_broadcast_state_or_a_list_state():
    backend = OperatorStateBackend()
    backend.get_broadcast_state(MapStateDescriptor("s"))
    with pytest.raises(ValueError, match="'s' is a broadcast state"):
        backend.get_list_state(ListStateDescriptor("s"))
    other = OperatorStateBackend()
    other.get_union_list_state(ListStateDescriptor("s"))
    with pytest.raises(ValueError, match="union list state"):
        other.get_broadcast_state(MapStateDescriptor("s"))


def test_the_read_only_view_refuses_every_write_and_says_where_to_write():
    state = BroadcastState("rules", {"a": 1})
    view = state.read_only()
    assert isinstance(view, ReadOnlyBroadcastState) and view.get("a") == 1
    for write in (
        lambda: view.put("b", 2),
        lambda: view.put_all({"b": 2}),
        lambda: view.remove("a"),
        view.clear,
        lambda: view.__setitem__("b", 2),
    ):
        with pytest.raises(ReadOnlyBroadcastStateError, match="process_broadcast_element"):
            write()
    assert state.items() == [("a", 1)]
    state.put("b", 2)  # the view shows the live state
    assert view.keys() == ["a", "b"] and len(view) == 2 and not view.is_empty()


# the operator -------------------------------------------------------------------------------
def test_the_keyed_operator_reads_rules_per_key_and_applies_a_function_to_every_key():
    op, sink = make_operator(Thresholds())
    op.process_batch1([("x", 5)])  # no rule yet: counted, not emitted
    op.process_batch2([("x", 3)])
    op.process_batch1([("x", 5), ("y", 1), ("x", 2)])
    op.process_batch2([("y", 0)])
    op.process_batch1([("y", 1)])
    assert sink.received == [
        ("keys", "x", ["x"]),
        ("x", 5, 2),
        ("keys", "y", ["x", "y"]),
        ("y", 1, 2),
    ]
    assert op.keyed_backend.current_key == "y"


def test_writing_broadcast_state_from_process_element_is_a_clear_error():
    class WritesOnTheWrongSide(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            ctx.get_broadcast_state(RULES).put("k", value)

        def process_broadcast_element(self, value, ctx):
            return None

    op, _sink = make_operator(WritesOnTheWrongSide(), keyed=False)
    with pytest.raises(ReadOnlyBroadcastStateError, match="read-only in process_element"):
        op.process_batch1([1])


def test_a_descriptor_not_passed_to_broadcast_is_a_clear_error_naming_the_known_ones():
    class UsesAnotherDescriptor(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            ctx.get_broadcast_state(MapStateDescriptor("other"))

        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(ValueStateDescriptor("rules"))

    op, _sink = make_operator(UsesAnotherDescriptor(), keyed=False)
    with pytest.raises(ValueError, match=r"'other' is unknown.*here: 'rules'.*broadcast\(\.\.\.\)"):
        op.process_batch1([1])
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        op.process_batch2([1])


def test_apply_to_keyed_state_and_the_current_key_need_a_keyed_stream():
    class Misuses(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            ctx.get_current_key()

        def process_broadcast_element(self, value, ctx):
            ctx.apply_to_keyed_state(ValueStateDescriptor("v"), print)

    op, _sink = make_operator(Misuses(), keyed=False)
    with pytest.raises(RuntimeError, match="KeyedBroadcastProcessFunction"):
        op.process_batch1([1])
    with pytest.raises(RuntimeError, match="KeyedBroadcastProcessFunction"):
        op.process_batch2([1])


def test_the_broadcast_state_of_a_checkpoint_is_on_every_subtask_after_rescaling_2_to_3():
    old = []
    for subtask in range(2):
        op, _sink = make_operator(Thresholds(), subtask=subtask, parallelism=2)
        op.process_batch2([("x", 3), ("y", 4)])
        old.append(operator_state_round_trip(op))
    for subtask, share in enumerate(redistribute_operator_state(old, 3)):
        restored = RestoredOperatorState((), share)
        op, sink = make_operator(Thresholds(), subtask=subtask, parallelism=3, restored=restored)
        assert op.broadcast_states["rules"].items() == [("x", 3), ("y", 4)]
        op.process_batch1([("x", 10)])
        assert sink.received == [("x", 10, 1)]


def test_an_empty_broadcast_state_is_snapshotted_so_a_restore_knows_it():
    op, _sink = make_operator(Thresholds())
    assert operator_state_round_trip(op) == {"rules": ("broadcast", [])}


# two-input dispatch -------------------------------------------------------------------------
def test_batches_go_to_the_input_their_channel_feeds():
    op, sink = make_operator(Thresholds())
    process = input_dispatch(op, (0, 1, 0))
    process(1, [("x", 1)])
    process(2, [("x", 5)])
    assert sink.received == [("keys", "x", []), ("x", 5, 1)]
    assert input_dispatch(Collect(), ()) is None  # one input: the task calls process_batch
    with pytest.raises(ValueError, match="input of each channel"):
        input_dispatch(op, ())


# graph and API ------------------------------------------------------------------------------
def _job(parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    events = env.from_source(NumberSequenceSource(0, 99), None, "events")
    rules = env.from_source(NumberSequenceSource(0, 9), None, "rules").set_parallelism(1)
    return env, events, rules


def test_connect_builds_a_two_input_vertex_with_the_broadcast_side_as_second_input():
    env, events, rules = _job(3)
    broadcast = rules.broadcast(RULES)
    assert isinstance(broadcast, BroadcastStream)
    connected = events.key_by(lambda v: v % 5).connect(broadcast)
    assert isinstance(connected, BroadcastConnectedStream)
    connected.process(Thresholds()).uid("rules").print()
    graph = build_job_graph(env._stream_graph, "job", 3, None)
    vertex, _op = graph.operator("rules")
    assert vertex.operators[0].uid == "rules"  # the head: never chained to an input
    edges = [graph.edges[e] for e in vertex.input_edges]
    assert [(type(e.partitioner), e.target_input) for e in edges] == [
        (KeyGroupStreamPartitioner, 0),
        (BroadcastPartitioner, 1),
    ]
    for subtask in range(3):
        # 3 event subtasks hash to every subtask; the 1 rules subtask broadcasts to all
        assert graph.channel_inputs(vertex.vertex_id, subtask) == (0, 0, 0, 1)


def test_broadcast_without_descriptors_still_repartitions_to_every_subtask():
    _env, events, _rules = _job()
    stream = events.broadcast()
    assert not isinstance(stream, BroadcastStream)
    assert all(isinstance(p, BroadcastPartitioner) for _t, p in stream._inputs)


def test_the_api_refuses_mismatched_functions_and_descriptors_with_the_fix():
    _env, events, rules = _job()
    broadcast = rules.broadcast(RULES)
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction needs a KeyedStream"):
        events.connect(broadcast).process(Thresholds())
    with pytest.raises(TypeError, match="processed by a KeyedBroadcastProcessFunction"):
        events.key_by(lambda v: v).connect(broadcast).process(lambda v, ctx: None)
    with pytest.raises(TypeError, match="MapStateDescriptors"):
        rules.broadcast(ListStateDescriptor("rules"))
    with pytest.raises(ValueError, match="given twice"):
        rules.broadcast(RULES, MapStateDescriptor("rules"))
    with pytest.raises(TypeError, match="a BroadcastStream"):
        events.connect(42)
    # connecting two DataStreams gives ConnectedStreams (tests/unit/test_connected_streams.py)
    assert type(events.connect(rules)).__name__ == "ConnectedStreams"


# restore planning ---------------------------------------------------------------------------
@pytest.mark.parametrize("new_parallelism", [1, 2, 3])
def test_a_restore_plan_gives_every_subtask_a_full_copy_of_the_broadcast_state(
    tmp_path, new_parallelism
):
    chk = tmp_path / "chk-5"
    chk.mkdir()
    subtasks = {}
    for i in range(2):
        with open(chk / f"s{i}.state", "wb") as f:
            state = {"rules": ("broadcast", [("r", 1), ("s", 2)]), "own": ("split", [i])}
            index = write_state_file(f, None, state)
        subtasks[str(i)] = {"file": f"s{i}.state", "index": index.to_json()}
    metadata = metadata_of(
        checkpoint_id=5,
        max_parallelism=MAX_P,
        operators={"rules": {"name": "r", "parallelism": 2, "subtasks": subtasks}},
    )
    env, events, rules = _job(new_parallelism)
    events.connect(rules.broadcast(RULES)).process(Passes()).uid("rules").print()
    graph = build_job_graph(env._stream_graph, "job", new_parallelism, None)
    plan, _max_p = plan_restore(graph, metadata, str(chk))
    vertex = graph.operator("rules")[0].vertex_id
    shares = [plan[(vertex, i)]["rules"].operator_state for i in range(new_parallelism)]
    assert [s["rules"] for s in shares] == [("broadcast", [("r", 1), ("s", 2)])] * new_parallelism
    assert sorted(e for s in shares for e in s["own"][1]) == [0, 1]


class Passes(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        return None
