"""State files: layout, index, and refusal to load damaged or truncated files."""

from __future__ import annotations

import json

import pytest

from tidegate.checkpoint.errors import CheckpointError
from tidegate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.snapshot_format import (
    CorruptStateError,
    StateFileIndex,
    read_index,
    read_key_group,
    read_key_groups,
    read_operator_state,
    write_state_file,
)

M = 128


@pytest.fixture
def state_file(tmp_path):
    """A real state file with keyed state in many key groups and operator state."""
    backend = HeapKeyedStateBackend(M, range(M))
    value = backend.get_state(ValueStateDescriptor("v"))
    events = backend.get_list_state(ListStateDescriptor("l"))
    for key in range(1000):
        backend.current_key = key
        value.update(key * 2)
        events.add(key)
    path = tmp_path / "op-0.state"
    with path.open("wb") as f:
        index = write_state_file(f, backend.snapshot(), {"offsets": ("split", [1, 2])})
    return path, index


def test_the_index_locates_every_key_group_and_the_operator_state(state_file):
    path, index = state_file
    assert index.size == path.stat().st_size
    assert sorted(index.key_group_offsets) == list(index.key_group_offsets)
    assert index.max_parallelism == M
    assert index.state_kinds == {"v": "value", "l": "list"}
    with path.open("rb") as f:
        assert read_operator_state(f, index) == {"offsets": ("split", [1, 2])}
        kg, data = next(read_key_groups(f, index, range(M)))
        assert read_key_group(f, index, kg) == data
        assert set(data) == {"v", "l"}


def test_a_key_group_without_entries_reads_as_empty(tmp_path):
    path = tmp_path / "empty.state"
    with path.open("wb") as f:
        index = write_state_file(f, None, None)
    with path.open("rb") as f:
        assert read_key_group(f, index, 7) == {}
        assert read_operator_state(f, index) == {}
        assert list(read_key_groups(f, index, range(M))) == []


def test_read_key_groups_reads_only_the_requested_range(state_file):
    path, index = state_file
    with path.open("rb") as f:
        kgs = [kg for kg, _ in read_key_groups(f, index, range(10, 20))]
    assert kgs == [kg for kg in sorted(index.key_group_offsets) if 10 <= kg < 20]


def test_the_index_survives_json_and_can_be_recovered_from_the_file(state_file):
    path, index = state_file
    assert StateFileIndex.from_json(json.loads(json.dumps(index.to_json()))) == index
    with path.open("rb") as f:
        assert read_index(f) == index


def test_an_index_of_another_version_is_refused(state_file):
    _, index = state_file
    data = index.to_json() | {"version": 99}
    with pytest.raises(CorruptStateError, match="index version 99"):
        StateFileIndex.from_json(data)


def test_a_flipped_byte_in_a_key_group_is_a_corrupt_state_error(state_file):
    path, index = state_file
    kg, (offset, length) = next(iter(index.key_group_offsets.items()))
    flip_byte(path, offset + length // 2)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match=f"checksum .* kg:{kg}"):
        read_key_group(f, index, kg)


def test_a_flipped_byte_in_the_operator_state_is_a_corrupt_state_error(state_file):
    path, index = state_file
    flip_byte(path, index.operator_offset[0] + index.operator_offset[1] - 1)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="section op"):
        read_operator_state(f, index)


def test_reading_a_key_group_at_another_key_groups_offset_fails_its_checksum(state_file):
    path, index = state_file
    (_, first_location), (kg2, _) = list(index.key_group_offsets.items())[:2]
    swapped = StateFileIndex({kg2: first_location}, None, index.size, M, index.state_kinds)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="checksum"):
        read_key_group(f, swapped, kg2)


def test_a_truncated_file_is_a_corrupt_state_error(state_file):
    path, index = state_file
    path.write_bytes(path.read_bytes()[: index.size // 2])
    last_kg = max(index.key_group_offsets)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="truncated"):
        read_key_group(f, index, last_kg)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="truncated"):
        read_index(f)


def test_a_file_cut_inside_its_header_is_a_corrupt_state_error(state_file):
    path, index = state_file
    path.write_bytes(path.read_bytes()[:3])
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="no header"):
        read_operator_state(f, index)


def test_a_file_that_is_not_a_state_file_is_refused(state_file):
    path, index = state_file
    flip_byte(path, 0)
    with path.open("rb") as f, pytest.raises(CorruptStateError, match="not a tidegate state"):
        read_key_group(f, index, 0)


def test_corrupt_state_is_a_checkpoint_error_that_says_what_to_do(state_file):
    path, index = state_file
    flip_byte(path, index.operator_offset[0] + 5)
    with path.open("rb") as f, pytest.raises(CheckpointError) as caught:
        read_operator_state(f, index)
    assert isinstance(caught.value, CorruptStateError)
    assert str(path) in str(caught.value)
    assert "restore from an older checkpoint" in str(caught.value)


def flip_byte(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
