"""The Nexmark event generator: event number -> Person | Auction | Bid, deterministically.

Semantics follow the reference generator (Apache Beam's `NexmarkGenerator` / the nexmark
project's `GeneratorConfig`, `PersonGenerator`, `AuctionGenerator`, `BidGenerator`):

* Event `n` is a person, an auction or a bid by `n % 50` (proportions 1 : 3 : 46); ids are
  dense: person ids and auction ids start at 1000 and follow the event numbers.
* Event time: `date_time = base_time + n * 1000 // first_event_rate` (the inter-event delay
  of `first_event_rate` events per second of event time).
* Bids go to a hot auction (the first of the last 100 auctions) with probability
  1 - 1/hot_auction_ratio, else to one of the last `num_in_flight_auctions` auctions (+10
  "lead" ids not created yet). Bidders and sellers likewise: hot with probability
  1 - 1/hot_bidders_ratio (hot_sellers_ratio), else one of the last `num_active_people`.
* Prices are `round(10 ** (u * 6) * 100)` cents for uniform u; an auction's reserve is its
  initial bid plus another price; it expires after 1 + uniform(2 * horizon) ms, where the
  horizon is the time until `num_in_flight_auctions` more auctions were generated.
* Persons live in one of 6 US states and 10 cities; bids use 4 hot channels 99 times in 100.
* `extra` pads each event to its average byte size (person 200, auction 500, bid 100) +-20%.

Deliberate differences, for speed and replayability (none changes what a query computes):
random values come from counter-based hashes (of the seed and the event number for persons and
auctions, of the seed and a block of 64 event numbers for bids) instead of
`java.util.Random(eventId)`, so the generated values are not Beam's bit for bit; random strings
are slices of one fixed random text (lowercase letters and spaces, 1 in 13) instead of
character-by-character draws; a cold channel's URL is a function of its number (Beam draws it
when the channel is first used, which depends on the order of generation); and `base_time` is
a configured constant (Beam uses the wall clock at start) so every run generates the same
events.
"""

from __future__ import annotations

import hashlib
import random
import struct
from dataclasses import dataclass

from bench.nexmark.model import Auction, Bid, Person

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_BATCH = 100  # hot items are the first of each batch of 100 (Beam's *_RATIO consts)
HOT_SELLER_BATCH = 100
HOT_BIDDER_BATCH = 100
HOT_CHANNELS_RATIO = 100
CHANNELS_NUMBER = 10_000
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
MIN_STRING_LENGTH = 3

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah")
FIRST_NAMES += ("Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones")
LAST_NAMES += ("Noris",)
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_URLS = tuple(f"https://www.nexmark.com/{p}/item.htm?query=1" for p in ("googl", "meta"))
HOT_URLS += tuple(f"https://www.nexmark.com/{p}/item.htm?query=1" for p in ("bidu", "aapl"))

#: the random text strings are sliced from (fixed: the same on every machine and run)
_POOL_SLACK = 1024
_POOL_OFFSETS = 1 << 16
_rng = random.Random(20260101)
POOL = "".join(
    " " if _rng.randrange(13) == 0 else chr(97 + _rng.randrange(26))
    for _ in range(_POOL_OFFSETS + _POOL_SLACK)
)
del _rng

_M128 = (1 << 128) - 1
_K1 = 0x9E3779B97F4A7C15F39CC0605CEDC835
_K2 = 0xD6E8FEB86659FD93C8B3E1B0F2A1D4C5
_K3 = 0xBF58476D1CE4E5B994D049BB133111EB


def mix128(x: int) -> int:
    """A 128-bit integer hash with full avalanche (multiply-xorshift rounds)."""
    x = ((x + 1) * _K1) & _M128
    x ^= x >> 67
    x = (x * _K2) & _M128
    x ^= x >> 59
    x = (x * _K3) & _M128
    return x ^ (x >> 64)


#: bids draw from blocks of 2 ** _BLOCK_BITS events: one SHAKE-128 output per block
_BLOCK_BITS = 6
_BLOCK_MASK = (1 << _BLOCK_BITS) - 1


def bid_draws(seed: int, block: int) -> list[tuple[int, ...]]:
    """Eight uniform 16-bit draws for each event of `block` (events `block * 64 ...`): one
    extendable-output hash per block, ~0.2 us per event against ~0.7 us for a `mix128` each."""
    stream = hashlib.shake_128(f"nexmark-bids:{seed}:{block}".encode()).digest(16 << _BLOCK_BITS)
    return list(_EIGHT_DRAWS.iter_unpack(stream))


#: a 32-bit uniform integer times this is 6 * u: prices are 10 ** (6u) * 100
_PRICE_SCALE = 6.0 / (1 << 32)
#: a 128-bit hash as eight 16-bit draws; two as sixteen
_EIGHT_DRAWS = struct.Struct("<8H")
_SIXTEEN_DRAWS = struct.Struct("<16H")


def java_round(x: float) -> int:
    """Java's Math.round (half up), not Python's round (half to even)."""
    return int(x + 0.5)


@dataclass(frozen=True)
class NexmarkConfig:
    """The generator's parameters; defaults are the Nexmark defaults."""

    first_event_rate: int = 10_000  # events per second of event time
    base_time: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms: event 0's date_time
    seed: int = 0
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    num_active_people: int = 1000
    num_in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100

    def __post_init__(self) -> None:
        for name in ("first_event_rate", "person_proportion", "auction_proportion"):
            if getattr(self, name) < 1:
                raise ValueError(f"NexmarkConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.bid_proportion < 0:
            raise ValueError(f"NexmarkConfig.bid_proportion must be >= 0: {self.bid_proportion}")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def timestamp(self, event_number: int) -> int:
        """The event time (ms) of event `event_number`."""
        return self.base_time + event_number * 1000 // self.first_event_rate


class _Draws:
    """Uniform integers for one person or auction: 16 draws of 16 bits from two 128-bit
    hashes, taken in order (`draw(n)` uses one for n <= 65536, two above). An auction takes
    at most 16 (seller 2, category 1, prices 2 + 2, length 2, strings 2 + 2, extra 2)."""

    __slots__ = ("_next", "_values")

    def __init__(self, x: int) -> None:
        h = mix128(x)
        self._values = _SIXTEEN_DRAWS.unpack(
            h.to_bytes(16, "little") + mix128(h).to_bytes(16, "little")
        )
        self._next = 0

    def draw(self, n: int) -> int:
        i = self._next
        if n <= 65536:
            self._next = i + 1
            return self._values[i] * n >> 16
        self._next = i + 2
        return (self._values[i] << 16 | self._values[i + 1]) * n >> 32

    def string(self, max_length: int) -> str:
        size = MIN_STRING_LENGTH + self.draw(max_length - MIN_STRING_LENGTH)
        offset = self.draw(_POOL_OFFSETS)
        return POOL[offset : offset + size]

    def price(self) -> int:
        return java_round(10.0 ** (self.draw(1 << 32) * _PRICE_SCALE) * 100.0)

    def extra(self, current_size: int, average_size: int) -> str:
        size = extra_size(self, current_size, average_size)
        offset = self.draw(_POOL_OFFSETS)
        return POOL[offset : offset + size]


def extra_size(draws: _Draws, current_size: int, average_size: int) -> int:
    if current_size > average_size:
        return 0
    average_size -= current_size
    delta = java_round(average_size * 0.2)
    return average_size - delta + (draws.draw(2 * delta) if delta else 0)


class NexmarkGenerator:
    """Generates event number `n` (`event(n)`); a pure function of the config and `n`."""

    def __init__(self, config: NexmarkConfig | None = None) -> None:
        c = self.config = config or NexmarkConfig()
        self._total = c.total_proportion
        self._persons = c.person_proportion
        self._auctions_end = c.person_proportion + c.auction_proportion
        self._salt = c.seed << 64
        self._channels: dict[int, tuple[str, str]] = {}
        # events until `num_in_flight_auctions` more auctions exist: the auction-length horizon
        self._auction_horizon_events = (
            c.num_in_flight_auctions * self._total // c.auction_proportion
        )
        # a bid's `extra`: its size range is fixed (Beam counts 4 longs as its current size)
        avg = c.avg_bid_byte_size - 32
        self._bid_delta = java_round(avg * 0.2) if avg > 0 else 0
        self._bid_min_extra = avg - self._bid_delta if avg > 0 else 0

    # ids -------------------------------------------------------------------------------------
    def last_base0_person_id(self, n: int) -> int:
        epoch, offset = divmod(n, self._total)
        return epoch * self._persons + min(offset, self._persons - 1)

    def last_base0_auction_id(self, n: int) -> int:
        epoch, offset = divmod(n, self._total)
        auctions = self.config.auction_proportion
        if offset < self._persons:  # a person: the last auction of the previous epoch
            if epoch == 0:
                return 0
            epoch, offset = epoch - 1, auctions - 1
        elif offset >= self._auctions_end:  # a bid: the last auction of this epoch
            offset = auctions - 1
        else:
            offset -= self._persons
        return epoch * auctions + offset

    def _next_base0_person_id(self, n: int, draws: _Draws) -> int:
        people = self.last_base0_person_id(n) + 1
        active = min(people, self.config.num_active_people)
        return people - active + draws.draw(active + PERSON_ID_LEAD)

    def _next_base0_auction_id(self, n: int, draws: _Draws) -> int:
        last = self.last_base0_auction_id(n)
        low = max(last - self.config.num_in_flight_auctions, 0)
        return low + draws.draw(last - low + 1 + AUCTION_ID_LEAD)

    # events ----------------------------------------------------------------------------------
    def event(self, n: int) -> Person | Auction | Bid:
        """Event number `n` (>= 0)."""
        return self.events(n, 1, 1)[0]

    def person(self, n: int) -> Person:
        d = _Draws(self._salt + n)
        name = f"{FIRST_NAMES[d.draw(len(FIRST_NAMES))]} {LAST_NAMES[d.draw(len(LAST_NAMES))]}"
        email = f"{d.string(7)}@{d.string(5)}.com"
        c1, c2, c3, c4 = d.draw(10_000), d.draw(10_000), d.draw(10_000), d.draw(10_000)
        card = f"{c1:04d} {c2:04d} {c3:04d} {c4:04d}"
        city = US_CITIES[d.draw(len(US_CITIES))]
        state = US_STATES[d.draw(len(US_STATES))]
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        extra = d.extra(size, self.config.avg_person_byte_size)
        pid = self.last_base0_person_id(n) + FIRST_PERSON_ID
        return Person(pid, name, email, card, city, state, self.config.timestamp(n), extra)

    def auction(self, n: int) -> Auction:
        c = self.config
        d = _Draws(self._salt + n)
        if d.draw(c.hot_sellers_ratio) > 0:
            seller = self.last_base0_person_id(n) // HOT_SELLER_BATCH * HOT_SELLER_BATCH
        else:
            seller = self._next_base0_person_id(n, d)
        category = FIRST_CATEGORY_ID + d.draw(NUM_CATEGORIES)
        initial_bid = d.price()
        timestamp = c.timestamp(n)
        horizon = c.timestamp(n + self._auction_horizon_events) - timestamp
        expires = timestamp + 1 + d.draw(max(horizon * 2, 1))
        name = d.string(20)
        description = d.string(100)
        reserve = initial_bid + d.price()
        extra = d.extra(8 + len(name) + len(description) + 40, c.avg_auction_byte_size)
        aid = self.last_base0_auction_id(n) + FIRST_AUCTION_ID
        seller += FIRST_PERSON_ID
        return Auction(
            aid,
            name,
            description,
            initial_bid,
            reserve,
            timestamp,
            expires,
            seller,
            category,
            extra,
        )

    def bid(self, n: int) -> Bid:
        """Bid event number `n` (must be a bid's number)."""
        return self.events(n, 1, 1)[0]

    def events(self, first: int, count: int, stride: int = 1) -> list[Person | Auction | Bid]:
        """Events `first, first + stride, ...` (`count` of them): the batch path of a source.

        Bids (46 in 50) are built inline: eight 16-bit draws each from its block's hash (small
        ints are cheap), and the ids that depend only on the epoch computed once per epoch.
        This loop is the generator's hot path, hence locals instead of attributes.
        """
        c = self.config
        total, persons, auctions_end = self._total, self._persons, self._auctions_end
        auctions, person_prop = c.auction_proportion, c.person_proportion
        hot_auction, hot_bidders = c.hot_auction_ratio, c.hot_bidders_ratio
        in_flight, active_people = c.num_in_flight_auctions, c.num_active_people
        base_time, rate = c.base_time, c.first_event_rate
        bid_min, bid_delta2 = self._bid_min_extra, 2 * self._bid_delta
        hot_channels, hot_urls, pool, channel_of = HOT_CHANNELS, HOT_URLS, POOL, self._channel
        seed, block, draws = c.seed, -1, []
        new, bid_type = tuple.__new__, Bid
        out: list[Person | Auction | Bid] = []
        append = out.append
        cached_epoch = -1
        hot_auction_id = auction_low = auction_span = hot_bidder_id = bidder_low = bidders = 0
        n = first
        for _ in range(count):
            epoch, offset = divmod(n, total)
            if offset < auctions_end:
                append(self.person(n) if offset < persons else self.auction(n))
                n += stride
                continue
            if epoch != cached_epoch:  # ids every bid of this epoch draws from
                cached_epoch = epoch
                last_auction = epoch * auctions + auctions - 1
                hot_auction_id = last_auction // HOT_AUCTION_BATCH * HOT_AUCTION_BATCH
                auction_low = last_auction - in_flight if last_auction > in_flight else 0
                auction_span = last_auction - auction_low + 1 + AUCTION_ID_LEAD
                last_person = epoch * person_prop + person_prop - 1
                hot_bidder_id = last_person // HOT_BIDDER_BATCH * HOT_BIDDER_BATCH + 1
                active = last_person + 1 if last_person < active_people else active_people
                bidder_low, bidders = last_person + 1 - active, active + PERSON_ID_LEAD
            if n >> _BLOCK_BITS != block:
                block = n >> _BLOCK_BITS
                draws = bid_draws(seed, block)
            d0, d1, d2, d3, d4, d5, d6, d7 = draws[n & _BLOCK_MASK]
            if d0 * hot_auction >> 16:
                auction = hot_auction_id
            else:
                auction = auction_low + (d1 * auction_span >> 16)
            hot = d2 * hot_bidders >> 16
            bidder = hot_bidder_id if hot else bidder_low + (d3 * bidders >> 16)
            price = int(10.0 ** ((d4 * 65536 + d5) * _PRICE_SCALE) * 100.0 + 0.5)
            if d6 * HOT_CHANNELS_RATIO >> 16:
                channel, url = hot_channels[d6 & 3], hot_urls[d6 & 3]
            else:
                channel, url = channel_of((d6 * 0x9E37 + n) % CHANNELS_NUMBER)
            extra = pool[d7 : d7 + bid_min + ((d5 >> 8) * bid_delta2 >> 8)]
            append(new(bid_type, (
                auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID, price, channel, url,
                base_time + n * 1000 // rate, extra,
            )))  # fmt: skip
            n += stride
        return out

    def _channel(self, number: int) -> tuple[str, str]:
        """A cold channel's name and URL (a function of its number)."""
        found = self._channels.get(number)
        if found is None:
            d = _Draws(-1 - number)
            url = f"https://www.nexmark.com/{d.string(5)}/item.htm?query=1"
            if d.draw(10) > 0:
                url += f"&channel_id={int(f'{number:032b}'[::-1], 2)}"
            found = self._channels[number] = (f"channel-{number}", url)
        return found
