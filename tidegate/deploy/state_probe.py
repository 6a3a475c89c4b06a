"""Which states each operator of a job graph declares: found by running its functions' setup.

State in tidegate is declared by code, not by configuration: a function registers its states in
`open()` (keyed state through the runtime context) or in `initialize_state()` (a
CheckpointedFunction's operator and keyed state). So the pre-flight restore check
(`tidegate check-restore`) instantiates every operator chain of subtask 0 and calls those two
methods, then `close()`, against state backends that hold the snapshot's state names and kinds
(no data). A state registered under a name the snapshot has with another kind fails there with
the very error a real restore would raise. Connector operators (sources, sinks) are not set up:
their setup opens readers and commits transactions; their state is reported from the snapshot.

Exceptions from user code are caught and reported, never raised.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.runtime.connector_operators import SinkOperator, SourceOperator
from tidegate.runtime.context import InitializationContext
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.plan import JobGraph, OperatorSpec, VertexSpec
from tidegate.state.heap import HeapKeyedStateBackend, StateKind
from tidegate.state.keygroups import key_group_range

__all__ = ["DeclaredState", "probe_declared_state"]


@dataclass
class DeclaredState:
    """What one operator declared when its functions were set up."""

    #: keyed state name -> kind ("value", "list", "map", "reducing", "aggregating")
    keyed: dict[str, str] = field(default_factory=dict)
    #: operator state name -> mode ("split", "union", ...)
    operator: dict[str, str] = field(default_factory=dict)
    #: the operator wraps a connector, whose setup is not run
    connector: bool = False
    #: the one-line error its setup raised (None: it ran through)
    error: str | None = None


def probe_declared_state(
    graph: JobGraph,
    max_parallelism: int,
    snapshot_kinds: Mapping[str, Mapping[str, str]],
    snapshot_modes: Mapping[str, Mapping[str, str]],
) -> dict[str, DeclaredState]:
    """uid -> the state its operator declares, for every operator of `graph`.

    `snapshot_kinds` (uid -> keyed state name -> kind) and `snapshot_modes` (uid -> operator
    state name -> mode) are what the snapshot holds; they are loaded (without entries) before
    setup, so registering one of them with another kind fails as it would on restore.
    """
    declared: dict[str, DeclaredState] = {}
    for vertex in graph.vertices.values():
        for spec in vertex.operators:
            declared[spec.uid] = _probe(
                vertex,
                spec,
                max_parallelism,
                snapshot_kinds.get(spec.uid, {}),
                snapshot_modes.get(spec.uid, {}),
            )
    return declared


def _probe(
    vertex: VertexSpec,
    spec: OperatorSpec,
    max_parallelism: int,
    kinds: Mapping[str, str],
    modes: Mapping[str, str],
) -> DeclaredState:
    result = DeclaredState()
    try:
        op = spec.factory()
    except Exception as exc:
        result.error = _describe(exc, "creating the operator")
        return result
    if isinstance(op, SourceOperator | SinkOperator):
        result.connector = True
        return result
    op.uid, op.name = spec.uid, spec.name
    op.ctx = OperatorRuntime(0, vertex.parallelism, max_parallelism, 0, is_restored=True)
    if op.keyed:
        kg_range = key_group_range(0, vertex.parallelism, max_parallelism)
        op.keyed_backend = _RecordingKeyedBackend(max_parallelism, kg_range, kinds, result)
    op.operator_state.restore({name: (mode, []) for name, mode in modes.items()})
    _record_operator_state(op.operator_state, result)
    try:
        # Step 1: CheckpointedFunction.initialize_state, as StreamOperator.initialize_state
        fn = op.function
        if hasattr(fn, "initialize_state") and hasattr(fn, "snapshot_state"):
            fn.initialize_state(InitializationContext(True, op.operator_state, op.keyed_backend))
        # Step 2: open() (the operator's own setup, then the function's)
        op.open()
    except Exception as exc:
        result.error = _describe(exc, "setting up its functions")
    try:
        op.close()
    except Exception as exc:
        result.error = result.error or _describe(exc, "closing its functions")
    return result


class _RecordingKeyedBackend(HeapKeyedStateBackend):
    """An empty keyed backend that knows the snapshot's state kinds and records registrations."""

    def __init__(
        self,
        max_parallelism: int,
        key_groups: range,
        kinds: Mapping[str, str],
        result: DeclaredState,
    ) -> None:
        super().__init__(max_parallelism, key_groups)
        self._kinds.update({name: StateKind(kind) for name, kind in kinds.items()})
        self._result = result

    def _register(self, name: str, kind: StateKind, *args: Any) -> Any:
        self._result.keyed.setdefault(name, kind.value)
        return super()._register(name, kind, *args)


def _record_operator_state(backend: Any, result: DeclaredState) -> None:
    """Record every operator state `backend` registers (it is a fresh probe instance)."""
    register = backend._register

    def recording(name: str, mode: Any) -> Any:
        result.operator.setdefault(name, str(getattr(mode, "value", mode)))
        return register(name, mode)

    backend._register = recording


def _describe(exc: BaseException, during: str) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__} while {during}: {text}{at}"
