"""StreamGraph -> JobGraph: resolve parallelism and partitioners, chain operators into vertices.

An operator is chained to its input (runs in the same subtask, no serialization) when it has
exactly one input, the edge is forward (explicitly, or by default with equal parallelism),
and neither side disabled chaining. A side output's selector is always chained to the
operator producing it, with its parallelism. A chain is a tree: an operator may feed several chained
operators and several network edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.connectors.base import bind_filesystems
from tidegate.graph.stream_graph import StreamGraph, Transformation
from tidegate.runtime.partitioners import ForwardPartitioner, Partitioner, RebalancePartitioner
from tidegate.runtime.plan import EdgeSpec, JobGraph, OperatorSpec, VertexSpec
from tidegate.state.keygroups import UPPER_BOUND_MAX_PARALLELISM, compute_default_max_parallelism


class InvalidJobGraphError(ValueError):
    pass


def build_job_graph(
    stream_graph: StreamGraph,
    job_name: str,
    default_parallelism: int,
    max_parallelism: int | None,
    filesystems: FileSystems = NO_OPTIONS,
) -> JobGraph:
    """The JobGraph of `stream_graph`, its sources and sinks bound to the job's `filesystems`;
    `max_parallelism` None: the default for the highest parallelism. Raises
    InvalidJobGraphError for a graph that cannot run, saying why."""
    if not stream_graph.transformations:
        raise InvalidJobGraphError("the job has no operators: add a source and a sink")
    ts = stream_graph.reachable()
    if not ts:
        raise InvalidJobGraphError(
            "the job has no sink, so it would produce nothing: add print() or sink_to(...)"
        )
    parallelism = _parallelism(ts, default_parallelism)
    uid_of = _unique_uids(ts)
    vertex_of, members = _chains(ts, parallelism)
    wiring = _Wiring.of(ts, vertex_of, members, parallelism)
    max_p = max(parallelism.values())
    configured = max_parallelism is not None
    if max_parallelism is None:
        max_parallelism = compute_default_max_parallelism(max_p)
    if not max_p <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidJobGraphError(
            f"max parallelism {max_parallelism} must be between the highest parallelism "
            f"({max_p}) and {UPPER_BOUND_MAX_PARALLELISM}"
        )
    vertices = {
        vid: _vertex(vid, chain, parallelism, uid_of, wiring, filesystems)
        for vid, chain in members.items()
    }
    return JobGraph(job_name, vertices, wiring.edges, max_parallelism, configured)


def _parallelism(ts: list[Transformation], default: int) -> dict[int, int]:
    """Each transformation's parallelism: its own, else the default; a side output runs
    chained to the operator producing it, with that operator's parallelism."""
    parallelism = {t.id: t.parallelism or default for t in ts}
    for t in ts:
        if t.kind == "side_output":
            parallelism[t.id] = parallelism[t.inputs[0][0].id]
    for t in ts:
        if parallelism[t.id] < 1:
            raise InvalidJobGraphError(f"{t.describe()}: parallelism must be >= 1")
    return parallelism


def _unique_uids(ts: list[Transformation]) -> dict[int, str]:
    """Each transformation's uid (given, or `<kind>-<id>`), by transformation id."""
    owner: dict[str, Transformation] = {}
    for t in ts:
        t_uid = t.uid or f"{t.kind}-{t.id}"
        if t_uid in owner:
            raise InvalidJobGraphError(
                f"uid {t_uid!r} is used by two operators ({owner[t_uid].name} and {t.name}); "
                "uids must be unique"
            )
        owner[t_uid] = t
    return {t.id: u for u, t in owner.items()}


def _chains(
    ts: list[Transformation], parallelism: dict[int, int]
) -> tuple[dict[int, int], dict[int, list[Transformation]]]:
    """(vertex id of each transformation, the transformations of each vertex in order):
    a chainable transformation joins its input's vertex, any other starts a new one."""
    vertex_of: dict[int, int] = {}
    members: dict[int, list[Transformation]] = {}
    for t in ts:
        resolved = [(u, _resolve(u, t, p, parallelism)) for u, p in t.inputs]
        if _chainable(t, resolved, parallelism):
            vertex_of[t.id] = vertex_of[resolved[0][0].id]
        else:
            vertex_of[t.id] = len(members) + 1
        members.setdefault(vertex_of[t.id], []).append(t)
    return vertex_of, members


@dataclass
class _Wiring:
    """The network edges between vertices, and every operator's outputs."""

    edges: dict[int, EdgeSpec]
    network_outputs: dict[int, list[int]]  # transformation id -> edge ids
    chained_outputs: dict[int, list[int]]  # transformation id -> transformation ids
    input_edges: dict[int, list[int]]  # vertex id -> edge ids

    @classmethod
    def of(
        cls,
        ts: list[Transformation],
        vertex_of: dict[int, int],
        members: dict[int, list[Transformation]],
        parallelism: dict[int, int],
    ) -> _Wiring:
        w = cls({}, {t.id: [] for t in ts}, {t.id: [] for t in ts}, {v: [] for v in members})
        for t in ts:
            for position, (u, p) in enumerate(t.inputs):
                if vertex_of[u.id] == vertex_of[t.id]:
                    w.chained_outputs[u.id].append(t.id)
                    continue
                edge_id = len(w.edges) + 1
                target_input = t.input_indices[position] if t.input_indices else 0
                part = _resolve(u, t, p, parallelism)
                w.edges[edge_id] = EdgeSpec(
                    edge_id,
                    vertex_of[u.id],
                    u.id,
                    vertex_of[t.id],
                    part,
                    target_input,
                    u.output_type,
                )
                w.network_outputs[u.id].append(edge_id)
                w.input_edges[vertex_of[t.id]].append(edge_id)
        return w


def _vertex(
    vid: int,
    chain: list[Transformation],
    parallelism: dict[int, int],
    uid_of: dict[int, str],
    wiring: _Wiring,
    filesystems: FileSystems,
) -> VertexSpec:
    ops = tuple(
        _operator(t, uid_of[t.id], wiring, bind_filesystems(t.connector, filesystems))
        for t in chain
    )
    head = chain[0]
    return VertexSpec(
        vertex_id=vid,
        name=" -> ".join(t.name for t in chain),
        parallelism=parallelism[head.id],
        operators=ops,
        input_edges=tuple(wiring.input_edges[vid]),
        is_source=head.is_source,
    )


def _operator(t: Transformation, uid: str, wiring: _Wiring, connector: object) -> OperatorSpec:
    return OperatorSpec(
        op_id=t.id,
        uid=uid,
        name=t.name,
        factory=t.make_operator if connector is None else partial(t.make_operator, connector),
        chained_outputs=tuple(wiring.chained_outputs[t.id]),
        network_outputs=tuple(wiring.network_outputs[t.id]),
        uid_generated=t.uid is None,
        connector=connector,
    )


def _resolve(
    upstream: Transformation,
    t: Transformation,
    part: Partitioner | None,
    parallelism: dict[int, int],
) -> Partitioner:
    same = parallelism[upstream.id] == parallelism[t.id]
    if part is None:
        return ForwardPartitioner() if same else RebalancePartitioner()
    if isinstance(part, ForwardPartitioner) and not same:
        raise InvalidJobGraphError(
            f"forward() between {upstream.name} (parallelism {parallelism[upstream.id]}) and "
            f"{t.name} (parallelism {parallelism[t.id]}) needs equal parallelism; "
            "use rebalance() or set the same parallelism"
        )
    return part


def _chainable(t: Transformation, resolved, parallelism) -> bool:
    if t.kind == "side_output":
        return True  # its operator receives the side output inside the producer's chain
    if t.is_source or len(resolved) != 1 or not t.chaining or t.start_new_chain or t.input_indices:
        return False
    upstream, part = resolved[0]
    return isinstance(part, ForwardPartitioner) and upstream.chaining
