"""StreamGraph -> JobGraph: resolve parallelism and partitioners, chain operators into vertices.

An operator is chained to its input (runs in the same subtask, no serialization) when it has
exactly one input, the edge is forward (explicitly, or by default with equal parallelism),
and neither side disabled chaining. A side output's selector is always chained to the
operator producing it, with its parallelism. A chain is a tree: an operator may feed several chained
operators and several network edges.
"""

from __future__ import annotations

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
) -> JobGraph:
    if not stream_graph.transformations:
        raise InvalidJobGraphError("the job has no operators: add a source and a sink")
    ts = _reachable(stream_graph)
    if not ts:
        raise InvalidJobGraphError(
            "the job has no sink, so it would produce nothing: add print() or sink_to(...)"
        )
    parallelism = {t.id: t.parallelism or default_parallelism for t in ts}
    for t in ts:  # a side output runs chained to the operator producing it
        if t.kind == "side_output":
            parallelism[t.id] = parallelism[t.inputs[0][0].id]
    for t in ts:
        if parallelism[t.id] < 1:
            raise InvalidJobGraphError(f"{t.describe()}: parallelism must be >= 1")
    uids: dict[str, Transformation] = {}
    for t in ts:
        t_uid = t.uid or f"{t.kind}-{t.id}"
        if t_uid in uids:
            raise InvalidJobGraphError(
                f"uid {t_uid!r} is used by two operators ({uids[t_uid].name} and {t.name}); "
                "uids must be unique"
            )
        uids[t_uid] = t
    uid_of = {id(t): u for u, t in uids.items()}

    vertex_of: dict[int, int] = {}
    members: dict[int, list[Transformation]] = {}
    consumers: dict[int, list[tuple[Transformation, Partitioner | None]]] = {t.id: [] for t in ts}
    for t in ts:
        for upstream, part in t.inputs:
            consumers[upstream.id].append((t, part))
    for t in ts:
        resolved = [(u, _resolve(u, t, p, parallelism)) for u, p in t.inputs]
        if _chainable(t, resolved, parallelism):
            vertex_of[t.id] = vertex_of[resolved[0][0].id]
        else:
            vertex_of[t.id] = len(members) + 1
        members.setdefault(vertex_of[t.id], []).append(t)

    edges: dict[int, EdgeSpec] = {}
    network_outputs: dict[int, list[int]] = {t.id: [] for t in ts}
    chained_outputs: dict[int, list[int]] = {t.id: [] for t in ts}
    input_edges: dict[int, list[int]] = {v: [] for v in members}
    for t in ts:
        for position, (u, p) in enumerate(t.inputs):
            part = _resolve(u, t, p, parallelism)
            if vertex_of[u.id] == vertex_of[t.id]:
                chained_outputs[u.id].append(t.id)
                continue
            edge_id = len(edges) + 1
            target_input = t.input_indices[position] if t.input_indices else 0
            edges[edge_id] = EdgeSpec(
                edge_id, vertex_of[u.id], u.id, vertex_of[t.id], part, target_input
            )
            network_outputs[u.id].append(edge_id)
            input_edges[vertex_of[t.id]].append(edge_id)

    max_p = max(parallelism.values())
    configured = max_parallelism is not None
    if max_parallelism is None:
        max_parallelism = compute_default_max_parallelism(max_p)
    if not max_p <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidJobGraphError(
            f"max parallelism {max_parallelism} must be between the highest parallelism "
            f"({max_p}) and {UPPER_BOUND_MAX_PARALLELISM}"
        )
    vertices = {}
    for vid, chain in members.items():
        head = chain[0]
        ops = tuple(
            OperatorSpec(
                op_id=t.id,
                uid=uid_of[id(t)],
                name=t.name,
                factory=t.make_operator,
                chained_outputs=tuple(chained_outputs[t.id]),
                network_outputs=tuple(network_outputs[t.id]),
                uid_generated=t.uid is None,
            )
            for t in chain
        )
        vertices[vid] = VertexSpec(
            vertex_id=vid,
            name=" -> ".join(t.name for t in chain),
            parallelism=parallelism[head.id],
            operators=ops,
            input_edges=tuple(input_edges[vid]),
            is_source=head.is_source,
        )
    return JobGraph(job_name, vertices, edges, max_parallelism, configured)


def _reachable(stream_graph: StreamGraph) -> list[Transformation]:
    """Transformations that lead to a sink (dangling branches are dropped, as in Flink)."""
    needed: set[int] = set()
    stack = [t for t in stream_graph.transformations if t.kind == "sink"]
    while stack:
        t = stack.pop()
        if t.id not in needed:
            needed.add(t.id)
            stack.extend(u for u, _ in t.inputs)
    return [t for t in stream_graph.transformations if t.id in needed]


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
