"""StreamGraph: the transformations the user's DataStream calls create, in creation order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.common.typeinfo import TypeInformation
from tidegate.runtime.partitioners import Partitioner


@dataclass(eq=False)
class Transformation:
    id: int
    kind: str
    name: str
    #: creates the runtime operator (picklable; holds the user function); for a source or
    #: sink it takes the connector: `make_operator(connector)`
    make_operator: Callable[..., Any]
    #: (upstream transformation, partitioner or None for the default: forward if the
    #: parallelism matches, else rebalance)
    inputs: list[tuple[Transformation, Partitioner | None]] = field(default_factory=list)
    parallelism: int | None = None
    uid: str | None = None
    chaining: bool = True
    start_new_chain: bool = False
    is_source: bool = False
    #: the job graph needs key groups (a keyed operator is present)
    keyed: bool = False
    #: a two-input operator's input (0: first, 1: second) of each entry of `inputs`; empty
    #: for a one-input operator (every entry feeds its only input)
    input_indices: tuple[int, ...] = ()
    #: a source whose input ends (None for other transformations)
    bounded: bool | None = None
    #: the declared type of the records this operator emits (None: none was declared, PyFlink's
    #: PICKLED_BYTE_ARRAY); it decides how print() writes them
    output_type: TypeInformation | None = None
    #: a source's or sink's connector; the job graph binds it to the job's filesystems
    #: (connectors/base.py `UsesFileSystems`) before it is handed to `make_operator`
    connector: Any = None

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid or 'auto'})"


@dataclass
class StreamGraph:
    transformations: list[Transformation] = field(default_factory=list)
    _next_id: int = 1

    def add(self, **kwargs: Any) -> Transformation:
        t = Transformation(id=self._next_id, **kwargs)
        self._next_id += 1
        self.transformations.append(t)
        return t

    def reachable(self) -> list[Transformation]:
        """The transformations that lead to a sink, in creation order (dangling branches are
        dropped, as in Flink)."""
        needed: set[int] = set()
        stack = [t for t in self.transformations if t.kind == "sink"]
        while stack:
            t = stack.pop()
            if t.id not in needed:
                needed.add(t.id)
                stack.extend(u for u, _ in t.inputs)
        return [t for t in self.transformations if t.id in needed]

    def clear_sinks(self) -> None:
        """Forget the sinks of an executed job, as Flink clears its transformations: the next
        `execute()` runs only the sinks added since (and what leads to them)."""
        self.transformations = [t for t in self.transformations if t.kind != "sink"]
