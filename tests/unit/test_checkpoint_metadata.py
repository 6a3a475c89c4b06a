"""The versioned `_metadata` envelope."""

from __future__ import annotations

import json

import pytest

from tidegate.checkpoint.errors import CorruptCheckpointError
from tidegate.checkpoint.metadata import FORMAT_VERSION, decode_metadata, encode_metadata

PATH = "/ckpt/job/chk-3/_metadata"


def content(**overrides: object) -> dict:
    base = {"job_id": "job", "checkpoint_id": 3, "timestamp_ms": 1_000, "operators": {"map": []}}
    return {**base, **overrides}


def raw(**document: object) -> bytes:
    return json.dumps(document).encode()


def test_metadata_round_trips_with_format_and_version_stamped():
    decoded = decode_metadata(encode_metadata(content(extra=[1, 2])), PATH)
    assert decoded == {
        "format": "tidegate-checkpoint",
        "version": FORMAT_VERSION,
        **content(extra=[1, 2]),
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"job_id": "job", "checkpoint_id": 3, "timestamp_ms": 1},  # no operators
        content(checkpoint_id="3"),
        content(timestamp_ms=True),
        content(format="other"),
        content(version=2),
        content(operators={1.5: float("nan")}),
    ],
)
def test_encoding_refuses_metadata_that_could_not_be_read_back(bad):
    with pytest.raises(ValueError):
        encode_metadata(bad)


def test_decoding_bytes_that_are_not_json_names_the_file():
    with pytest.raises(CorruptCheckpointError, match=r"chk-3/_metadata.*not UTF-8 JSON"):
        decode_metadata(b'{"format": "tidegate-chec', PATH)


@pytest.mark.parametrize("document", [[1, 2], {"format": "flink"}, {"version": 1}])
def test_decoding_something_else_says_it_is_not_a_tidegate_checkpoint(document):
    with pytest.raises(CorruptCheckpointError, match="is not a tidegate checkpoint"):
        decode_metadata(json.dumps(document).encode(), PATH)


def test_decoding_a_newer_version_asks_to_upgrade():
    data = raw(format="tidegate-checkpoint", version=FORMAT_VERSION + 1, **content())
    with pytest.raises(CorruptCheckpointError, match=f"{PATH}.*version 2.*upgrade tidegate"):
        decode_metadata(data, PATH)


def test_decoding_a_missing_version_is_corrupt():
    with pytest.raises(CorruptCheckpointError, match="no valid format version"):
        decode_metadata(raw(format="tidegate-checkpoint", **content()), PATH)


def test_decoding_metadata_without_a_required_key_names_the_key():
    document = content()
    del document["operators"]
    data = raw(format="tidegate-checkpoint", version=1, **document)
    with pytest.raises(CorruptCheckpointError, match="missing key 'operators'"):
        decode_metadata(data, PATH)
