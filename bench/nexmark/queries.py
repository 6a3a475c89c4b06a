"""Nexmark queries q0-q5, q7, q8 written with tidegate's public DataStream API, as a user would.

Each `qN(events)` takes the stream of Nexmark events (`events_stream`) and returns its result
stream. Semantics follow the nexmark project's Flink SQL queries (the published reference);
bench/nexmark/reference.py computes the same results in plain Python.

Windows and joins are hand-written KeyedProcessFunctions with keyed state and event-time
timers (the way Flink jobs were written before the window API): a window's result is emitted
by a timer at its last millisecond (Flink's `window.max_timestamp()`), so the results are those
of event-time windows. On a branch without watermarks, event-time timers fire at the end of a
bounded input (the maximum watermark), so on bounded runs every result is complete and exact;
once sources emit watermarks the same code emits each window when the watermark passes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from bench.nexmark.model import Auction, Bid, Person
from tidegate.common import WatermarkStrategy
from tidegate.datastream import DataStream, KeyedProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

WINDOW_MS = 10_000  # q5's window size, q7's and q8's tumbling windows (Nexmark: 10 s)
SLIDE_MS = 2_000  # q5's slide (Nexmark: 2 s)
DOLLAR_TO_EURO = 0.908
Q3_STATES = frozenset(("OR", "ID", "CA"))
Q3_CATEGORY = 10


class EventTime:
    """PyFlink's TimestampAssigner shape: an event's time is its `date_time`."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value.date_time


def events_stream(env: StreamExecutionEnvironment, source: Any) -> DataStream:
    """The Nexmark source with event-time timestamps (watermarks once tidegate emits them)."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
    return env.from_source(source, strategy, "nexmark").uid("nexmark")


def is_bid(e: Any) -> bool:
    return type(e) is Bid


def is_person(e: Any) -> bool:
    return type(e) is Person


def is_auction(e: Any) -> bool:
    return type(e) is Auction


# stateless ------------------------------------------------------------------------------------
def q0(events: DataStream) -> DataStream:
    """Pass-through: every bid."""
    return events.filter(is_bid).uid("q0-bids")


def to_euro(b: Bid) -> tuple:
    return (b.auction, b.bidder, DOLLAR_TO_EURO * b.price, b.date_time, b.extra)


def q1(events: DataStream) -> DataStream:
    """Currency conversion: bids with the price in euros."""
    return events.filter(is_bid).uid("q1-bids").map(to_euro).uid("q1-euro")


def q2_selected(e: Any) -> bool:
    return type(e) is Bid and e.auction % 123 == 0


def auction_price(b: Bid) -> tuple:
    return (b.auction, b.price)


def q2(events: DataStream) -> DataStream:
    """Selection: (auction, price) of the bids on auctions whose id is a multiple of 123."""
    return events.filter(q2_selected).uid("q2-select").map(auction_price).uid("q2-project")


# q3: incremental join -------------------------------------------------------------------------
def q3_person(e: Any) -> bool:
    return type(e) is Person and e.state in Q3_STATES


def q3_auction(e: Any) -> bool:
    return type(e) is Auction and e.category == Q3_CATEGORY


def person_or_seller(e: Person | Auction) -> int:
    return e.id if type(e) is Person else e.seller


class LocalItemSuggestion(KeyedProcessFunction):
    """Keyed by person id: joins a person with every auction they sell, whichever comes first
    (the person is kept; auctions seen before their seller wait in a list)."""

    def open(self, runtime_context) -> None:
        self.person = runtime_context.get_state(ValueStateDescriptor("person"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting-auctions"))

    def process_element(self, value, ctx) -> Iterator[tuple]:
        if type(value) is Person:
            person = (value.name, value.city, value.state)
            self.person.update(person)
            for auction_id in self.waiting.get():
                yield (*person, auction_id)
            self.waiting.clear()
            return
        person = self.person.value()
        if person is None:
            self.waiting.add(value.id)
        else:
            yield (*person, value.id)


def q3(events: DataStream) -> DataStream:
    """(name, city, state, auction id) of category-10 auctions sold by people in OR, ID, CA."""
    persons = events.filter(q3_person).uid("q3-persons")
    auctions = events.filter(q3_auction).uid("q3-auctions")
    joined = persons.union(auctions).key_by(person_or_seller)
    return joined.process(LocalItemSuggestion()).uid("q3-join")


# q4: average closing price per category -------------------------------------------------------
def is_auction_or_bid(e: Any) -> bool:
    return type(e) is not Person


def auction_key(e: Auction | Bid) -> int:
    return e.id if type(e) is Auction else e.auction


class ClosingPrice(KeyedProcessFunction):
    """Keyed by auction id: the highest bid placed while the auction was open
    (`date_time <= bid.date_time <= expires`), emitted as (category, price) when the auction
    closes (event-time timer at `expires`). Bids seen before their auction wait in state
    until the watermark passes them (an auction is never younger than its valid bids)."""

    def open(self, runtime_context) -> None:
        self.auction = runtime_context.get_state(ValueStateDescriptor("auction"))
        self.best = runtime_context.get_state(ValueStateDescriptor("best-price"))
        self.early = runtime_context.get_list_state(ListStateDescriptor("early-bids"))

    def process_element(self, value, ctx) -> None:
        if type(value) is Auction:
            opened, expires = value.date_time, value.expires
            self.auction.update((value.category, opened, expires))
            prices = [p for t, p in self.early.get() if opened <= t <= expires]
            if prices:
                self.best.update(max(prices))
            self.early.clear()
            ctx.timer_service().register_event_time_timer(expires)
            return
        auction = self.auction.value()
        if auction is None:
            self.early.add((value.date_time, value.price))
            ctx.timer_service().register_event_time_timer(value.date_time)
        elif auction[1] <= value.date_time <= auction[2]:
            best = self.best.value()
            if best is None or value.price > best:
                self.best.update(value.price)

    def on_timer(self, timestamp, ctx) -> Iterator[tuple]:
        auction = self.auction.value()
        if auction is None:  # bids whose auction did not come before the watermark: drop them
            self.early.update([(t, p) for t, p in self.early.get() if t > timestamp])
        elif timestamp == auction[2]:
            best = self.best.value()
            if best is not None:
                yield (auction[0], best)
            self.auction.clear()
            self.best.clear()
            self.early.clear()


def category_of(pair: tuple) -> int:
    return pair[0]


class RunningAverage(KeyedProcessFunction):
    """Keyed by category: emits (category, average, auctions) after every closed auction."""

    def open(self, runtime_context) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("sum-count"))

    def process_element(self, value, ctx) -> Iterator[tuple]:
        price_sum, count = self.total.value() or (0, 0)
        price_sum, count = price_sum + value[1], count + 1
        self.total.update((price_sum, count))
        yield (value[0], price_sum / count, count)


def q4(events: DataStream) -> DataStream:
    closed = (
        events.filter(is_auction_or_bid)
        .uid("q4-auctions-bids")
        .key_by(auction_key)
        .process(ClosingPrice())
        .uid("q4-closing-price")
    )
    return closed.key_by(category_of).process(RunningAverage()).uid("q4-average")


# windows by hand: q5, q7, q8 -------------------------------------------------------------------
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


def window_start_of(row: tuple) -> int:
    return row[0]


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


def bid_auction(b: Bid) -> int:
    return b.auction


def q5(events: DataStream, size: int = WINDOW_MS, slide: int = SLIDE_MS) -> DataStream:
    """Hot items: per sliding window (10 s every 2 s), the auctions with the most bids, as
    (window start, auction, bids)."""
    counts = (
        events.filter(is_bid)
        .uid("q5-bids")
        .key_by(bid_auction)
        .process(BidsPerWindow(size, slide))
        .uid("q5-count")
    )
    return counts.key_by(window_start_of).process(HottestAuctions(size)).uid("q5-hottest")


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


def q7(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Highest bid: per tumbling window (10 s), the bids at its highest price, as
    (auction, price, bidder, date_time, extra)."""
    bids = events.filter(is_bid).uid("q7-bids")
    return bids.key_by(tumbling_start(size)).process(HighestBid(size)).uid("q7-highest")


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


def q8(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Monitor new users: people who opened an auction in the tumbling window (10 s) in which
    they registered, as (id, name, window start)."""
    persons = events.filter(is_person).uid("q8-persons")
    auctions = events.filter(is_auction).uid("q8-auctions")
    joined = persons.union(auctions).key_by(person_or_seller)
    return joined.process(NewSellers(size)).uid("q8-join")


QUERIES: dict[str, Callable[[DataStream], DataStream]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q7": q7,
    "q8": q8,
}
