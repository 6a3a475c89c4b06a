"""Plain-Python reference computations of the Nexmark queries (what bench/nexmark/queries.py
must output), and the bare-loop baselines of the benchmark: each function consumes an iterable
of events in one process, with dicts for state and no engine at all.

Results are output rows (lists, or lazy iterators for the stateless queries, so a bare loop
does not hold them all); compare them as multisets (the order of a parallel job's
output is not defined). q4's rows are the running averages (category, average, auctions) each
closed auction produces.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from bench.nexmark.model import Auction, Bid, Person
from bench.nexmark.queries import DOLLAR_TO_EURO, Q3_CATEGORY, Q3_STATES, SLIDE_MS, WINDOW_MS


def q0(events: Iterable[Any]) -> Iterator[Bid]:
    return (e for e in events if type(e) is Bid)


def q1(events: Iterable[Any]) -> Iterator[tuple]:
    return (
        (e.auction, e.bidder, DOLLAR_TO_EURO * e.price, e.date_time, e.extra)
        for e in events
        if type(e) is Bid
    )


def q2(events: Iterable[Any]) -> Iterator[tuple]:
    return ((e.auction, e.price) for e in events if type(e) is Bid and e.auction % 123 == 0)


def q3(events: Iterable[Any]) -> list:
    people: dict[int, tuple] = {}
    auctions: list[Auction] = []
    for e in events:
        if type(e) is Person and e.state in Q3_STATES:
            people[e.id] = (e.name, e.city, e.state)
        elif type(e) is Auction and e.category == Q3_CATEGORY:
            auctions.append(e)
    return [(*people[a.seller], a.id) for a in auctions if a.seller in people]


def q4(events: Iterable[Any]) -> list:
    auctions: dict[int, Auction] = {}
    bids: list[Bid] = []
    for e in events:
        if type(e) is Auction:
            auctions[e.id] = e
        elif type(e) is Bid:
            bids.append(e)
    best: dict[int, int] = {}
    for b in bids:
        a = auctions.get(b.auction)
        if a is not None and a.date_time <= b.date_time <= a.expires:
            best[a.id] = max(best.get(a.id, b.price), b.price)
    # running averages in the order the auctions close (any order gives the same rows except
    # the average fields of intermediate rows; the final row per category is order-free)
    rows = []
    totals: dict[int, tuple[int, int]] = {}
    for auction_id, price in sorted(best.items(), key=lambda kv: auctions[kv[0]].expires):
        category = auctions[auction_id].category
        s, n = totals.get(category, (0, 0))
        s, n = s + price, n + 1
        totals[category] = (s, n)
        rows.append((category, s / n, n))
    return rows


def q5(events: Iterable[Any], size: int = WINDOW_MS, slide: int = SLIDE_MS) -> list:
    counts: collections.Counter = collections.Counter()
    for e in events:
        if type(e) is Bid:
            t = e.date_time
            start = t - t % slide
            while start > t - size:
                counts[(start, e.auction)] += 1
                start -= slide
    top: dict[int, int] = {}
    for (start, _), n in counts.items():
        top[start] = max(top.get(start, 0), n)
    return [(start, a, n) for (start, a), n in counts.items() if n == top[start]]


def q7(events: Iterable[Any], size: int = WINDOW_MS) -> list:
    windows: dict[int, list[Bid]] = collections.defaultdict(list)
    for e in events:
        if type(e) is Bid:
            windows[e.date_time - e.date_time % size].append(e)
    rows = []
    for bids in windows.values():
        top = max(b.price for b in bids)
        rows += [
            (b.auction, b.price, b.bidder, b.date_time, b.extra) for b in bids if b.price == top
        ]
    return rows


def q8(events: Iterable[Any], size: int = WINDOW_MS) -> list:
    people: dict[tuple[int, int], str] = {}
    sellers: set[tuple[int, int]] = set()
    for e in events:
        if type(e) is Person:
            people[(e.id, e.date_time - e.date_time % size)] = e.name
        elif type(e) is Auction:
            sellers.add((e.seller, e.date_time - e.date_time % size))
    return [(pid, name, start) for (pid, start), name in people.items() if (pid, start) in sellers]


REFERENCE: dict[str, Callable[[Iterable[Any]], Iterable[Any]]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q7": q7,
    "q8": q8,
}
