"""`_metadata`: the typed model round-trips through the versioned file format (format version 2,
or 3 with incremental state; a checksum of its content), and damage is reported naming the file."""

from __future__ import annotations

import json

import pytest

from tidegate.checkpoint.errors import (
    CheckpointIntegrityError,
    CorruptCheckpointError,
    UnsupportedFormatVersionError,
)
from tidegate.checkpoint.metadata import (
    FORMAT_VERSION,
    ChannelStateMetadata,
    CheckpointMetadata,
    OperatorMetadata,
    RewrittenFrom,
    canonical_json,
    decode_metadata,
    encode_metadata,
)
from tidegate.state.checksums import checksum_of
from tidegate.state.handles import (
    HEAP_CHANGELOG,
    ChannelStateHandle,
    IncrementalFile,
    IncrementalHandle,
    StateHandle,
)
from tidegate.state.snapshot_format import StateFileIndex

PATH = "/ckpt/job/chk-3/_metadata"


def content(**overrides: object) -> dict:
    """The JSON content of a minimal `_metadata` (as a writer would produce it)."""
    base = {
        "job_id": "job",
        "checkpoint_id": 3,
        "timestamp_ms": 1_000,
        "generation": 4,
        "operators": {},
    }
    return {**base, **overrides}


def raw(**document: object) -> bytes:
    """A `_metadata` file as a writer would produce it, with a correct checksum."""
    document = {k: v for k, v in document.items() if k != "checksum"}
    return json.dumps({**document, "checksum": checksum_of(canonical_json(document))}).encode()


INDEX = StateFileIndex({3: (8, 40), 7: (48, 20)}, (68, 30), 120, 128, {"count": "value"})


def sample(**overrides: object) -> CheckpointMetadata:
    """A checkpoint with every kind of content: keyed and operator state, channel state."""
    handle = StateHandle(
        file="count-0-g4-abc.state", size=120, checksum="crc32:0000abcd", index=INDEX,
        key_group_range=range(0, 64),
    )  # fmt: skip
    fields = {
        "job_id": "job",
        "job_name": "running count",
        "checkpoint_id": 3,
        "timestamp_ms": 1_000,
        "completed_ms": 1_050,
        "duration_ms": 50,
        "attempt": 1,
        "generation": 4,
        "max_parallelism": 128,
        "size_bytes": 142,
        "operators": {"count": OperatorMetadata("Process", 2, {0: handle})},
        "channel_state": {
            "count": ChannelStateMetadata(
                2, ((1, 0), (1, 1)), {1: ChannelStateHandle(file="ch.inflight", size=22, frames=2)}
            )
        },
    }
    return CheckpointMetadata(**{**fields, **overrides})


def test_metadata_round_trips_with_format_and_version_stamped():
    metadata = sample(rewritten_from=RewrittenFrom("/old", 2, 13, "abc123"))
    data = encode_metadata(metadata)
    assert decode_metadata(data, PATH) == metadata
    document = json.loads(data)
    assert (document["format"], document["version"]) == ("tidegate-checkpoint", FORMAT_VERSION)
    assert document["operators"]["count"]["subtasks"]["0"]["key_group_range"] == [0, 64]
    assert FORMAT_VERSION == 2


def test_the_checksum_covers_the_content_and_survives_reformatting():
    document = json.loads(encode_metadata(sample()))
    assert document["checksum"].startswith("crc32:")
    reindented = json.dumps(document, indent=4).encode()  # a user pretty-printed the file
    assert decode_metadata(reindented, PATH) == sample()


def test_a_changed_value_that_is_still_valid_json_is_detected_by_the_checksum():
    data = encode_metadata(sample())
    tampered = data.replace(b'"size": 120', b'"size": 121')
    assert tampered != data
    with pytest.raises(CorruptCheckpointError, match=rf"{PATH} is damaged.*checksum"):
        decode_metadata(tampered, PATH)


@pytest.mark.parametrize("checksum", [None, "crc32:xyz", "md5:00000000", 12])
def test_metadata_without_a_valid_checksum_is_corrupt(checksum):
    document = json.loads(encode_metadata(sample()))
    document["checksum"] = checksum
    if checksum is None:
        del document["checksum"]
    with pytest.raises(CorruptCheckpointError, match="no valid checksum"):
        decode_metadata(json.dumps(document).encode(), PATH)


@pytest.mark.parametrize(
    "bad",
    [
        content(checkpoint_id="3"),
        content(timestamp_ms=True),
        content(generation=None),
        content(operators={"map": {"parallelism": "two", "subtasks": {}}}),
        content(operators={"map": {"parallelism": 1, "subtasks": {"x": {}}}}),
        content(operators={"map": {"parallelism": 1, "subtasks": {"0": {"size": 1}}}}),
        content(channel_state={"map": {"subtasks": {}}}),
    ],
)
def test_decoding_malformed_content_is_corrupt_and_names_the_file(bad):
    with pytest.raises(CorruptCheckpointError, match=PATH):
        decode_metadata(raw(format="tidegate-checkpoint", version=2, **bad), PATH)


def test_encoding_refuses_values_json_cannot_hold():
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_metadata(sample(job_name=float("nan")))


def test_decoding_bytes_that_are_not_json_names_the_file():
    with pytest.raises(CorruptCheckpointError, match=r"chk-3/_metadata.*not UTF-8 JSON"):
        decode_metadata(b'{"format": "tidegate-chec', PATH)


@pytest.mark.parametrize("document", [[1, 2], {"format": "flink"}, {"version": 2}])
def test_decoding_something_else_says_it_is_not_a_tidegate_checkpoint(document):
    with pytest.raises(CorruptCheckpointError, match="is not a tidegate checkpoint"):
        decode_metadata(json.dumps(document).encode(), PATH)


def test_decoding_a_newer_version_asks_to_upgrade():
    # versions 3 to 5 are those of checkpoints with incremental keyed state (read below)
    data = raw(format="tidegate-checkpoint", version=FORMAT_VERSION + 4, **content())
    with pytest.raises(UnsupportedFormatVersionError, match=f"{PATH}.*version 6.*upgrade tidegate"):
        decode_metadata(data, PATH)


def test_metadata_with_incremental_keyed_state_is_version_3_and_read_back():
    inc = IncrementalHandle(
        backend_id="b1", base_checkpoint_id=None, key_group_range=range(0, 128),
        max_parallelism=128, state_kinds={"count": "value"},
        shared=(IncrementalFile(name="1.sst", file="../shared/1.sst", size=9, uploaded=True),),
        private=(IncrementalFile(name="CURRENT", file="CURRENT-1", size=16),),
    )  # fmt: skip
    handle = StateHandle(file="a.state", size=30, index=INDEX, incremental=inc)
    incremental = sample(operators={"op": OperatorMetadata("op", 1, {0: handle})})
    data = encode_metadata(incremental)
    assert json.loads(data)["version"] == 3
    assert decode_metadata(data, PATH) == incremental
    assert decode_metadata(data, PATH).is_incremental
    assert json.loads(encode_metadata(sample()))["version"] == FORMAT_VERSION


def test_metadata_with_a_hashmap_changelog_chain_is_version_4_and_read_back():
    inc = IncrementalHandle(
        backend_id="b1", base_checkpoint_id=3, key_group_range=range(0, 128),
        max_parallelism=128, state_kinds={"count": "value"},
        shared=(
            IncrementalFile(name="materialized-3", file="../shared/m.state", size=9,
                            uploaded=False),
            IncrementalFile(name="changelog-4", file="../shared/c.state", size=5, uploaded=True),
        ),
        private=(), backend=HEAP_CHANGELOG,
    )  # fmt: skip
    handle = StateHandle(file="a.state", size=30, index=INDEX, incremental=inc)
    chain = sample(operators={"op": OperatorMetadata("op", 1, {0: handle})})
    data = encode_metadata(chain)
    assert json.loads(data)["version"] == 4  # a version-3 reader would take them for RocksDB's
    assert decode_metadata(data, PATH) == chain
    document = json.loads(data)
    document["operators"]["op"]["subtasks"]["0"]["incremental"]["backend"] = "lsm"
    with pytest.raises(CorruptCheckpointError, match="unknown incremental state 'lsm'"):
        decode_metadata(raw(**document), PATH)


def test_metadata_with_rocksdb_changelogs_is_version_5_and_read_back():
    inc = IncrementalHandle(
        backend_id="b1", base_checkpoint_id=3, key_group_range=range(0, 128),
        max_parallelism=128, state_kinds={"count": "value"},
        shared=(
            IncrementalFile(name="1.sst", file="../shared/1.sst", size=9, uploaded=False),
            IncrementalFile(name="CURRENT", file="../shared/CURRENT", size=16, uploaded=False),
            IncrementalFile(name="changelog-4", file="../shared/c.state", size=5, uploaded=True),
        ),
        private=(),
    )  # fmt: skip
    handle = StateHandle(file="a.state", size=30, index=INDEX, incremental=inc)
    chain = sample(operators={"op": OperatorMetadata("op", 1, {0: handle})})
    data = encode_metadata(chain)
    assert json.loads(data)["version"] == 5  # a version-4 reader would skip the changelogs
    assert decode_metadata(data, PATH) == chain


def test_decoding_version_1_says_it_is_an_unsupported_pre_release_format():
    # version 1 (no checksums) was never released: a clear error, no conversion
    document = {"format": "tidegate-checkpoint", "version": 1, **content()}
    with pytest.raises(UnsupportedFormatVersionError, match=r"version 1.*pre-release.*without"):
        decode_metadata(json.dumps(document).encode(), PATH)


def test_an_unsupported_version_is_an_integrity_error_a_restore_may_fall_back_from():
    assert issubclass(UnsupportedFormatVersionError, CheckpointIntegrityError)
    assert issubclass(CorruptCheckpointError, CheckpointIntegrityError)


def test_decoding_a_missing_version_is_corrupt():
    with pytest.raises(CorruptCheckpointError, match="no valid format version"):
        decode_metadata(raw(format="tidegate-checkpoint", **content()), PATH)


def test_decoding_metadata_without_a_required_key_names_the_key():
    document = content()
    del document["generation"]
    data = raw(format="tidegate-checkpoint", version=2, **document)
    with pytest.raises(CorruptCheckpointError, match="missing key 'generation'"):
        decode_metadata(data, PATH)
