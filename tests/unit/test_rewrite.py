"""`rewrite_max_parallelism` on a snapshot written file by file here: a keyed operator that also
has split and union operator state, rewritten to another parallelism, restores the same
operator state at any parallelism as the original does."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from tests.support.snapshots import metadata_of
from tidegate.checkpoint.assignment import redistribute_operator_state
from tidegate.checkpoint.rewrite import rewrite_max_parallelism
from tidegate.checkpoint.storage import CheckpointStorage, read_checkpoint_metadata
from tidegate.state.checksums import ChecksummingWriter
from tidegate.state.keygroups import key_group_range, stable_hash
from tidegate.state.snapshot_format import (
    KeyedStateSnapshot,
    read_key_groups,
    read_operator_state,
    write_state_file,
)

OLD_M = 16
OPERATOR_STATE = [
    {"buffer": ("split", ["a0", "a1", "a2"]), "seen": ("union", ["u0"])},
    {"buffer": ("split", ["b0", "b1"]), "seen": ("union", ["u1"])},
]


def write_snapshot(directory: Path) -> str:
    storage = CheckpointStorage(str(directory.parent), "unused")
    subtasks = {}
    for i in range(2):
        groups = key_group_range(i, 2, OLD_M)
        keys = [k for k in range(300) if stable_hash(k) % OLD_M in groups]
        tables = {"total": ("value", {k: k * 10 for k in keys}), "names": ("list", {})}
        tables["names"][1].update({k: [str(k)] for k in keys[:5]})
        name = f"agg-{i}-0123456789ab.state"
        with ChecksummingWriter(storage.open_write(f"{directory}/{name}"), name) as f:
            index = write_state_file(
                f, KeyedStateSnapshot(OLD_M, groups, tables), OPERATOR_STATE[i]
            )
        subtasks[str(i)] = {
            "file": f.name,
            "size": f.size,
            "checksum": f.checksum,
            "index": index.to_json(),
            "key_group_range": [groups.start, groups.stop],
        }
    metadata = metadata_of(
        job_id="j" * 32,
        checkpoint_id=4,
        timestamp_ms=1,
        generation=1,
        is_savepoint=True,
        max_parallelism=OLD_M,
        operators={"agg": {"name": "Agg", "parallelism": 2, "subtasks": subtasks}},
        channel_state={},
    )
    storage.write_metadata(str(directory), metadata)
    return str(directory)


def state_of(path: str) -> tuple[dict, list]:
    """({(state, key): value}, each subtask's operator state) of operator agg."""
    metadata = read_checkpoint_metadata(path)
    keyed, operator = {}, []
    for handle in metadata.operators["agg"].handles():
        with fsspec.open(f"{path}/{handle.file}", "rb") as f:
            for _kg, data in read_key_groups(f, handle.index, handle.key_group_range):
                for name, (_kind, table) in data.items():
                    keyed.update({(name, k): v for k, v in table.items()})
            operator.append(read_operator_state(f, handle.index))
    return keyed, operator


@pytest.mark.parametrize("new_parallelism", [1, 2, 3, 5])
def test_operator_state_of_a_keyed_operator_restores_as_before_at_any_parallelism(
    tmp_path, new_parallelism
):
    source = write_snapshot(tmp_path / "source")
    target = str(tmp_path / "target")

    rewrite_max_parallelism(source, target, 7, new_parallelism)

    old_keyed, old_operator = state_of(source)
    new_keyed, new_operator = state_of(target)
    assert new_keyed == old_keyed
    assert len(new_operator) == new_parallelism
    for restore_parallelism in (1, 2, 3, 4):
        assert redistribute_operator_state(
            new_operator, restore_parallelism
        ) == redistribute_operator_state(old_operator, restore_parallelism)


def test_at_the_same_parallelism_operator_state_stays_with_its_subtask(tmp_path):
    source = write_snapshot(tmp_path / "source")
    target = str(tmp_path / "target")

    rewrite_max_parallelism(source, target, 64)

    assert state_of(target)[1] == OPERATOR_STATE
    assert read_checkpoint_metadata(target).max_parallelism == 64
