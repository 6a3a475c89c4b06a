"""State as Spark DataFrames: Flink's State Processor API, on Spark.

Read the state of any completed checkpoint or savepoint (`read_keyed_state`,
`read_operator_state`, `read_broadcast_state`, `read_timers`, `list_state`, or a
`SavepointReader`), and write new savepoints bootstrapped from DataFrames (`SavepointWriter`)
that a job can start from.
docs/state-processor.md is the reference.
"""

from __future__ import annotations

from tidegate.state_processor.reader import (
    SavepointReader,
    list_state,
    read_broadcast_state,
    read_keyed_state,
    read_operator_state,
    read_timers,
)
from tidegate.state_processor.snapshot import (
    StateInfo,
    StateNotFoundError,
    UnsupportedSnapshotError,
)
from tidegate.state_processor.writer import SavepointWriter

__all__ = [
    "SavepointReader",
    "SavepointWriter",
    "StateInfo",
    "StateNotFoundError",
    "UnsupportedSnapshotError",
    "list_state",
    "read_broadcast_state",
    "read_keyed_state",
    "read_operator_state",
    "read_timers",
]
