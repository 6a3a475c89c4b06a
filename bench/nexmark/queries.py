"""Nexmark queries q0-q5, q7, q8 written with tidegate's public DataStream API, as a user would.

Each `qN(events)` takes the stream of Nexmark events (`events_stream`) and returns its result
stream. Semantics follow the nexmark project's Flink SQL queries (the published reference);
bench/nexmark/reference.py computes the same results in plain Python.

Event time: the source's records carry `date_time` as timestamp, with monotonous watermarks
(each source subtask generates its events in order). q5, q7 and q8 use event-time windows
(`window`, `window_all`, a window `join`); q3 and q4 are regular joins (no window), written as
KeyedProcessFunctions with keyed state, q4 closing each auction with an event-time timer at
its `expires`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from bench.nexmark.model import Auction, Bid, Person
from tidegate.common import Types, WatermarkStrategy
from tidegate.datastream import (
    AggregateFunction,
    AllWindowFunction,
    DataStream,
    JoinFunction,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    WindowFunction,
)
from tidegate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from tidegate.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows

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


# windows: q5, q7, q8 ----------------------------------------------------------------------------
class CountBids(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Bid, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, acc_a: int, acc_b: int) -> int:
        return acc_a + acc_b


class WithWindowStart(WindowFunction):
    """(window start, key, count) for the one count of a key's window."""

    def apply(self, key, window, inputs) -> Iterator[tuple]:
        for count in inputs:
            yield (window.start, key, count)


def window_start_of(row: tuple) -> int:
    return row[0]


class TopCounts(AggregateFunction):
    """The highest count among (start, auction, count) rows and the auctions that have it, as
    one flat tuple `(count, auction, auction, ...)`: an immutable value, which window state
    never has to copy (it copies mutable accumulators before a snapshot may see them change)."""

    def create_accumulator(self) -> tuple[int, ...]:
        return (0,)

    def add(self, value: tuple, accumulator: tuple[int, ...]) -> tuple[int, ...]:
        _, auction, count = value
        if count > accumulator[0]:
            return (count, auction)
        if count == accumulator[0]:
            return (*accumulator, auction)
        return accumulator

    def get_result(self, accumulator: tuple[int, ...]) -> tuple[int, ...]:
        return accumulator

    def merge(self, acc_a, acc_b):
        if acc_a[0] != acc_b[0]:
            return max(acc_a, acc_b, key=lambda acc: acc[0])
        return acc_a + acc_b[1:]


class HottestRows(WindowFunction):
    def apply(self, key, window, inputs) -> Iterator[tuple]:
        for count, *auctions in inputs:
            for auction in auctions:
                yield (key, auction, count)


def bid_auction(b: Bid) -> int:
    return b.auction


#: q5's rows (window start, auction, bids) as PyFlink declares them (`q5-typed`)
THREE_LONGS = Types.TUPLE([Types.LONG(), Types.LONG(), Types.LONG()])


def q5(
    events: DataStream, size: int = WINDOW_MS, slide: int = SLIDE_MS, typed: bool = False
) -> DataStream:
    """Hot items: per sliding window (10 s every 2 s), the auctions with the most bids, as
    (window start, auction, bids). A window's counts carry its last millisecond as timestamp,
    so the tumbling `slide` window that holds it gathers exactly that window's counts. With
    `typed`, both window results declare THREE_LONGS: the counts cross to the second window in
    typed frames instead of pickles."""
    row_type = THREE_LONGS if typed else None
    name = "q5-typed" if typed else "q5"
    counts = (
        events.filter(is_bid)
        .uid(f"{name}-bids")
        .key_by(bid_auction)
        .window(SlidingEventTimeWindows.of(size, slide))
        .aggregate(CountBids(), WithWindowStart(), output_type=row_type)
        .uid(f"{name}-count")
    )
    return (
        counts.key_by(window_start_of)
        .window(TumblingEventTimeWindows.of(slide))
        .aggregate(TopCounts(), HottestRows(), output_type=row_type)
        .uid(f"{name}-hottest")
    )


class TopBids(AggregateFunction):
    """The highest price and the bids at it, as (auction, price, bidder, date_time, extra)
    rows; the accumulator is one flat tuple `(price, *row, *row, ...)` (see TopCounts)."""

    def create_accumulator(self) -> tuple:
        return (-1,)

    def add(self, value: Bid, accumulator: tuple) -> tuple:
        price = value.price
        if price < accumulator[0]:
            return accumulator
        row = (value.auction, price, value.bidder, value.date_time, value.extra)
        return (price, *row) if price > accumulator[0] else (*accumulator, *row)

    def get_result(self, accumulator: tuple) -> list[tuple]:
        return [accumulator[i : i + 5] for i in range(1, len(accumulator), 5)]

    def merge(self, acc_a, acc_b):
        if acc_a[0] != acc_b[0]:
            return max(acc_a, acc_b, key=lambda acc: acc[0])
        return acc_a + acc_b[1:]


class EachRow(AllWindowFunction):
    def apply(self, window, inputs) -> Iterator[tuple]:
        for rows in inputs:
            yield from rows


def q7(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Highest bid: per tumbling window (10 s), the bids at its highest price, as
    (auction, price, bidder, date_time, extra). `window_all`: one subtask, as in Flink."""
    return (
        events.filter(is_bid)
        .uid("q7-bids")
        .window_all(TumblingEventTimeWindows.of(size))
        .aggregate(TopBids(), EachRow())
        .uid("q7-highest")
    )


def seller_of(a: Auction) -> int:
    return a.seller


def person_id(p: Person) -> int:
    return p.id


def first_of(a: Any, b: Any) -> Any:
    return a


class NewSeller(JoinFunction):
    def __init__(self, size: int) -> None:
        self.size = size

    def join(self, first: Person, second: Auction) -> tuple:
        return (first.id, first.name, first.date_time - first.date_time % self.size)


def q8(events: DataStream, size: int = WINDOW_MS) -> DataStream:
    """Monitor new users: people who opened an auction in the tumbling window (10 s) in which
    they registered, as (id, name, window start): a window join of persons with each window's
    distinct sellers (an auction per seller and window, stamped with the window's end)."""
    persons = events.filter(is_person).uid("q8-persons")
    sellers = (
        events.filter(is_auction)
        .uid("q8-auctions")
        .key_by(seller_of)
        .window(TumblingEventTimeWindows.of(size))
        .reduce(first_of)
        .uid("q8-sellers")
    )
    return (
        persons.join(sellers)
        .where(person_id)
        .equal_to(seller_of)
        .window(TumblingEventTimeWindows.of(size))
        .apply(NewSeller(size))
        .uid("q8-join")
    )


QUERIES: dict[str, Callable[[DataStream], DataStream]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q5-typed": functools.partial(q5, typed=True),
    "q7": q7,
    "q8": q8,
}
