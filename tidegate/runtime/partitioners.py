"""Partitioners decide which downstream channel each record goes to, a whole batch at a time.

`bind` routes batches without timestamps; `bind_timestamped` routes timestamped batches
(runtime/records.py), sending each record's timestamp to the same channel as the record."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.state.keygroups import KeyGroupAssigner


@dataclass(frozen=True)
class Partitioner:
    """Base: `pointwise` partitioners connect upstream subtask i only to downstream subtask i."""

    pointwise = False

    def bind(self, num_channels: int, max_parallelism: int) -> Callable[[list, list[list]], None]:
        """Return `route(records, buffers)` that appends each record to its channel's buffer."""
        raise NotImplementedError

    def bind_timestamped(
        self, num_channels: int, max_parallelism: int
    ) -> Callable[[list, list[int], list[list], list[list[int]]], None]:
        """Return `route(records, timestamps, buffers, ts_buffers)`: as `bind`'s, and each
        record's timestamp goes to the timestamp buffer of the record's channel."""
        raise NotImplementedError


@dataclass(frozen=True)
class ForwardPartitioner(Partitioner):
    pointwise = True

    def bind(self, num_channels, max_parallelism):
        def route(records, buffers):
            buffers[0].extend(records)

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        def route(records, timestamps, buffers, ts_buffers):
            buffers[0].extend(records)
            ts_buffers[0].extend(timestamps)

        return route


@dataclass(frozen=True)
class RebalancePartitioner(Partitioner):
    def bind(self, num_channels, max_parallelism):
        state = {"next": random.randrange(num_channels)}

        def route(records, buffers):
            start = state["next"]
            for j in range(min(num_channels, len(records))):
                buffers[(start + j) % num_channels].extend(records[j::num_channels])
            state["next"] = (start + len(records)) % num_channels

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        state = {"next": random.randrange(num_channels)}

        def route(records, timestamps, buffers, ts_buffers):
            start = state["next"]
            for j in range(min(num_channels, len(records))):
                c = (start + j) % num_channels
                buffers[c].extend(records[j::num_channels])
                ts_buffers[c].extend(timestamps[j::num_channels])
            state["next"] = (start + len(records)) % num_channels

        return route


@dataclass(frozen=True)
class ShufflePartitioner(Partitioner):
    def bind(self, num_channels, max_parallelism):
        rnd = random.Random()

        def route(records, buffers):
            picks = rnd.choices(range(num_channels), k=len(records))
            for r, c in zip(records, picks, strict=True):
                buffers[c].append(r)

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        rnd = random.Random()

        def route(records, timestamps, buffers, ts_buffers):
            picks = rnd.choices(range(num_channels), k=len(records))
            for r, t, c in zip(records, timestamps, picks, strict=True):
                buffers[c].append(r)
                ts_buffers[c].append(t)

        return route


@dataclass(frozen=True)
class BroadcastPartitioner(Partitioner):
    def bind(self, num_channels, max_parallelism):
        def route(records, buffers):
            for b in buffers:
                b.extend(records)

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        def route(records, timestamps, buffers, ts_buffers):
            for b, tb in zip(buffers, ts_buffers, strict=True):
                b.extend(records)
                tb.extend(timestamps)

        return route


@dataclass(frozen=True)
class KeyGroupStreamPartitioner(Partitioner):
    """Sends each record to the subtask owning its key's key group (DESIGN §6)."""

    key_selector: Any

    # The routes look keys up in the assigner's cache of subtasks themselves (a C call) and
    # call `subtask` only on a miss: a third less per record than calling it for each.
    def bind(self, num_channels, max_parallelism):
        assigner = KeyGroupAssigner(max_parallelism, num_channels)
        subtask_of, cached = assigner.subtask, assigner.cached_subtask
        select = self.key_selector

        def route(records, buffers):
            for r in records:
                k = select(r)
                try:
                    c = cached(k)
                except TypeError:  # unhashable: `subtask_of` hashes it or says why not
                    c = None
                if c is None:
                    c = subtask_of(k)
                buffers[c].append(r)

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        assigner = KeyGroupAssigner(max_parallelism, num_channels)
        subtask_of, cached = assigner.subtask, assigner.cached_subtask
        select = self.key_selector

        def route(records, timestamps, buffers, ts_buffers):
            for r, t in zip(records, timestamps, strict=True):
                k = select(r)
                try:
                    c = cached(k)
                except TypeError:  # unhashable: `subtask_of` hashes it or says why not
                    c = None
                if c is None:
                    c = subtask_of(k)
                buffers[c].append(r)
                ts_buffers[c].append(t)

        return route


@dataclass(frozen=True)
class CustomPartitioner(Partitioner):
    """`partition_custom`: `partition(key, num_channels)` of each record's key picks its
    channel; an index outside [0, num_channels) fails the job naming the key."""

    partition: Any
    key_selector: Any

    def _channel_of(self, num_channels: int) -> Callable[[Any], int]:
        partition, select = self.partition, self.key_selector

        def channel(record: Any) -> int:
            key = select(record)
            c = partition(key, num_channels)
            if type(c) is not int or not 0 <= c < num_channels:
                raise ValueError(
                    f"the custom partitioner returned {c!r} for key {key!r}; it must return "
                    f"an int in [0, {num_channels}) (the number of downstream subtasks)"
                )
            return c

        return channel

    def bind(self, num_channels, max_parallelism):
        channel = self._channel_of(num_channels)

        def route(records, buffers):
            for r in records:
                buffers[channel(r)].append(r)

        return route

    def bind_timestamped(self, num_channels, max_parallelism):
        channel = self._channel_of(num_channels)

        def route(records, timestamps, buffers, ts_buffers):
            for r, t in zip(records, timestamps, strict=True):
                c = channel(r)
                buffers[c].append(r)
                ts_buffers[c].append(t)

        return route
