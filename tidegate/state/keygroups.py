"""Key groups: the stable key hash, key-group ranges and the per-record key-group assigner.

A key group is the atomic unit of keyed state (DESIGN.md section 6, Flink's facts kept as-is):

* ``key_group = stable_hash(key) % max_parallelism``;
* subtask ``i`` of ``p`` owns the contiguous range ``[ceil(i*M/p), floor(((i+1)*M - 1)/p)]``;
* the subtask owning key group ``kg`` is ``kg * p // M``.

Python's ``hash()`` is salted per process (PYTHONHASHSEED), so it cannot place keys: every
process of every run must agree. ``stable_hash`` hashes a canonical byte encoding of the key
with ``zlib.crc32`` (C speed), then murmur3's ``fmix32`` finalizer: crc32 is linear, so similar
keys differ in correlated bits, and the finalizer avalanches them before ``% max_parallelism``.
The finalizer runs in C too: murmur3 of no bytes with seed ``h`` is ``fmix32(h)`` (``mmh3``).

The encoding respects Python equality, because equal keys are one key to a dict (keyed state,
the assigner's memo): ``True == 1 == 1.0`` and ``IntEnum`` members equal to their value all
hash alike, and so do equal tz-aware datetimes in different zones. Encoding (tag byte, payload):

=============================  ============================================================
``str`` (and subclasses)       ``s`` + UTF-8 (lone surrogates via ``surrogatepass``)
``bytes``/``bytearray``        ``b`` + the bytes
``int``/``bool``               ``i`` + ``<q`` if it fits in 64 bits, else ``I`` + signed LE
``float``                      integral -> as ``int``; else ``f`` + ``<d`` (-0.0 -> 0.0)
``None``                       ``n``
``tuple`` (namedtuple too)     ``t`` + ``<I`` count + each element's encoding, ``<I``-length
                               prefixed (so ``('a', 'b') != ('ab',)``)
``frozenset``                  ``F`` + like a tuple, elements' encodings sorted
``Enum`` (pure)                ``e`` + class qualname + value (``IntEnum``/``StrEnum`` members
                               equal their value, so they encode as ``int``/``str``)
frozen dataclass               ``d`` + class qualname + the ``compare=True`` fields as a tuple
``datetime``/``date``          ``T``/``a`` + isoformat (aware datetimes converted to UTC)
``uuid.UUID``                  ``u`` + 16 bytes
``complex``/``Fraction``/      equal to a float or int -> that encoding; else ``c`` + ``<dd``
``Decimal``                    or ``q`` + numerator and denominator
anything else                  ``p`` + ``pickle.dumps(key, protocol=4)``, with a one-time
                               ``UnstableKeyHashWarning``: stable only if pickling is
                               deterministic and equal keys pickle alike
=============================  ============================================================

These bytes place every key of every checkpoint: changing them breaks restores. The unit
tests pin golden values.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import itertools
import pickle
import struct
import uuid
import warnings
import zlib
from collections.abc import Callable, Collection, Hashable, Iterable
from decimal import Decimal
from fractions import Fraction

import mmh3

#: Largest max parallelism (number of key groups), as in Flink (``Short.MAX_VALUE + 1``).
UPPER_BOUND_MAX_PARALLELISM = 32768
#: Smallest default max parallelism, so small jobs can still scale out later.
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128
#: A ``KeyGroupAssigner`` memo is cleared when it exceeds this many keys (bounds memory).
KEY_CACHE_LIMIT = 1_000_000

_crc32 = zlib.crc32
_pack_q = struct.Struct("<q").pack
_pack_d = struct.Struct("<d").pack
_pack_dd = struct.Struct("<dd").pack
_pack_len = struct.Struct("<I").pack
# crc32(payload, crc32(tag)) == crc32(tag + payload): the fast paths hash the same bytes as
# the general encoder without concatenating.
_STR_SEED = _crc32(b"s")
_INT_SEED = _crc32(b"i")

#: fmix32(h) for 0 <= h < 2**32: murmur3_32 of no data is its finalizer applied to the seed (one C
#: call instead of six big-int operations on every key hashed)
_fmix32 = functools.partial(mmh3.hash, b"", signed=False)

_warned_fallback_types: set[type] = set()


class UnstableKeyHashWarning(UserWarning):
    """A key type has no canonical encoding; its hash relies on deterministic pickling."""


def murmur_fmix32(h: int) -> int:
    """Murmur3's 32-bit finalizer: an avalanche bijection on 32-bit values."""
    return _fmix32(h & 0xFFFFFFFF)


def stable_hash(key: object) -> int:
    """Return a 32-bit unsigned hash of `key`, identical in every process, run and machine.

    Equal keys (by ``==``) hash equal for all supported types; see the module docstring for
    the encoding. Raises ``TypeError`` for unhashable keys (list, dict, set, ...).
    """
    t = type(key)
    if t is str:
        try:
            h = _crc32(key.encode(), _STR_SEED)  # type: ignore[attr-defined]
        except UnicodeEncodeError:
            h = _crc32(_encode(key))
    elif t is int:
        try:
            h = _crc32(_pack_q(key), _INT_SEED)
        except struct.error:
            h = _crc32(_encode(key))
    else:
        h = _crc32(_encode(key))
    return _fmix32(h)  # crc32 is < 2**32


def _encode(key: object) -> bytes:
    """The canonical encoding of `key`: a tag byte, then the payload (module docstring)."""
    if isinstance(key, str):
        return b"s" + str.encode(key, "utf-8", "surrogatepass")
    if isinstance(key, int):  # bool, IntEnum, IntFlag: equal to their int value
        return _encode_int(key)
    if isinstance(key, float):
        return _encode_float(key)
    if isinstance(key, tuple):
        return b"t" + _encode_items(key)
    if key is None:
        return b"n"
    if isinstance(key, (bytes, bytearray)):
        return b"b" + key
    if isinstance(key, enum.Enum):
        return b"e" + _encode_items((type(key).__qualname__, key.value))
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        return _encode_dataclass(key)
    if isinstance(key, _dt.datetime):
        if key.utcoffset() is not None:  # aware datetimes are equal by their UTC instant
            key = key.astimezone(_dt.UTC)
        return b"T" + key.isoformat().encode()
    if isinstance(key, _dt.date):
        return b"a" + key.isoformat().encode()
    if isinstance(key, frozenset):
        return b"F" + _join_encoded(sorted(_encode(item) for item in key))  # order is salted
    if isinstance(key, uuid.UUID):
        return b"u" + key.bytes
    if isinstance(key, complex):
        return _encode_complex(key)
    if isinstance(key, Fraction):
        return _encode_rational(key.numerator, key.denominator)
    if isinstance(key, Decimal):
        if not key.is_finite():
            _check_hashable(key)  # a signalling NaN is unhashable
            return _encode_float(float(key))
        return _encode_rational(*key.as_integer_ratio())
    return _encode_fallback(key)


def _encode_int(value: int) -> bytes:
    try:
        return b"i" + _pack_q(value)
    except struct.error:
        size = (value.bit_length() + 8) // 8  # room for the sign bit
        return b"I" + int.to_bytes(value, size, "little", signed=True)


def _encode_float(value: float) -> bytes:
    if float.is_integer(value):  # 1.0 == 1 and -0.0 == 0
        return _encode_int(int(value))
    return b"f" + _pack_d(value)


def _encode_complex(value: complex) -> bytes:
    if value.imag == 0:
        return _encode_float(value.real)
    return b"c" + _pack_dd(value.real + 0.0, value.imag + 0.0)  # + 0.0 turns -0.0 into 0.0


def _encode_rational(numerator: int, denominator: int) -> bytes:
    """Encode an exact fraction so that it matches an equal int or float."""
    if denominator == 1:
        return _encode_int(numerator)
    try:
        as_float = numerator / denominator
    except OverflowError:  # too large for a float, so equal to none
        pass
    else:
        if Fraction(numerator, denominator) == as_float:
            return _encode_float(as_float)
    return b"q" + _encode_items((numerator, denominator))


def _encode_items(items: tuple[object, ...]) -> bytes:
    return _join_encoded([_encode(item) for item in items])


def _join_encoded(encoded: list[bytes]) -> bytes:
    """Count, then each encoding prefixed by its length: unambiguous when nested."""
    parts = [_pack_len(len(encoded))]
    for item in encoded:
        parts += (_pack_len(len(item)), item)
    return b"".join(parts)


@functools.cache
def _dataclass_layout(cls: type) -> tuple[str, tuple[str, ...]]:
    """The class qualname and the names of the fields that take part in ``==``."""
    names = tuple(f.name for f in dataclasses.fields(cls) if f.compare)
    return cls.__qualname__, names


def _encode_dataclass(key: object) -> bytes:
    _check_hashable(key)  # a non-frozen dataclass with eq=True is unhashable
    qualname, names = _dataclass_layout(type(key))
    values = tuple(getattr(key, name) for name in names)
    return b"d" + _encode_items((qualname, values))


_UNHASHABLE_ADVICE = {
    list: "convert it to a tuple",
    dict: "convert it to a tuple of its items, e.g. tuple(sorted(d.items()))",
    set: "convert it to a frozenset",
}


def _check_hashable(key: object) -> None:
    """Raise an actionable ``TypeError`` if `key` cannot be a dict key."""
    try:
        hash(key)
    except TypeError:
        advice = _UNHASHABLE_ADVICE.get(
            type(key), "use an immutable value such as a str, int, tuple or frozen dataclass"
        )
        raise TypeError(
            f"key_by must return a hashable, immutable key; got {type(key).__name__} — {advice}"
        ) from None


def _encode_fallback(key: object) -> bytes:
    """Encode a key of an unknown type by pickling it, warning once per type."""
    _check_hashable(key)
    kind = type(key)
    try:
        payload = pickle.dumps(key, protocol=4)
    except Exception as exc:  # pickling raises many exception types
        raise TypeError(
            f"cannot hash key of type {kind.__module__}.{kind.__qualname__}: it has no "
            f"canonical encoding and pickling it failed ({exc}); key_by should return a str, "
            "int, tuple or frozen dataclass"
        ) from exc
    if kind not in _warned_fallback_types:
        _warned_fallback_types.add(kind)
        warnings.warn(
            f"tidegate has no canonical encoding for key type {kind.__module__}."
            f"{kind.__qualname__}; it hashes pickle.dumps(key, protocol=4) instead. The hash "
            "(and so the key group) is only stable if this type's pickling is deterministic "
            "and equal keys pickle to equal bytes; prefer str, int, tuple or frozen dataclass "
            "keys.",
            UnstableKeyHashWarning,
            stacklevel=4,
        )
    return b"p" + payload


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default number of key groups for an operator of `parallelism` subtasks.

    ``min(max(round_up_to_power_of_2(p + p // 2), 128), 32768)``: room to scale out by 1.5x
    and more. It is fixed by the first run of a job (it is baked into the state).
    """
    if not 1 <= parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {parallelism}"
        )
    candidate = 1 << (parallelism + parallelism // 2 - 1).bit_length()  # round up to 2**k
    return min(max(candidate, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, "
            f"got {max_parallelism}"
        )


def _check_parallelism(parallelism: int, max_parallelism: int) -> None:
    _check_max_parallelism(max_parallelism)
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(
            f"parallelism must be between 1 and max_parallelism ({max_parallelism}), got "
            f"{parallelism}: each subtask owns at least one key group, so a keyed operator "
            "cannot have more subtasks than key groups"
        )


def key_group_range(subtask_index: int, parallelism: int, max_parallelism: int) -> range:
    """The contiguous key groups owned by subtask `subtask_index` (a range, end exclusive).

    Example: M=128, p=3 -> range(0, 43), range(43, 86), range(86, 128).
    """
    _check_parallelism(parallelism, max_parallelism)
    if not 0 <= subtask_index < parallelism:
        raise ValueError(
            f"subtask_index must be in [0, {parallelism}) for parallelism {parallelism}, "
            f"got {subtask_index}"
        )
    m, p, i = max_parallelism, parallelism, subtask_index
    start = (i * m + p - 1) // p
    end_inclusive = ((i + 1) * m - 1) // p
    return range(start, end_inclusive + 1)


def subtask_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The index of the subtask that owns `key_group`: ``key_group * p // M``."""
    _check_parallelism(parallelism, max_parallelism)
    if not 0 <= key_group < max_parallelism:
        raise ValueError(
            f"key_group must be in [0, {max_parallelism}) for max_parallelism "
            f"{max_parallelism}, got {key_group}"
        )
    return key_group * parallelism // max_parallelism


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    """The key group of `key`: ``stable_hash(key) % max_parallelism``."""
    _check_max_parallelism(max_parallelism)
    return stable_hash(key) % max_parallelism


def hash_key_groups(keys: Iterable[object], max_parallelism: int) -> list[int]:
    """The key group of each of `keys`, in their order, hashing each (no memo): for visiting
    keys once each, where a memo would only cost."""
    return [stable_hash(key) % max_parallelism for key in keys]


class KeyGroupAssigner:
    """Memoised key -> key group and key -> subtask lookups for the per-record hot path.

    Both memos are plain dicts, so a repeated key costs one dict lookup. Keys that are equal
    under Python equality (``1``, ``1.0``, ``True``) share an entry; that is correct only
    because ``stable_hash`` gives equal keys equal hashes. A memo is cleared when it grows past
    `cache_limit` keys, which bounds memory for high-cardinality key spaces. Not thread-safe
    beyond what the GIL gives a dict; use one per subtask.
    """

    __slots__ = (
        "_cache_limit",
        "_key_group_cache",
        "_subtask_cache",
        "_subtask_of_key_group",
        "max_parallelism",
        "parallelism",
    )

    def __init__(
        self, max_parallelism: int, parallelism: int = 1, *, cache_limit: int = KEY_CACHE_LIMIT
    ) -> None:
        _check_parallelism(parallelism, max_parallelism)
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        self._cache_limit = cache_limit
        self._key_group_cache: dict[Hashable, int] = {}
        self._subtask_cache: dict[Hashable, int] = {}
        self._subtask_of_key_group = [
            kg * parallelism // max_parallelism for kg in range(max_parallelism)
        ]

    # `get`, not `[]` and KeyError: with many keys most lookups miss (a new key), and raising
    # and catching the KeyError cost more than the hash itself.
    def key_group(self, key: Hashable) -> int:
        """The key group of `key` (``stable_hash(key) % max_parallelism``)."""
        cache = self._key_group_cache
        try:
            kg = cache.get(key)
        except TypeError:
            # Unhashable: stable_hash raises an actionable error (or hashes a bytearray).
            return stable_hash(key) % self.max_parallelism
        if kg is None:
            if len(cache) >= self._cache_limit:
                cache.clear()
            kg = cache[key] = stable_hash(key) % self.max_parallelism
        return kg

    def key_groups(self, keys: Collection[Hashable]) -> list[int]:
        """The key group of each of `keys`, in their order: memo hits in one C call (a
        snapshot's hot loop), the others through `key_group`."""
        try:
            groups = list(map(self._key_group_cache.get, keys, itertools.repeat(-1)))
        except TypeError:  # an unhashable key: key_group raises the actionable error
            return list(map(self.key_group, keys))
        if groups and min(groups) < 0:
            key_group = self.key_group
            groups = [kg if kg >= 0 else key_group(k) for k, kg in zip(keys, groups, strict=True)]
        return groups

    def reserve(self, keys: int) -> None:
        """Let the key group memo hold `keys` keys (twice that, and at least the limit it was
        made with) before it is cleared: a memo cleared in the middle of a snapshot's keys
        saves no hashing at all."""
        self._cache_limit = max(self._cache_limit, 2 * keys)

    @property
    def cached_subtask(self) -> Callable[[Hashable], int | None]:
        """`get` of the subtask cache: `cached_subtask(key)` is `key`'s subtask or None when
        not cached (then call `subtask`); raises TypeError for an unhashable key. A C call,
        for loops over every record (the cache is only ever cleared in place)."""
        return self._subtask_cache.get

    def subtask(self, key: Hashable) -> int:
        """The index of the subtask that owns `key` at this assigner's parallelism."""
        cache = self._subtask_cache
        try:
            index = cache.get(key)
        except TypeError:
            return self._subtask_of_key_group[stable_hash(key) % self.max_parallelism]
        if index is None:
            if len(cache) >= self._cache_limit:
                cache.clear()
            kg = stable_hash(key) % self.max_parallelism
            index = cache[key] = self._subtask_of_key_group[kg]
        return index

    def __repr__(self) -> str:
        return (
            f"KeyGroupAssigner(max_parallelism={self.max_parallelism}, "
            f"parallelism={self.parallelism})"
        )
