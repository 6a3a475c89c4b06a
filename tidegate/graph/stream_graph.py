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
    #: creates the runtime operator (picklable; holds the user function)
    make_operator: Callable[[], Any]
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
    #: the declared type of the records this operator emits (None: none was declared, PyFlink's
    #: PICKLED_BYTE_ARRAY); it decides how print() writes them
    output_type: TypeInformation | None = None

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid or 'auto'})"


@dataclass
class StreamGraph:
    transformations: list[Transformation] = field(default_factory=list)

    def add(self, **kwargs: Any) -> Transformation:
        t = Transformation(id=len(self.transformations) + 1, **kwargs)
        self.transformations.append(t)
        return t
