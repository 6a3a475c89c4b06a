"""Creates TTL states on any keyed backend (Flink's TtlStateFactory) and runs their cleanups.

Backend contract (what a keyed backend implements so that TTL works on it):

1. Its `get_state`/`get_list_state`/`get_map_state`/`get_reducing_state`/
   `get_aggregating_state` are decorated with `@ttl_aware`. A descriptor with an enabled TTL
   config then gets a TTL state wrapping the state the undecorated method returns for a copy
   of the descriptor without TTL (and with wrapped reduce/aggregate functions).
2. `entries(name) -> Iterator[tuple[Any, Any]]`: every (key, stored value) of a state; the
   iterator must stay valid while the state changes (heap: a copy; RocksDB: an iterator over a
   snapshot). Used by the incremental cleanup and the background sweep, and to check on
   registration whether restored data was written with TTL.
3. `current_key` can be set to any key of the backend's key groups (the cleanups set it to
   remove a key's expired data through the state object, then restore it).
4. Its synchronous snapshot phase calls `snapshot_transformers(backend)` and the asynchronous
   phase applies each `{state name: transform}` to the stored values with
   `snapshot_format.transform_entries` (cleanup in full snapshot).

The runtime calls `batch_cleanup(backend)` once the operator is open and, if it returns a
function, calls it with the number of records after each batch (per-record incremental
cleanup and the background sweep).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from tidegate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from tidegate.state.ttl.cleanup import (
    BackgroundSweep,
    IncrementalCleanup,
    Sweeper,
    snapshot_transformer,
)
from tidegate.state.ttl.states import (
    TtlAggregateFunction,
    TtlAggregatingState,
    TtlListState,
    TtlMapState,
    TtlReduceFunction,
    TtlReducingState,
    TtlValueState,
    _TtlPolicy,
    _TtlState,
)
from tidegate.state.ttl.value import TtlTimeProvider, TtlValue, current_timestamp
from tidegate.state.ttl_config import StateTtlConfig

__all__ = ["TtlStates", "batch_cleanup", "snapshot_transformers", "ttl_aware", "ttl_states"]

_Getter = TypeVar("_Getter", bound=Callable[..., Any])

#: the attribute of a keyed backend that holds its TtlStates
_ATTRIBUTE = "_ttl_states"


def ttl_states(backend: Any, time_provider: TtlTimeProvider | None = None) -> TtlStates:
    """The TTL registry of `backend`, created on first use (with `time_provider`, else the
    process's clock `value.current_timestamp`). Give a provider before states are registered:
    each TTL state keeps the clock it was created with."""
    registry = getattr(backend, _ATTRIBUTE, None)
    if registry is None:
        registry = TtlStates(backend, time_provider)
        setattr(backend, _ATTRIBUTE, registry)
    elif time_provider is not None:
        registry.clock = time_provider
    return registry


def ttl_aware(getter: _Getter) -> _Getter:
    """Decorates a keyed backend's `get_*state(descriptor)` to honour `enable_time_to_live`."""

    @functools.wraps(getter)
    def get(backend: Any, state_descriptor: Any) -> Any:
        config = getattr(state_descriptor, "ttl_config", None)
        registry = ttl_states(backend)
        if config is None or not config.is_enabled():
            state = getter(backend, state_descriptor)
            registry.check_plain(state_descriptor)
            return state
        return registry.get_or_create(state_descriptor, config, getter)

    return get  # type: ignore[return-value]


def snapshot_transformers(backend: Any) -> dict[str, Callable[[Any], Any]]:
    """For a backend's synchronous snapshot phase: state name -> transform of its stored values
    (only states with `cleanup_full_snapshot`); `{}` when there are none."""
    registry = getattr(backend, _ATTRIBUTE, None)
    return {} if registry is None else registry.snapshot_transformers()


def batch_cleanup(backend: Any) -> Callable[[int], None] | None:
    """What the runtime calls after each batch with its record count, or None if no TTL state
    of `backend` cleans up per record or in the background."""
    registry = getattr(backend, _ATTRIBUTE, None)
    if registry is None or not (registry.per_record or registry.sweeps):
        return None
    return registry.after_batch


#: descriptor type -> (TTL state type, what the backend stores per key)
_KINDS: tuple[tuple[type, type[_TtlState], str], ...] = (
    (ValueStateDescriptor, TtlValueState, "value"),
    (ListStateDescriptor, TtlListState, "list"),
    (MapStateDescriptor, TtlMapState, "map"),
    (ReducingStateDescriptor, TtlReducingState, "value"),
    (AggregatingStateDescriptor, TtlAggregatingState, "value"),
)


def _kind_of(descriptor: Any) -> tuple[type[_TtlState], str]:
    for cls, kind, stored in _KINDS:
        if isinstance(descriptor, cls):
            return kind, stored
    raise TypeError(
        f"state {descriptor.name!r}: TTL needs a keyed state descriptor (ValueStateDescriptor, "
        f"ListStateDescriptor, ...), got {type(descriptor).__name__}"
    )


class TtlStates:
    """The TTL states of one keyed backend, their cleanups, and the registration checks."""

    def __init__(self, backend: Any, time_provider: TtlTimeProvider | None = None) -> None:
        self._backend = backend
        self.clock: TtlTimeProvider | None = time_provider
        self.states: dict[str, tuple[StateTtlConfig, _TtlState]] = {}
        self._plain: set[str] = set()
        self.per_record: list[IncrementalCleanup] = []
        self.sweeps: list[BackgroundSweep] = []

    def now(self) -> int:
        clock = self.clock
        return clock() if clock is not None else current_timestamp()

    # registration ----------------------------------------------------------------------------
    def get_or_create(self, descriptor: Any, config: StateTtlConfig, getter: Callable) -> Any:
        name = descriptor.name
        known = self.states.get(name)
        if known is not None:
            if known[0] != config:
                raise ValueError(
                    f"state {name!r} is already registered with another TTL config "
                    f"({known[0]!r}); register it with the same StateTtlConfig everywhere"
                )
            return known[1]
        if name in self._plain:
            raise ValueError(
                f"state {name!r} is already registered without TTL and cannot also be registered "
                "with TTL; enable the same TTL on every descriptor of this name"
            )
        kind, stored = _kind_of(descriptor)
        policy = _TtlPolicy(config, self.clock or current_timestamp)
        inner = copy.copy(descriptor)
        object.__setattr__(inner, "ttl_config", None)
        object.__setattr__(inner, "type_info", None)  # it stores TTL wrappers, not the type
        extra: tuple[Any, ...] = ()
        if kind is TtlReducingState:
            function = descriptor.reduce_function
            reduce = getattr(function, "reduce", function)
            object.__setattr__(inner, "reduce_function", TtlReduceFunction(reduce, policy))
        elif kind is TtlAggregatingState:
            wrapped = TtlAggregateFunction(descriptor.agg_function, policy)
            object.__setattr__(inner, "agg_function", wrapped)
            extra = (descriptor.agg_function,)
        original = getter(self._backend, inner)
        self._check_restored(name, stored, with_ttl=True)
        state = kind(name, original, policy, *extra)
        self._add_cleanups(state, config)
        self.states[name] = (config, state)
        return state

    def check_plain(self, descriptor: Any) -> None:
        """A state registered without TTL: refuse data a TTL state wrote, once per name."""
        name = descriptor.name
        if name in self._plain:
            return
        if name in self.states:
            raise ValueError(
                f"state {name!r} is already registered with TTL and cannot also be registered "
                "without it; enable the same TTL on every descriptor of this name"
            )
        self._check_restored(name, _kind_of(descriptor)[1], with_ttl=False)
        self._plain.add(name)

    def _check_restored(self, name: str, stored_as: str, with_ttl: bool) -> None:
        stored = _first_stored_value(self._backend, name)
        if stored is _NOTHING:
            return
        was_ttl = _holds_ttl_values(stored, stored_as)
        if was_ttl is None or was_ttl == with_ttl:
            return
        if with_ttl:
            raise ValueError(
                f"state {name!r} was restored from a checkpoint written without TTL, and its "
                "descriptor now enables TTL: the stored format differs (Flink refuses this as "
                "an incompatible serializer). Remove enable_time_to_live(...) from this "
                "descriptor, or register the TTL state under a new name (it starts empty)"
            )
        raise ValueError(
            f"state {name!r} was restored from a checkpoint written with TTL, and its "
            "descriptor has none: the stored format differs (Flink refuses this as an "
            "incompatible serializer). Keep enable_time_to_live(...) on this descriptor (the "
            "TTL and its cleanup settings may change), or register the state under a new name "
            "(it starts empty)"
        )

    def _add_cleanups(self, state: _TtlState, config: StateTtlConfig) -> None:
        strategies = config.get_cleanup_strategies()
        incremental = strategies.get_incremental_cleanup_strategy()
        if incremental is not None and incremental.get_cleanup_size() > 0:
            cleanup = IncrementalCleanup(
                Sweeper(self._backend, state, self.now), incremental.get_cleanup_size()
            )
            state._on_access = cleanup.state_accessed
            if incremental.run_cleanup_for_every_record():
                self.per_record.append(cleanup)
        compaction = strategies.get_rocksdb_compact_filter_cleanup_strategy()
        if compaction is not None:
            ttl_ms = config.get_ttl().to_milliseconds()
            periodic = compaction.get_periodic_compaction_time().to_milliseconds()
            interval = min(ttl_ms, periodic) if periodic > 0 else ttl_ms
            sweeper = Sweeper(self._backend, state, self.now)
            self.sweeps.append(
                BackgroundSweep(sweeper, compaction.get_query_time_after_num_entries(), interval)
            )

    # hooks -----------------------------------------------------------------------------------
    def snapshot_transformers(self) -> dict[str, Callable[[Any], Any]]:
        full = [
            (name, state)
            for name, (config, state) in self.states.items()
            if config.get_cleanup_strategies().in_full_snapshot()
        ]
        if not full:
            return {}
        now = self.now()
        return {name: snapshot_transformer(state, now) for name, state in full}

    def after_batch(self, records: int) -> None:
        for cleanup in self.per_record:
            cleanup.records_processed(records)
        if self.sweeps:
            now = self.now()
            for sweep in self.sweeps:
                sweep.between_batches(now)


_NOTHING: Any = object()


def _first_stored_value(backend: Any, name: str) -> Any:
    """One stored value of state `name`, cheaply (heap: its live table; else `entries`)."""
    table = getattr(backend, "table", None)
    if table is not None:
        try:
            return next(iter(table(name).values()), _NOTHING)
        except KeyError:
            return _NOTHING
    return next((value for _, value in backend.entries(name)), _NOTHING)


def _holds_ttl_values(stored: Any, stored_as: str) -> bool | None:
    """Whether a key's stored value ('value', a 'list', a 'map') was written by a TTL state;
    None: unknown (an empty container)."""
    if stored_as == "list":
        return isinstance(stored[0], TtlValue) if stored else None
    if stored_as == "map":
        first = next(iter(stored.values()), _NOTHING)
        return None if first is _NOTHING else isinstance(first, TtlValue)
    return isinstance(stored, TtlValue)
