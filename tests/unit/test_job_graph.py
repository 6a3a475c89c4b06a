"""StreamGraph -> JobGraph: parallelism and partitioner resolution, operator chaining, uids,
max parallelism, and the channel plan the slots derive from the graph."""

from __future__ import annotations

import pytest

from tidegate.common import Encoder
from tidegate.datastream import (
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.graph.job_graph import InvalidJobGraphError, build_job_graph
from tidegate.runtime.partitioners import (
    BroadcastPartitioner,
    ForwardPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    ShufflePartitioner,
)
from tidegate.runtime.plan import JobGraph, VertexSpec


# helpers ------------------------------------------------------------------------------------
def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)


def source(env, name: str = "numbers"):
    return env.from_source(NumberSequenceSource(0, 99), None, name)


def file_sink(path: str = "/tmp/tidegate-unused"):
    return (
        FileSink.for_row_format(path, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )


def build(env: StreamExecutionEnvironment, max_parallelism: int | None = None) -> JobGraph:
    return build_job_graph(
        env._stream_graph,
        "job",
        env.get_parallelism(),
        max_parallelism if max_parallelism is not None else env._max_parallelism,
    )


def chains(graph: JobGraph) -> list[list[str]]:
    """Operator names per vertex, in vertex order."""
    return [[op.name for op in v.operators] for v in graph.vertices.values()]


def vertex_of(graph: JobGraph, op_name: str) -> VertexSpec:
    return next(v for v in graph.vertices.values() if any(o.name == op_name for o in v.operators))


def op_id(graph: JobGraph, op_name: str) -> int:
    return next(o.op_id for v in graph.vertices.values() for o in v.operators if o.name == op_name)


def edges_between(graph: JobGraph, a: str, b: str):
    va, vb = vertex_of(graph, a).vertex_id, vertex_of(graph, b).vertex_id
    return [e for e in graph.edges.values() if e.source_vertex == va and e.target_vertex == vb]


class Double(MapFunction):
    def map(self, value):
        return value * 2


class Emit(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


# chaining -----------------------------------------------------------------------------------
def test_forward_operators_of_equal_parallelism_chain_into_one_vertex():
    env = new_env(3)
    source(env).map(Double()).name("double").filter(bool).name("nonzero").print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "double", "nonzero", "out"]]
    (v,) = graph.vertices.values()
    assert v.name == "Source: numbers -> double -> nonzero -> out"
    assert v.parallelism == 3 and v.is_source and v.input_edges == ()
    assert graph.edges == {}
    ops = v.operators
    assert [o.chained_outputs for o in ops] == [
        (ops[1].op_id,),
        (ops[2].op_id,),
        (ops[3].op_id,),
        (),
    ]
    assert all(o.network_outputs == () for o in ops)


def test_different_parallelism_breaks_the_chain_and_defaults_to_rebalance():
    env = new_env(2)
    ds = source(env).set_parallelism(1).map(Double()).name("map").set_parallelism(3)
    ds.sink_to(file_sink()).name("sink").set_parallelism(2)
    graph = build(env)
    assert chains(graph) == [["Source: numbers"], ["map"], ["sink"]]
    assert [v.parallelism for v in graph.vertices.values()] == [1, 3, 2]
    assert [type(e.partitioner) for e in graph.edges.values()] == [RebalancePartitioner] * 2
    (e1,) = edges_between(graph, "Source: numbers", "map")
    assert e1.source_op == op_id(graph, "Source: numbers")
    assert vertex_of(graph, "Source: numbers").operators[0].network_outputs == (e1.edge_id,)
    assert vertex_of(graph, "map").input_edges == (e1.edge_id,)


def test_key_by_breaks_the_chain_with_a_key_group_edge_and_chains_after_it():
    env = new_env(2)
    source(env).map(Double()).name("map").key_by(lambda v: v % 5).process(Emit()).name(
        "emit"
    ).print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "map"], ["emit", "out"]]
    (edge,) = graph.edges.values()
    assert isinstance(edge.partitioner, KeyGroupStreamPartitioner)
    assert edge.source_op == op_id(graph, "map")  # the edge leaves from the chain's tail


@pytest.mark.parametrize(
    ("repartition", "kind"),
    [
        ("rebalance", RebalancePartitioner),
        ("shuffle", ShufflePartitioner),
        ("broadcast", BroadcastPartitioner),
    ],
)
def test_an_explicit_repartition_between_equal_parallelism_is_a_network_edge(repartition, kind):
    env = new_env(2)
    getattr(source(env), repartition)().map(Double()).name("map").print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: numbers"], ["map", "out"]]
    (edge,) = graph.edges.values()
    assert type(edge.partitioner) is kind


def test_an_explicit_forward_between_equal_parallelism_chains():
    env = new_env(2)
    source(env).forward().map(Double()).name("map").print().name("out")
    assert chains(build(env)) == [["Source: numbers", "map", "out"]]


def test_disable_chaining_isolates_the_operator_on_both_sides():
    env = new_env(2)
    source(env).map(Double()).name("map").disable_chaining().filter(bool).name("f").print().name(
        "out"
    )
    graph = build(env)
    assert chains(graph) == [["Source: numbers"], ["map"], ["f", "out"]]
    assert all(isinstance(e.partitioner, ForwardPartitioner) for e in graph.edges.values())


def test_disable_chaining_on_a_sink_gives_it_its_own_vertex():
    env = new_env(2)
    source(env).map(Double()).name("map").print().name("out").disable_chaining()
    assert chains(build(env)) == [["Source: numbers", "map"], ["out"]]


def test_start_new_chain_breaks_before_the_operator_only():
    env = new_env(2)
    source(env).map(Double()).name("map").start_new_chain().filter(bool).name("f").print().name(
        "out"
    )
    graph = build(env)
    assert chains(graph) == [["Source: numbers"], ["map", "f", "out"]]


def test_a_union_input_never_chains_even_with_forward_inputs_of_equal_parallelism():
    env = new_env(2)
    a = source(env, "a")
    b = source(env, "b")
    a.union(b).map(Double()).name("map").print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: a"], ["Source: b"], ["map", "out"]]
    union_vertex = vertex_of(graph, "map")
    assert len(union_vertex.input_edges) == 2
    sources = {graph.edges[e].source_vertex for e in union_vertex.input_edges}
    assert sources == {
        vertex_of(graph, "Source: a").vertex_id,
        vertex_of(graph, "Source: b").vertex_id,
    }
    assert all(
        isinstance(graph.edges[e].partitioner, ForwardPartitioner) for e in union_vertex.input_edges
    )


def test_a_union_of_two_branches_of_one_chain_gets_two_edges_from_that_vertex():
    env = new_env(2)
    s = source(env)
    left = s.map(Double()).name("left")
    right = s.map(Double()).name("right")
    left.union(right).print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "left", "right"], ["out"]]
    out = vertex_of(graph, "out")
    assert [graph.edges[e].source_op for e in out.input_edges] == [
        op_id(graph, "left"),
        op_id(graph, "right"),
    ]
    assert graph.input_channels(out.vertex_id, 1) == [
        (out.input_edges[0], 1),
        (out.input_edges[1], 1),
    ]


def test_an_operator_with_two_consumers_forms_a_chain_tree():
    env = new_env(2)
    m = source(env).map(Double()).name("map")
    m.print().name("out-1")
    m.filter(bool).name("f").print().name("out-2")
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "map", "out-1", "f", "out-2"]]
    ops = {o.name: o for o in graph.vertices[1].operators}
    assert ops["map"].chained_outputs == (ops["out-1"].op_id, ops["f"].op_id)
    assert ops["f"].chained_outputs == (ops["out-2"].op_id,)
    assert ops["out-1"].chained_outputs == ops["out-2"].chained_outputs == ()


def test_one_operator_can_feed_a_chained_consumer_and_a_network_consumer():
    env = new_env(2)
    m = source(env).map(Double()).name("map")
    m.print().name("chained")
    m.print().name("remote").set_parallelism(3)
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "map", "chained"], ["remote"]]
    ops = {o.name: o for o in graph.vertices[1].operators}
    (edge,) = graph.edges.values()
    assert ops["map"].chained_outputs == (ops["chained"].op_id,)
    assert ops["map"].network_outputs == (edge.edge_id,)
    assert isinstance(edge.partitioner, RebalancePartitioner)


def test_a_branch_without_a_sink_is_dropped():
    env = new_env(2)
    s = source(env)
    s.map(Double()).name("dangling").filter(bool).name("dangling-too")
    s.print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: numbers", "out"]]


def test_a_source_without_a_sink_is_dropped():
    env = new_env(2)
    source(env, "unused")
    source(env, "used").print().name("out")
    assert chains(build(env)) == [["Source: used", "out"]]


# errors ---------------------------------------------------------------------------------------
def test_a_job_without_a_sink_is_rejected_with_an_actionable_message():
    env = new_env(2)
    source(env).map(Double())
    with pytest.raises(InvalidJobGraphError, match=r"no sink.*print\(\) or sink_to"):
        build(env)


def test_an_empty_job_is_rejected():
    with pytest.raises(InvalidJobGraphError, match="no operators"):
        build(new_env(2))


def test_forward_between_different_parallelisms_is_rejected_naming_both_operators():
    env = new_env(2)
    source(env).forward().map(Double()).name("wide").set_parallelism(3).print()
    with pytest.raises(InvalidJobGraphError, match=r"forward\(\).*Source: numbers.*2.*wide.*3"):
        build(env)


def test_a_duplicate_uid_is_rejected_naming_it():
    env = new_env(2)
    source(env).uid("same").map(Double()).uid("same").print()
    with pytest.raises(InvalidJobGraphError, match=r"'same'.*unique"):
        build(env)


def test_a_uid_clashing_with_a_generated_default_uid_is_rejected():
    env = new_env(2)
    s = source(env)
    default_of_source = build_default_uids(env)[0]
    s.map(Double()).uid(default_of_source).print()
    with pytest.raises(InvalidJobGraphError, match="unique"):
        build(env)


def build_default_uids(env) -> list[str]:
    env2 = new_env(2)
    source(env2).print()
    return [o.uid for v in build(env2).vertices.values() for o in v.operators]


@pytest.mark.parametrize("bad", [0, -1])
def test_parallelism_below_one_is_rejected_everywhere(bad):
    env = new_env(2)
    with pytest.raises(ValueError):
        env.set_parallelism(bad)
    ds = source(env)
    with pytest.raises(ValueError):
        ds.set_parallelism(bad)
    sink = ds.print()
    with pytest.raises(ValueError):
        sink.set_parallelism(bad)


def test_a_keyed_process_function_on_a_non_keyed_stream_is_a_type_error():
    env = new_env(2)
    with pytest.raises(TypeError, match="key_by"):
        source(env).process(Emit())


def test_a_keyed_stream_cannot_be_repartitioned_or_unioned():
    env = new_env(2)
    keyed = source(env).key_by(lambda v: v)
    for method in ("rebalance", "shuffle", "broadcast", "forward"):
        with pytest.raises(TypeError):
            getattr(keyed, method)()
    with pytest.raises(TypeError):
        keyed.union(source(env))


def test_a_collection_source_is_non_parallel():
    env = new_env(3)
    ds = env.from_collection([1, 2, 3])
    assert ds.get_parallelism() == 1
    with pytest.raises(ValueError, match="non-parallel"):
        ds.set_parallelism(2)
    ds.map(Double()).name("map").print().name("out")
    graph = build(env)
    assert chains(graph) == [["Source: Collection Source"], ["map", "out"]]
    assert [v.parallelism for v in graph.vertices.values()] == [1, 3]


def test_name_uid_and_parallelism_of_a_union_or_repartition_are_rejected():
    env = new_env(2)
    s = source(env)
    for stream in (s.union(source(env)), s.rebalance(), s.key_by(lambda v: v)):
        with pytest.raises(ValueError):
            stream.set_parallelism(2)
        with pytest.raises(ValueError):
            stream.uid("x")


# uids ---------------------------------------------------------------------------------------
def program(env):
    s = source(env)
    s.map(Double()).key_by(lambda v: v % 3).process(Emit()).print()
    s.filter(bool).set_parallelism(1).sink_to(file_sink())


def all_uids(graph: JobGraph) -> list[tuple[str, str]]:
    return [(o.uid, o.name) for v in graph.vertices.values() for o in v.operators]


def test_default_uids_are_stable_across_two_builds_of_the_same_program():
    env_a, env_b = new_env(2), new_env(2)
    program(env_a)
    program(env_b)
    uids = all_uids(build(env_a))
    assert uids == all_uids(build(env_b))
    assert uids == all_uids(build(env_a))  # building twice does not change them
    assert len({u for u, _ in uids}) == len(uids)


def test_default_uids_do_not_depend_on_the_parallelism():
    env_a, env_b = new_env(2), new_env(4)
    program(env_a)
    program(env_b)
    assert all_uids(build(env_a)) == all_uids(build(env_b))


def test_explicit_uids_and_names_reach_the_operator_specs():
    env = new_env(2)
    source(env).uid("src").name("numbers").map(Double()).uid("double").name("Double").print().uid(
        "sink"
    ).name("out")
    graph = build(env)
    assert all_uids(graph) == [("src", "numbers"), ("double", "Double"), ("sink", "out")]
    vertex, op = graph.operator("double")
    assert op.name == "Double" and vertex.vertex_id == 1
    with pytest.raises(KeyError):
        graph.operator("missing")


def test_get_name_reads_back_the_name():
    env = new_env(2)
    ds = source(env).map(Double()).name("double")
    assert ds.get_name() == "double"


# max parallelism ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [(1, 128), (2, 128), (85, 128), (86, 256), (200, 512), (1000, 2048)],
)
def test_the_default_max_parallelism_follows_flinks_formula(parallelism, expected):
    env = new_env(parallelism)
    source(env).print()
    assert build(env).max_parallelism == expected


def test_the_default_max_parallelism_uses_the_highest_operator_parallelism():
    env = new_env(1)
    source(env).map(Double()).set_parallelism(86).print()
    assert build(env).max_parallelism == 256


def test_an_explicit_max_parallelism_is_used():
    env = new_env(2)
    env.set_max_parallelism(13)
    assert env.get_max_parallelism() == 13
    source(env).print()
    assert build(env).max_parallelism == 13


def test_max_parallelism_is_unset_by_default():
    assert new_env(2).get_max_parallelism() == -1


def test_a_max_parallelism_below_an_operators_parallelism_is_rejected():
    env = new_env(4)
    env.set_max_parallelism(3)
    source(env).print()
    with pytest.raises(InvalidJobGraphError, match="max parallelism 3"):
        build(env)


@pytest.mark.parametrize("bad", [0, -1, 32769])
def test_set_max_parallelism_validates_its_range(bad):
    with pytest.raises(ValueError):
        new_env(2).set_max_parallelism(bad)


def test_the_upper_bound_of_max_parallelism_is_accepted():
    env = new_env(2)
    env.set_max_parallelism(32768)
    source(env).print()
    assert build(env).max_parallelism == 32768


# channels -------------------------------------------------------------------------------------
def test_all_to_all_edge_targets_and_input_channels():
    env = new_env(2)
    source(env).set_parallelism(2).map(Double()).name("map").set_parallelism(3).print().name(
        "out"
    ).set_parallelism(3)
    graph = build(env)
    (edge,) = graph.edges.values()
    map_v = vertex_of(graph, "map").vertex_id
    assert graph.edge_targets(edge.edge_id, 0) == [0, 1, 2]
    assert graph.edge_targets(edge.edge_id, 1) == [0, 1, 2]
    for subtask in range(3):
        assert graph.input_channels(map_v, subtask) == [(edge.edge_id, 0), (edge.edge_id, 1)]
    assert graph.input_channels(vertex_of(graph, "Source: numbers").vertex_id, 0) == []


def test_pointwise_edge_targets_and_input_channels():
    env = new_env(3)
    source(env).map(Double()).name("map").disable_chaining().print()
    graph = build(env)
    (edge,) = edges_between(graph, "Source: numbers", "map")
    assert isinstance(edge.partitioner, ForwardPartitioner)
    map_v = vertex_of(graph, "map").vertex_id
    for i in range(3):
        assert graph.edge_targets(edge.edge_id, i) == [i]
        assert graph.input_channels(map_v, i) == [(edge.edge_id, i)]


def test_input_channels_of_a_union_list_each_edge_in_order():
    env = new_env(2)
    a = source(env, "a").set_parallelism(1)
    b = source(env, "b").set_parallelism(2)
    a.union(b).map(Double()).name("map").print()
    graph = build(env)
    v = vertex_of(graph, "map")
    e_a, e_b = v.input_edges
    assert isinstance(graph.edges[e_a].partitioner, RebalancePartitioner)  # p 1 -> 2
    assert isinstance(graph.edges[e_b].partitioner, ForwardPartitioner)  # p 2 -> 2
    assert graph.input_channels(v.vertex_id, 0) == [(e_a, 0), (e_b, 0)]
    assert graph.input_channels(v.vertex_id, 1) == [(e_a, 0), (e_b, 1)]


def test_num_slots_is_the_highest_parallelism_and_slots_share_all_vertices():
    env = new_env(2)
    source(env).set_parallelism(1).map(Double()).name("map").set_parallelism(3).print().name(
        "out"
    ).set_parallelism(2)
    graph = build(env)
    assert graph.num_slots == 3
    src, m, out = (vertex_of(graph, n).vertex_id for n in ("Source: numbers", "map", "out"))
    assert graph.subtasks_in_slot(0) == [(src, 0), (m, 0), (out, 0)]
    assert graph.subtasks_in_slot(1) == [(m, 1), (out, 1)]
    assert graph.subtasks_in_slot(2) == [(m, 2)]
    assert sorted(graph.all_subtasks()) == sorted(
        [(src, 0), (m, 0), (m, 1), (m, 2), (out, 0), (out, 1)]
    )


def test_the_environment_builds_the_same_graph_for_its_job_spec():
    env = new_env(2)
    source(env).map(Double()).print()
    spec = env._job_spec("my job")
    assert spec.job_name == "my job"
    assert spec.graph.job_name == "my job"
    assert chains(spec.graph) == chains(build(env))
