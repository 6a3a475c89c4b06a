"""TTL states: decorators of a backend's state objects that store `TtlValue`s (Flink's Ttl*State).

Each wraps the state the backend returned for the same name (through the public state
interface only) and stores every value, list element or map value with its last-access
timestamp. On read, an expired value is removed (cleanup on read) and, with
`NeverReturnExpired`, not returned; with `OnReadAndWrite` a read refreshes the timestamp.
Reducing and aggregating states get wrapped functions (`TtlReduceFunction`,
`TtlAggregateFunction`) so that the backend's own merging stays in charge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tidegate.state.ttl.value import TtlValue
from tidegate.state.ttl_config import StateTtlConfig

__all__ = [
    "TtlAggregateFunction",
    "TtlAggregatingState",
    "TtlListState",
    "TtlMapState",
    "TtlReduceFunction",
    "TtlReducingState",
    "TtlValueState",
]

_Clock = Callable[[], int]
#: builds a TtlValue without the named tuple's Python-level __new__ (twice as fast)
_new_ttl_value = tuple.__new__


class _TtlPolicy:
    """The parts of a `StateTtlConfig` checked on each access, plus the clock."""

    __slots__ = ("clock", "return_expired", "ttl_ms", "update_on_read")

    def __init__(self, config: StateTtlConfig, clock: _Clock) -> None:
        self.ttl_ms = config.get_ttl().to_milliseconds()
        self.update_on_read = config.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite
        visibility = config.get_state_visibility()
        self.return_expired = (
            visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        )
        self.clock = clock

    def expired(self, stored: TtlValue, now: int) -> bool:
        """Flink's rule: expired once `last_access + ttl <= now`."""
        return stored.last_access_timestamp + self.ttl_ms <= now

    def wrap(self, value: Any) -> TtlValue:
        return _new_ttl_value(TtlValue, (value, self.clock()))


class _TtlState:
    """Base: the wrapped state, the policy, and the access hook that drives incremental cleanup."""

    __slots__ = ("_on_access", "_original", "_policy", "name")

    #: the backend stores one TtlValue per key (value, reducing, aggregating state)
    single_value = True

    def __init__(self, name: str, original: Any, policy: _TtlPolicy) -> None:
        self.name = name
        self._original = original
        self._policy = policy
        #: set by the TTL states registry when incremental cleanup is on
        self._on_access: Callable[[], None] | None = None

    def _accessed(self) -> None:
        if self._on_access is not None:
            self._on_access()

    def _check(
        self,
        stored: TtlValue | None,
        clear: Callable[[], None],
        rewrite: Callable[[TtlValue], None],
    ) -> TtlValue | None:
        """Flink's getWithTtlCheckAndUpdate: the visible stored value, cleaning/refreshing it."""
        if stored is None:
            return None
        policy = self._policy
        now = policy.clock()
        if policy.expired(stored, now):
            clear()
            return stored if policy.return_expired else None
        if policy.update_on_read:
            rewrite(TtlValue(stored.value, now))
        return stored

    def clear(self) -> None:
        self._accessed()
        self._original.clear()

    # cleanup of one key (the current key is set by the caller) --------------------------------
    def has_expired(self, stored: Any, limit: int) -> bool:
        """Whether a stored value (as `entries()` lists it) holds anything last accessed at or
        before `limit` (= now - ttl: expired)."""
        return stored[1] <= limit

    def remove_expired(self, now: int) -> None:
        """Remove the current key's expired data (re-read: it may have changed since listed)."""
        stored = self._stored()
        if stored is not None and self._policy.expired(stored, now):
            self._original.clear()

    def _stored(self) -> TtlValue | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class TtlValueState(_TtlState):
    __slots__ = ()

    def _stored(self) -> TtlValue | None:
        return self._original.value()

    def value(self) -> Any:
        if self._on_access is not None:
            self._on_access()
        original = self._original
        stored = original.value()
        if stored is None:
            return None
        # _check, inlined: this is the hot path of most TTL jobs
        policy = self._policy
        now = policy.clock()
        if stored[1] + policy.ttl_ms <= now:
            original.clear()
            return stored[0] if policy.return_expired else None
        if policy.update_on_read:
            original.update(TtlValue(stored[0], now))
        return stored[0]

    def update(self, value: Any) -> None:
        if self._on_access is not None:
            self._on_access()
        if value is not None:
            value = _new_ttl_value(TtlValue, (value, self._policy.clock()))
        self._original.update(value)


class TtlListState(_TtlState):
    """Each element expires on its own."""

    __slots__ = ()
    single_value = False

    def get(self) -> list[Any]:
        self._accessed()
        policy, original = self._policy, self._original
        elements: list[TtlValue] = list(original.get())
        if not elements:
            return []
        now = policy.clock()
        alive = [e for e in elements if not policy.expired(e, now)]
        visible = elements if policy.return_expired else alive
        if policy.update_on_read:
            alive = [TtlValue(e.value, now) for e in alive]
            original.update(alive)
        elif len(alive) != len(elements):
            original.update(alive)
        return [e.value for e in visible]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())

    def add(self, value: Any) -> None:
        self._accessed()
        self._original.add(self._policy.wrap(value))

    def add_all(self, values: Iterable[Any]) -> None:
        self._accessed()
        wrap = self._policy.wrap
        self._original.add_all([wrap(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        self._accessed()
        wrap = self._policy.wrap
        self._original.update([wrap(v) for v in values])

    def has_expired(self, stored: Any, limit: int) -> bool:
        return any(e[1] <= limit for e in stored)

    def remove_expired(self, now: int) -> None:
        elements = list(self._original.get())
        alive = [e for e in elements if not self._policy.expired(e, now)]
        if len(alive) != len(elements):
            self._original.update(alive)


class TtlMapState(_TtlState):
    """Each map entry expires on its own."""

    __slots__ = ()
    single_value = False

    def _get_wrapped(self, key: Any) -> TtlValue | None:
        original = self._original
        return self._check(
            original.get(key), lambda: original.remove(key), lambda v: original.put(key, v)
        )

    def get(self, key: Any) -> Any:
        self._accessed()
        stored = self._get_wrapped(key)
        return None if stored is None else stored.value

    def contains(self, key: Any) -> bool:
        self._accessed()
        return self._get_wrapped(key) is not None

    def put(self, key: Any, value: Any) -> None:
        self._accessed()
        self._original.put(key, self._policy.wrap(value))

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        self._accessed()
        wrap = self._policy.wrap
        self._original.put_all({k: wrap(v) for k, v in dict_value.items()})

    def remove(self, key: Any) -> None:
        self._accessed()
        self._original.remove(key)

    def items(self) -> list[tuple[Any, Any]]:
        """The visible entries (a copy); expired ones are removed, refreshed on OnReadAndWrite."""
        self._accessed()
        policy, original = self._policy, self._original
        now = policy.clock()
        visible = []
        for key, stored in original.items():
            if policy.expired(stored, now):
                original.remove(key)
                if not policy.return_expired:
                    continue
            elif policy.update_on_read:
                original.put(key, TtlValue(stored.value, now))
            visible.append((key, stored.value))
        return visible

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self.items()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def has_expired(self, stored: Any, limit: int) -> bool:
        return any(v[1] <= limit for v in stored.values())

    def remove_expired(self, now: int) -> None:
        original, expired = self._original, self._policy.expired
        for key, stored in original.items():
            if expired(stored, now):
                original.remove(key)


class TtlReduceFunction:
    """The reduce function the backend's reducing state runs: an expired current value is
    dropped, not combined (Flink's TtlReduceFunction)."""

    def __init__(self, reduce: Callable[[Any, Any], Any], policy: _TtlPolicy) -> None:
        self._reduce = reduce
        self._policy = policy

    def __call__(self, current: TtlValue, added: TtlValue) -> TtlValue:
        if self._policy.expired(current, added.last_access_timestamp):
            return added
        return TtlValue(self._reduce(current.value, added.value), added.last_access_timestamp)


class TtlReducingState(_TtlState):
    __slots__ = ()

    def _stored(self) -> TtlValue | None:
        return self._original.get()

    def _rewrite(self, stored: TtlValue) -> None:
        # ReducingState has no update: clear, then add into the empty state stores it as is
        self._original.clear()
        self._original.add(stored)

    def get(self) -> Any:
        self._accessed()
        stored = self._check(self._original.get(), self._original.clear, self._rewrite)
        return None if stored is None else stored.value

    def add(self, value: Any) -> None:
        self._accessed()
        self._original.add(self._policy.wrap(value))


class _Replace:
    """An input of `TtlAggregateFunction.add` that replaces the accumulator (to refresh its
    timestamp through the public `add`)."""

    __slots__ = ("stored",)

    def __init__(self, stored: TtlValue) -> None:
        self.stored = stored


class TtlAggregateFunction:
    """The aggregate function the backend's aggregating state runs: accumulators are
    `TtlValue`s; an expired one restarts from `create_accumulator()`. `get_result` returns the
    wrapped accumulator itself, so that `TtlAggregatingState.get` can check it."""

    def __init__(self, function: Any, policy: _TtlPolicy) -> None:
        self.function = function
        self._policy = policy

    def create_accumulator(self) -> TtlValue:
        return self._policy.wrap(self.function.create_accumulator())

    def add(self, value: Any, accumulator: TtlValue) -> TtlValue:
        if isinstance(value, _Replace):
            return value.stored
        now = self._policy.clock()
        if self._policy.expired(accumulator, now):
            inner = self.function.create_accumulator()
        else:
            inner = accumulator.value
        return TtlValue(self.function.add(value, inner), now)

    def get_result(self, accumulator: TtlValue) -> TtlValue:
        return accumulator

    def merge(self, a: TtlValue, b: TtlValue) -> TtlValue:
        merged = self.function.merge(a.value, b.value)
        return TtlValue(merged, max(a.last_access_timestamp, b.last_access_timestamp))


class TtlAggregatingState(_TtlState):
    __slots__ = ("_function",)

    def __init__(self, name: str, original: Any, policy: _TtlPolicy, function: Any) -> None:
        super().__init__(name, original, policy)
        self._function = function

    def _stored(self) -> TtlValue | None:
        return self._original.get()

    def get(self) -> Any:
        self._accessed()
        original = self._original
        stored = self._check(original.get(), original.clear, lambda v: original.add(_Replace(v)))
        return None if stored is None else self._function.get_result(stored.value)

    def add(self, value: Any) -> None:
        self._accessed()
        self._original.add(value)
