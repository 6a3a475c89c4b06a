"""q5, q7 and q8 written without the window API: KeyedProcessFunctions with keyed state and
event-time timers at each window's last millisecond (how Flink jobs were written before
windows, and how these queries were first written here). Same results as queries.py's window
versions (both are checked against reference.py); the runner measures both, so the cost of
the window operator can be told apart from the cost of the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from bench.nexmark.model import Person
from bench.nexmark.queries import (
    SLIDE_MS,
    WINDOW_MS,
    bid_auction,
    is_auction,
    is_bid,
    is_person,
    person_or_seller,
    window_start_of,
)
from tidegate.datastream import DataStream, KeyedProcessFunction
from tidegate.datastream.state import MapStateDescriptor, ValueStateDescriptor


def sliding_starts(timestamp: int, size: int, slide: int) -> range:
    """Start times of the sliding windows [start, start + size) that contain `timestamp`."""
    last = timestamp - timestamp % slide
    return range(last, timestamp - size, -slide)


class BidsPerWindow(KeyedProcessFunction):
    """Keyed by auction: counts its bids per sliding window; emits (start, auction, count)
    at the end of each window."""

    def __init__(self, size: int = WINDOW_MS, slide: int = SLIDE_MS) -> None:
        self.size, self.slide = size, slide

    def open(self, runtime_context) -> None:
        self.counts = runtime_context.get_map_state(MapStateDescriptor("bids-per-window"))

    def process_element(self, value, ctx) -> None:
        counts, timers, size = self.counts, ctx.timer_service(), self.size
        for start in sliding_starts(value.date_time, size, self.slide):
            count = counts.get(start)
            if count is None:
                timers.register_event_time_timer(start + size - 1)
                count = 0
            counts.put(start, count + 1)

    def on_timer(self, timestamp, ctx) -> Iterator[tuple]:
        start = timestamp + 1 - self.size
        count = self.counts.get(start)
        if count is not None:
            self.counts.remove(start)
            yield (start, ctx.get_current_key(), count)


class HottestAuctions(KeyedProcessFunction):
    """Keyed by window start: the auctions with the most bids in that window."""

    def __init__(self, size: int = WINDOW_MS) -> None:
        self.size = size

    def open(self, runtime_context) -> None:
        self.top = runtime_context.get_state(ValueStateDescriptor("top-count-auctions"))

    def process_element(self, value, ctx) -> None:
        start, auction, count = value
        top = self.top.value()
        if top is None:
            ctx.timer_service().register_event_time_timer(start + self.size - 1)
            self.top.update((count, [auction]))
        elif count > top[0]:
            self.top.update((count, [auction]))
        elif count == top[0]:
            self.top.update((count, [*top[1], auction]))

    def on_timer(self, timestamp, ctx) -> Iterator[tuple]:
        count, auctions = self.top.value()
        self.top.clear()
        start = ctx.get_current_key()
        for auction in auctions:
            yield (start, auction, count)


def q5_timers(events: DataStream, size: int = WINDOW_MS, slide: int = SLIDE_MS) -> DataStream:
    """Hot items: per sliding window (10 s every 2 s), the auctions with the most bids, as
    (window start, auction, bids)."""
    counts = (
        events.filter(is_bid)
        .uid("q5t-bids")
        .key_by(bid_auction)
        .process(BidsPerWindow(size, slide))
        .uid("q5t-count")
    )
    return counts.key_by(window_start_of).process(HottestAuctions(size)).uid("q5t-hottest")


def tumbling_start(size: int) -> Callable[[Any], int]:
    def start(e: Any) -> int:
        return e.date_time - e.date_time % size

    return start


class HighestBid(KeyedProcessFunction):
    """Keyed by tumbling window start: the bids with the window's highest price."""

    def __init__(self, size: int = WINDOW_MS) -> None:
        self.size = size

    def open(self, runtime_context) -> None:
        self.top = runtime_context.get_state(ValueStateDescriptor("top-price-bids"))

    def process_element(self, value, ctx) -> None:
        top = self.top.value()
        row = (value.auction, value.price, value.bidder, value.date_time, value.extra)
        if top is None:
            ctx.timer_service().register_event_time_timer(ctx.get_current_key() + self.size - 1)
            self.top.update((value.price, [row]))
        elif value.price > top[0]:
            self.top.update((value.price, [row]))
        elif value.price == top[0]:
            self.top.update((value.price, [*top[1], row]))

    def on_timer(self, timestamp, ctx) -> Iterator[tuple]:
        _, rows = self.top.value()
        self.top.clear()
        yield from rows


def q7_timers(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Highest bid: per tumbling window (10 s), the bids at its highest price, as
    (auction, price, bidder, date_time, extra)."""
    bids = events.filter(is_bid).uid("q7t-bids")
    return bids.key_by(tumbling_start(size)).process(HighestBid(size)).uid("q7t-highest")


class NewSellers(KeyedProcessFunction):
    """Keyed by person id: per tumbling window, was the person created in it and did they
    open an auction in it? Emits (id, name, window start) for those who did both."""

    def __init__(self, size: int = WINDOW_MS) -> None:
        self.size = size

    def open(self, runtime_context) -> None:
        # window start -> [name or None, sold something]
        self.windows = runtime_context.get_map_state(MapStateDescriptor("windows"))

    def process_element(self, value, ctx) -> None:
        start = value.date_time - value.date_time % self.size
        seen = self.windows.get(start)
        if seen is None:
            ctx.timer_service().register_event_time_timer(start + self.size - 1)
            seen = (None, False)
        if type(value) is Person:
            self.windows.put(start, (value.name, seen[1]))
        elif not seen[1]:
            self.windows.put(start, (seen[0], True))

    def on_timer(self, timestamp, ctx) -> Iterator[tuple]:
        start = timestamp + 1 - self.size
        name, sold = self.windows.get(start)
        self.windows.remove(start)
        if name is not None and sold:
            yield (ctx.get_current_key(), name, start)


def q8_timers(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Monitor new users: people who opened an auction in the tumbling window (10 s) in which
    they registered, as (id, name, window start)."""
    persons = events.filter(is_person).uid("q8t-persons")
    auctions = events.filter(is_auction).uid("q8t-auctions")
    joined = persons.union(auctions).key_by(person_or_seller)
    return joined.process(NewSellers(size)).uid("q8t-join")


HANDWRITTEN: dict[str, Callable[[DataStream], DataStream]] = {
    "q5-timers": q5_timers,
    "q7-timers": q7_timers,
    "q8-timers": q8_timers,
}
