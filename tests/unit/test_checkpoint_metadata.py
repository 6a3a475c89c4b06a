"""The versioned `_metadata` envelope (format version 2: with a checksum of its content)."""

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
    canonical_json,
    decode_metadata,
    encode_metadata,
)
from tidegate.state.checksums import checksum_of

PATH = "/ckpt/job/chk-3/_metadata"


def content(**overrides: object) -> dict:
    base = {
        "job_id": "job",
        "checkpoint_id": 3,
        "timestamp_ms": 1_000,
        "generation": 4,
        "operators": {"map": []},
    }
    return {**base, **overrides}


def raw(**document: object) -> bytes:
    """A `_metadata` file as a writer would produce it, with a correct checksum."""
    document = {k: v for k, v in document.items() if k != "checksum"}
    return json.dumps({**document, "checksum": checksum_of(canonical_json(document))}).encode()


def test_metadata_round_trips_with_format_and_version_stamped():
    decoded = decode_metadata(encode_metadata(content(extra=[1, 2])), PATH)
    assert decoded == {
        "format": "tidegate-checkpoint",
        "version": FORMAT_VERSION,
        **content(extra=[1, 2]),
    }
    assert FORMAT_VERSION == 2


def test_the_checksum_covers_the_content_and_survives_reformatting():
    document = json.loads(encode_metadata(content(operators={"map": {"0": {"size": 12}}})))
    assert document["checksum"].startswith("crc32:")
    reindented = json.dumps(document, indent=4).encode()  # a user pretty-printed the file
    assert decode_metadata(reindented, PATH)["operators"] == {"map": {"0": {"size": 12}}}


def test_integer_keys_are_checksummed_as_the_reader_sees_them():
    # JSON turns {10: ..., 2: ...} into string keys, which sort differently
    decoded = decode_metadata(encode_metadata(content(operators={10: "a", 2: "b"})), PATH)
    assert decoded["operators"] == {"10": "a", "2": "b"}


def test_a_changed_value_that_is_still_valid_json_is_detected_by_the_checksum():
    data = encode_metadata(content(operators={"map": {"0": {"size": 12}}}))
    tampered = data.replace(b'"size": 12', b'"size": 13')
    assert tampered != data
    with pytest.raises(CorruptCheckpointError, match=rf"{PATH} is damaged.*checksum"):
        decode_metadata(tampered, PATH)


@pytest.mark.parametrize("checksum", [None, "crc32:xyz", "md5:00000000", 12])
def test_metadata_without_a_valid_checksum_is_corrupt(checksum):
    document = json.loads(encode_metadata(content()))
    document["checksum"] = checksum
    if checksum is None:
        del document["checksum"]
    with pytest.raises(CorruptCheckpointError, match="no valid checksum"):
        decode_metadata(json.dumps(document).encode(), PATH)


@pytest.mark.parametrize(
    "bad",
    [
        {"job_id": "job", "checkpoint_id": 3, "timestamp_ms": 1, "generation": 1},  # no operators
        content(checkpoint_id="3"),
        content(timestamp_ms=True),
        content(generation=None),
        content(format="other"),
        content(version=1),
        content(checksum="crc32:00000000"),
        content(operators={1.5: float("nan")}),
    ],
)
def test_encoding_refuses_metadata_that_could_not_be_read_back(bad):
    with pytest.raises(ValueError):
        encode_metadata(bad)


def test_decoding_bytes_that_are_not_json_names_the_file():
    with pytest.raises(CorruptCheckpointError, match=r"chk-3/_metadata.*not UTF-8 JSON"):
        decode_metadata(b'{"format": "tidegate-chec', PATH)


@pytest.mark.parametrize("document", [[1, 2], {"format": "flink"}, {"version": 2}])
def test_decoding_something_else_says_it_is_not_a_tidegate_checkpoint(document):
    with pytest.raises(CorruptCheckpointError, match="is not a tidegate checkpoint"):
        decode_metadata(json.dumps(document).encode(), PATH)


def test_decoding_a_newer_version_asks_to_upgrade():
    # version 3 is that of checkpoints with incremental keyed state (read below)
    data = raw(format="tidegate-checkpoint", version=FORMAT_VERSION + 2, **content())
    with pytest.raises(UnsupportedFormatVersionError, match=f"{PATH}.*version 4.*upgrade tidegate"):
        decode_metadata(data, PATH)


def test_metadata_with_incremental_keyed_state_is_version_3_and_read_back():
    incremental = {"file": "a.state", "incremental": {"shared": [], "private": []}}
    operators = {"op": {"parallelism": 1, "subtasks": {"0": incremental}}}
    decoded = decode_metadata(encode_metadata({**content(), "operators": operators}), PATH)
    assert decoded["version"] == 3
    assert decode_metadata(encode_metadata(content()), PATH)["version"] == FORMAT_VERSION


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
