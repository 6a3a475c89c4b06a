"""The job graph as the runtime sees it: vertices (operator chains), edges, channels.

Built by `tidegate.graph` from the user's StreamGraph; shipped to every slot inside the
deployment. Slot i hosts subtask i of every vertex whose parallelism is above i.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.common.typeinfo import TypeInformation
from tidegate.runtime.partitioners import Partitioner


@dataclass(frozen=True)
class OperatorSpec:
    op_id: int
    uid: str
    name: str
    #: creates a fresh runtime operator (a picklable callable; user functions are inside it)
    factory: Callable[[], Any]
    chained_outputs: tuple[int, ...] = ()
    network_outputs: tuple[int, ...] = ()
    #: the uid was derived from the operator's position (`<kind>-<n>`), not set with `.uid()`
    uid_generated: bool = False
    #: the source or sink the operator runs (bound to the job's filesystems; in the factory
    #: too), so the driver can ask it things (connectors/base.py); None for other operators
    connector: Any = None


@dataclass(frozen=True)
class EdgeSpec:
    edge_id: int
    source_vertex: int
    source_op: int
    target_vertex: int
    partitioner: Partitioner
    #: which input of the target's head operator the edge feeds (1: a two-input operator's
    #: second input, e.g. the broadcast side of a broadcast process operator)
    target_input: int = 0
    #: the declared type of the records (the source operator's output type; None: undeclared),
    #: whose codec carries them between processes (common/record_codec.py)
    type_info: TypeInformation | None = None


@dataclass(frozen=True)
class VertexSpec:
    vertex_id: int
    name: str
    parallelism: int
    operators: tuple[OperatorSpec, ...]  # topological order; operators[0] is the chain head
    input_edges: tuple[int, ...]
    is_source: bool


@dataclass(frozen=True)
class JobGraph:
    job_name: str
    vertices: dict[int, VertexSpec]
    edges: dict[int, EdgeSpec]
    max_parallelism: int
    #: whether the user set max parallelism (else it is the default for this parallelism, and a
    #: restore takes the snapshot's instead)
    max_parallelism_configured: bool = False
    #: RuntimeExecutionMode.BATCH (datastream/execution_mode.py): bounded input, results at
    #: the end of the input, no periodic checkpoints
    batch: bool = False
    #: `pipeline.global-job-parameters`: what user functions read with `get_job_parameter`
    job_parameters: dict[str, str] = field(default_factory=dict)

    @property
    def num_slots(self) -> int:
        return max(v.parallelism for v in self.vertices.values())

    def subtasks_in_slot(self, slot: int) -> list[tuple[int, int]]:
        return [(v.vertex_id, slot) for v in self.vertices.values() if slot < v.parallelism]

    def all_subtasks(self) -> list[tuple[int, int]]:
        return [(v.vertex_id, i) for v in self.vertices.values() for i in range(v.parallelism)]

    def edge_targets(self, edge_id: int, upstream_subtask: int) -> list[int]:
        """Downstream subtasks that upstream subtask `upstream_subtask` sends to on this edge."""
        edge = self.edges[edge_id]
        if edge.partitioner.pointwise:
            return [upstream_subtask]
        return list(range(self.vertices[edge.target_vertex].parallelism))

    def input_channels(self, vertex_id: int, subtask: int) -> list[tuple[int, int]]:
        """(edge id, upstream subtask) for each input channel of a subtask, by channel index."""
        channels = []
        for edge_id in self.vertices[vertex_id].input_edges:
            edge = self.edges[edge_id]
            upstream_p = self.vertices[edge.source_vertex].parallelism
            for u in range(upstream_p):
                if subtask in self.edge_targets(edge_id, u):
                    channels.append((edge_id, u))
        return channels

    def channel_inputs(self, vertex_id: int, subtask: int) -> tuple[int, ...]:
        """The operator input (0 or 1) each input channel of a subtask feeds, by channel index."""
        return tuple(
            self.edges[edge_id].target_input
            for edge_id, _ in self.input_channels(vertex_id, subtask)
        )

    def operator(self, uid: str) -> tuple[VertexSpec, OperatorSpec]:
        for v in self.vertices.values():
            for op in v.operators:
                if op.uid == uid:
                    return v, op
        raise KeyError(uid)
