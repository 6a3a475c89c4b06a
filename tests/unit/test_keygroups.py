"""Tests for tidegate.state.keygroups: the stable key hash, key-group ranges and the assigner."""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import json
import os
import random
import struct
import subprocess
import sys
import uuid
import warnings
import zlib
from collections import namedtuple
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

import tidegate
from tidegate.state import keygroups
from tidegate.state.keygroups import (
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupAssigner,
    UnstableKeyHashWarning,
    assign_to_key_group,
    compute_default_max_parallelism,
    key_group_range,
    murmur_fmix32,
    stable_hash,
    subtask_for_key_group,
)

Color = enum.Enum("Color", {"RED": 1})
Level = enum.IntEnum("Level", {"HIGH": 1})
Mode = enum.StrEnum("Mode", {"FAST": "fast"})
Pair = namedtuple("Pair", "left right")


@dataclass(frozen=True)
class UserKey:
    tenant: str
    user: int
    note: str = field(default="", compare=False)


def fmix_crc(data: bytes) -> int:
    return murmur_fmix32(zlib.crc32(data))


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def test_fmix32_matches_murmur3_reference_vectors_and_is_a_32_bit_bijection() -> None:
    # MurmurHash3_x86_32 of empty input with seed s is fmix32(s).
    assert [murmur_fmix32(s) for s in (0, 1, 0xFFFFFFFF)] == [0, 0x514E28B7, 0x81F16F39]
    rng = random.Random(7)
    inputs = {rng.getrandbits(32) for _ in range(20_000)}
    outputs = {murmur_fmix32(h) for h in inputs}
    assert len(outputs) == len(inputs)
    assert all(0 <= h < 2**32 for h in outputs)


def test_stable_hash_of_scalars_is_fmix_of_crc32_of_the_documented_encoding() -> None:
    assert stable_hash("hello") == fmix_crc(b"shello")
    assert stable_hash(b"hello") == fmix_crc(b"bhello")
    assert stable_hash(1) == fmix_crc(b"i" + struct.pack("<q", 1))
    assert stable_hash(2**64) == fmix_crc(b"I" + (2**64).to_bytes(9, "little", signed=True))
    assert stable_hash(0.5) == fmix_crc(b"f" + struct.pack("<d", 0.5))
    assert stable_hash(None) == fmix_crc(b"n")
    assert stable_hash("\ud800") == fmix_crc(b"s\xed\xa0\x80")  # lone surrogates are hashable
    assert stable_hash(("a", "b")) == fmix_crc(b"t" + u32(2) + u32(2) + b"sa" + u32(2) + b"sb")


def test_stable_hash_values_are_pinned_because_checkpoints_depend_on_them() -> None:
    golden = {
        "": 1826626647,
        "hello": 3841943655,
        "user-42": 1393180653,
        "été 🌊": 2158655737,
        b"hello": 203545594,
        0: 3499760864,
        1: 1546272614,
        -1: 1893944339,
        2**63: 1885787988,
        -(2**63) - 1: 1777828614,
        2**200: 1278289436,
        0.5: 137820681,
        -2.25: 4134011490,
        None: 830372875,
        (): 571640791,
        ("a", "b"): 2879257869,
        ("ab",): 4179807019,
        (1, ("x", None)): 3580120489,
        frozenset({"a", "b"}): 351954773,
        dt.date(2024, 2, 29): 1324741381,
        dt.datetime(2024, 2, 29, 12, 30): 3135636868,
        uuid.UUID(int=1): 713789072,
        Decimal("0.1"): 65935901,
    }
    assert {key: stable_hash(key) for key in golden} == golden


def test_equal_numbers_of_different_types_hash_equal() -> None:
    ones = [1, True, 1.0, Level.HIGH, Fraction(1), Decimal("1.00"), complex(1, 0)]
    assert all(one == 1 for one in ones)
    assert {stable_hash(one) for one in ones} == {stable_hash(1)}
    zeros = [0, False, 0.0, -0.0, Decimal("-0"), complex(-0.0, 0)]
    assert {stable_hash(zero) for zero in zeros} == {stable_hash(0)}
    halves = [0.5, Fraction(1, 2), Decimal("0.5"), complex(0.5, -0.0)]
    assert {stable_hash(half) for half in halves} == {stable_hash(0.5)}
    assert stable_hash(2.0**80) == stable_hash(2**80)
    assert stable_hash(Decimal("0.1")) == stable_hash(Fraction(1, 10))


def test_unequal_keys_of_different_types_hash_differently() -> None:
    keys = ["1", b"1", 1, 1.5, None, (1,), ("1",), frozenset({1}), Color.RED, "", b"", ()]
    assert len({stable_hash(key) for key in keys}) == len(keys)


def test_tuple_boundaries_are_part_of_the_hash() -> None:
    assert stable_hash(("a", "b")) != stable_hash(("ab",))
    assert stable_hash(("a", "b")) != stable_hash((("a",), "b"))
    assert stable_hash(("a",)) != stable_hash("a")
    assert stable_hash(("", "")) != stable_hash(("",))


def test_namedtuples_and_bytearrays_hash_like_the_equal_tuple_and_bytes() -> None:
    assert stable_hash(Pair("a", 2)) == stable_hash(("a", 2))
    assert stable_hash(bytearray(b"abc")) == stable_hash(b"abc")


def test_int_and_str_enums_hash_like_their_value_but_pure_enums_do_not() -> None:
    assert stable_hash(Level.HIGH) == stable_hash(1)
    assert stable_hash(Mode.FAST) == stable_hash("fast")
    assert Color.RED != 1
    assert stable_hash(Color.RED) != stable_hash(1)
    assert stable_hash(Color.RED) == fmix_crc(
        b"e" + u32(2) + u32(6) + b"sColor" + u32(9) + b"i" + struct.pack("<q", 1)
    )


def test_frozen_dataclasses_hash_by_their_compared_fields() -> None:
    assert stable_hash(UserKey("acme", 7, note="a")) == stable_hash(UserKey("acme", 7, note="b"))
    assert stable_hash(UserKey("acme", 7)) != stable_hash(UserKey("acme", 8))
    assert stable_hash(UserKey("acme", 7)) != stable_hash(("acme", 7))


def test_equal_aware_datetimes_in_different_zones_hash_equal() -> None:
    utc_noon = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    paris = dt.datetime(2024, 5, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert utc_noon == paris
    assert stable_hash(utc_noon) == stable_hash(paris)
    assert stable_hash(dt.datetime(2024, 5, 1, 12)) != stable_hash(utc_noon)
    assert stable_hash(dt.datetime(2024, 5, 1)) != stable_hash(dt.date(2024, 5, 1))


def test_frozensets_hash_independently_of_insertion_order() -> None:
    words = [f"w{i}" for i in range(50)]
    shuffled = list(words)
    random.Random(3).shuffle(shuffled)
    assert stable_hash(frozenset(words)) == stable_hash(frozenset(shuffled))
    assert stable_hash(frozenset({1, 2})) != stable_hash(frozenset({1, 3}))


@pytest.mark.parametrize(
    ("key", "advice"),
    [
        ([1, 2], "got list — convert it to a tuple"),
        ({"a": 1}, "got dict — convert it to a tuple of its items"),
        ({1, 2}, "got set — convert it to a frozenset"),
        (("ok", [1]), "got list — convert it to a tuple"),
    ],
)
def test_unhashable_keys_are_rejected_with_actionable_advice(key: object, advice: str) -> None:
    with pytest.raises(TypeError, match="key_by must return a hashable, immutable key") as info:
        stable_hash(key)
    assert advice in str(info.value)


def test_unknown_key_types_fall_back_to_pickle_and_warn_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keygroups, "_warned_fallback_types", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = stable_hash(dt.timedelta(seconds=5))  # no canonical encoding; pickles stably
        assert stable_hash(dt.timedelta(seconds=5)) == first
        assert stable_hash(dt.timedelta(seconds=6)) != first
    assert [w.category for w in caught] == [UnstableKeyHashWarning]
    assert "datetime.timedelta" in str(caught[0].message)
    assert "only stable if this type's pickling is deterministic" in str(caught[0].message)


def test_a_key_that_cannot_be_pickled_is_rejected_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="pickling it failed"):
        stable_hash(lambda: None)


_CROSS_PROCESS_SCRIPT = """
import datetime as dt, enum, json, uuid
from dataclasses import dataclass
from decimal import Decimal
from tidegate.state.keygroups import stable_hash

Color = enum.Enum("Color", {"RED": 1})

@dataclass(frozen=True)
class UserKey:
    tenant: str
    user: int

keys = [
    "", "hello", "été 🌊", b"raw", 0, -7, 2**100, 3.25, None, True, ("a", 1, (None, 2.5)),
    frozenset({"x", "y", "z", "w"}), frozenset({("a", 1), ("b", 2)}), Color.RED,
    UserKey("acme", 7), dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2),
    uuid.UUID(int=99), Decimal("12.5"),
] + [f"user-{i}" for i in range(200)]
print(json.dumps({"salted": hash("probe"), "hashes": [stable_hash(k) for k in keys]}))
"""


def _hashes_in_subprocess(hash_seed: str) -> dict[str, object]:
    repo_root = str(Path(tidegate.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo_root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", _CROSS_PROCESS_SCRIPT]
    return json.loads(subprocess.check_output(command, env=env, text=True, timeout=60))


def test_stable_hash_is_identical_in_processes_with_different_hash_seeds() -> None:
    first = _hashes_in_subprocess("1")
    second = _hashes_in_subprocess("98765")
    assert first["salted"] != second["salted"], "the seeds should change Python's hash()"
    assert first["hashes"] == second["hashes"]
    namespace: dict[str, object] = {"__name__": __name__}
    exec(_CROSS_PROCESS_SCRIPT.replace("print(", "result = ("), namespace)
    assert json.loads(str(namespace["result"]))["hashes"] == first["hashes"]


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [(1, 128), (2, 128), (85, 128), (86, 256), (1000, 2048), (21845, 32768), (32768, 32768)],
)
def test_default_max_parallelism_follows_flinks_formula(parallelism: int, expected: int) -> None:
    assert compute_default_max_parallelism(parallelism) == expected


@pytest.mark.parametrize("parallelism", [0, -1, UPPER_BOUND_MAX_PARALLELISM + 1])
def test_default_max_parallelism_rejects_impossible_parallelism(parallelism: int) -> None:
    with pytest.raises(ValueError, match="parallelism must be between 1 and 32768"):
        compute_default_max_parallelism(parallelism)


@pytest.mark.parametrize(
    ("max_parallelism", "parallelism", "expected"),
    [
        (128, 3, [(0, 42), (43, 85), (86, 127)]),
        (128, 2, [(0, 63), (64, 127)]),
        (13, 4, [(0, 3), (4, 6), (7, 9), (10, 12)]),
        (128, 1, [(0, 127)]),
        (4, 4, [(0, 0), (1, 1), (2, 2), (3, 3)]),
    ],
)
def test_key_group_ranges_match_the_design_examples(
    max_parallelism: int, parallelism: int, expected: list[tuple[int, int]]
) -> None:
    ranges = [key_group_range(i, parallelism, max_parallelism) for i in range(parallelism)]
    assert [(r.start, r.stop - 1) for r in ranges] == expected


@pytest.mark.parametrize(
    ("subtask_index", "parallelism", "max_parallelism", "message"),
    [
        (0, 0, 128, "parallelism must be between 1 and max_parallelism"),
        (0, 129, 128, "cannot have more subtasks than key groups"),
        (0, 1, 32769, "max_parallelism must be between 1 and 32768"),
        (3, 3, 128, r"subtask_index must be in \[0, 3\)"),
    ],
)
def test_key_group_range_rejects_invalid_arguments(
    subtask_index: int, parallelism: int, max_parallelism: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        key_group_range(subtask_index, parallelism, max_parallelism)


def _random_configurations(seed: int, count: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    configurations = [(1, 1), (32768, 1), (32768, 32768), (128, 128), (13, 4)]
    for _ in range(count):
        max_parallelism = rng.choice([rng.randint(1, 300), rng.randint(1, 32768)])
        configurations.append((max_parallelism, rng.randint(1, min(max_parallelism, 400))))
    return configurations


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_key_group_ranges_partition_all_key_groups_contiguously(seed: int) -> None:
    for max_parallelism, parallelism in _random_configurations(seed, 200):
        ranges = [key_group_range(i, parallelism, max_parallelism) for i in range(parallelism)]
        assert ranges[0].start == 0
        assert ranges[-1].stop == max_parallelism
        for before, after in itertools.pairwise(ranges):
            assert before.stop == after.start
        sizes = [len(r) for r in ranges]
        assert min(sizes) >= 1
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("seed", [4, 5])
def test_subtask_for_key_group_agrees_with_key_group_range_for_every_key_group(
    seed: int,
) -> None:
    for max_parallelism, parallelism in _random_configurations(seed, 60):
        for subtask_index in range(parallelism):
            owned = key_group_range(subtask_index, parallelism, max_parallelism)
            for key_group in owned:
                assert subtask_for_key_group(key_group, parallelism, max_parallelism) == (
                    subtask_index
                )


def test_subtask_for_key_group_rejects_key_groups_outside_the_range() -> None:
    for key_group in (-1, 128):
        with pytest.raises(ValueError, match=r"key_group must be in \[0, 128\)"):
            subtask_for_key_group(key_group, 2, 128)


def test_assign_to_key_group_is_stable_hash_modulo_max_parallelism() -> None:
    for key in ["a", 1, ("x", 2), None]:
        assert assign_to_key_group(key, 128) == stable_hash(key) % 128
    with pytest.raises(ValueError, match="max_parallelism must be between 1 and 32768"):
        assign_to_key_group("a", 0)


def test_keys_spread_evenly_over_key_groups() -> None:
    counts = [0] * 128
    for i in range(128_00):
        counts[assign_to_key_group(f"user-{i}", 128)] += 1
    assert min(counts) > 50
    assert max(counts) < 150


def test_assigner_agrees_with_the_pure_functions_on_first_and_repeated_lookups() -> None:
    assigner = KeyGroupAssigner(max_parallelism=128, parallelism=3)
    keys = [f"k{i}" for i in range(300)] + list(range(300)) + [("t", i) for i in range(50)]
    for _ in range(2):
        for key in keys:
            key_group = assign_to_key_group(key, 128)
            assert assigner.key_group(key) == key_group
            assert assigner.subtask(key) == subtask_for_key_group(key_group, 3, 128)
            assert key_group in key_group_range(assigner.subtask(key), 3, 128)


def test_assigner_gives_the_key_groups_of_many_keys_in_their_order() -> None:
    assigner = KeyGroupAssigner(max_parallelism=128, cache_limit=4)
    keys = ["a", 1, ("t", 2), "a", 3.5]
    assigner.key_group(1)  # a memo hit among misses
    assert assigner.key_groups(keys) == [assign_to_key_group(k, 128) for k in keys]
    assert assigner.key_groups([]) == []
    with pytest.raises(TypeError, match="got list — convert it to a tuple"):
        assigner.key_groups(["a", ["b"]])
    assigner = KeyGroupAssigner(max_parallelism=128, cache_limit=4)
    assigner.reserve(10)  # the memo now holds 20 keys before it is cleared
    assigner.key_groups(range(20))
    assert len(assigner._key_group_cache) == 20


def test_assigner_gives_keys_equal_under_python_equality_one_answer() -> None:
    assigner = KeyGroupAssigner(max_parallelism=4096, parallelism=7)
    first = assigner.key_group(1)
    assert assigner.key_group(True) == assigner.key_group(1.0) == first
    assert assigner.subtask(1.0) == assigner.subtask(True) == assigner.subtask(1)
    fresh = KeyGroupAssigner(max_parallelism=4096, parallelism=7)
    assert fresh.key_group(1.0) == first


def test_assigner_memo_is_cleared_when_it_reaches_its_limit() -> None:
    assigner = KeyGroupAssigner(max_parallelism=128, parallelism=2, cache_limit=10)
    for i in range(25):
        assert assigner.key_group(i) == assign_to_key_group(i, 128)
        assert assigner.subtask(i) == subtask_for_key_group(assign_to_key_group(i, 128), 2, 128)
        assert len(assigner._key_group_cache) <= 10
        assert len(assigner._subtask_cache) <= 10


def test_assigner_rejects_unhashable_keys_but_hashes_a_bytearray_like_bytes() -> None:
    assigner = KeyGroupAssigner(max_parallelism=128, parallelism=2)
    with pytest.raises(TypeError, match="got list — convert it to a tuple"):
        assigner.key_group(["a"])
    with pytest.raises(TypeError, match="got set — convert it to a frozenset"):
        assigner.subtask({"a"})
    assert assigner.key_group(bytearray(b"k")) == assigner.key_group(b"k")  # uncached, works
    assert assigner.subtask(bytearray(b"k")) == assigner.subtask(b"k")


def test_assigner_validates_its_parallelism() -> None:
    with pytest.raises(ValueError, match="cannot have more subtasks than key groups"):
        KeyGroupAssigner(max_parallelism=8, parallelism=9)
    assert KeyGroupAssigner(128).subtask("anything") == 0
