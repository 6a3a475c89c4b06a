"""The Nexmark generator (bench/nexmark/generator.py) and its replayable source."""

from __future__ import annotations

import collections

import pytest

from bench.nexmark.generator import (
    HOT_CHANNELS,
    US_CITIES,
    US_STATES,
    NexmarkConfig,
    NexmarkGenerator,
)
from bench.nexmark.model import Auction, Bid, Person
from bench.nexmark.source import NexmarkSource

N = 50_000


@pytest.fixture(scope="module")
def events():
    return NexmarkGenerator().events(0, N)


def test_events_come_in_the_proportions_1_3_46_per_epoch_of_50(events):
    kinds = [type(e) for e in events]
    for epoch in range(0, N, 50):
        assert kinds[epoch : epoch + 50] == [Person] + [Auction] * 3 + [Bid] * 46


def test_person_and_auction_ids_are_dense_from_1000_and_timestamps_follow_the_rate(events):
    assert [e.id for e in events if type(e) is Person] == list(range(1000, 1000 + N // 50))
    assert [e.id for e in events if type(e) is Auction] == list(range(1000, 1000 + 3 * N // 50))
    base = NexmarkConfig().base_time
    assert [e.date_time for e in events] == [base + n // 10 for n in range(N)]  # 10 000/s


def test_a_batch_with_a_stride_equals_the_single_events_it_covers(events):
    g = NexmarkGenerator()
    assert g.events(7, 1000, 3) == [events[n] for n in range(7, 3007, 3)]
    assert [g.event(n) for n in (0, 1, 4, 49, 50, 12_345)] == [
        events[n] for n in (0, 1, 4, 49, 50, 12_345)
    ]


def test_another_seed_generates_other_values_with_the_same_ids():
    a = NexmarkGenerator(NexmarkConfig(seed=1)).events(0, 100)
    b = NexmarkGenerator().events(0, 100)
    assert [type(e) for e in a] == [type(e) for e in b]
    assert [e.id for e in a if type(e) is Person] == [e.id for e in b if type(e) is Person]
    assert a != b


def test_bids_go_to_hot_auctions_and_bidders_at_the_configured_ratios(events):
    bids = [e for e in events if type(e) is Bid]
    hot_auction = sum(b.auction % 100 == 0 for b in bids) / len(bids)
    hot_bidder = sum(b.bidder % 100 == 1 for b in bids) / len(bids)
    assert 0.48 < hot_auction < 0.53  # 1 - 1/2, plus the cold draws that hit a hot id
    assert 0.74 < hot_bidder < 0.77  # 1 - 1/4
    channels = collections.Counter(b.channel for b in bids)
    assert 0.985 < sum(channels[c] for c in HOT_CHANNELS) / len(bids) < 0.995


def test_bids_refer_to_recent_auctions_and_people_at_most_10_ids_ahead(events):
    last_auction, last_person = 999, 999
    for e in events:
        if type(e) is Person:
            last_person = e.id
        elif type(e) is Auction:
            last_auction = e.id
        else:
            assert last_auction - 100 <= e.auction <= last_auction + 10
            assert max(last_person - 1000, 1000) <= e.bidder <= last_person + 10


def test_prices_sizes_and_fields_follow_the_specification(events):
    bids = [e for e in events if type(e) is Bid]
    auctions = [e for e in events if type(e) is Auction]
    persons = [e for e in events if type(e) is Person]
    assert min(b.price for b in bids) >= 100 and max(b.price for b in bids) <= 100_000_000
    assert all(a.reserve >= a.initial_bid and a.expires > a.date_time for a in auctions)
    assert {a.category for a in auctions} == {10, 11, 12, 13, 14}
    assert {p.state for p in persons} == set(US_STATES)
    assert {p.city for p in persons} == set(US_CITIES)
    assert 64 < sum(len(b.extra) for b in bids) / len(bids) < 72  # padded to 100 bytes +-20%
    # auctions last 1 + uniform(2 * horizon) ms; the horizon is 1666 events = 166 ms here
    mean_length = sum(a.expires - a.date_time for a in auctions) / len(auctions)
    assert 150 < mean_length < 185


def test_a_bad_config_is_refused_with_the_field_named():
    with pytest.raises(ValueError, match="first_event_rate"):
        NexmarkConfig(first_event_rate=0)


def _drain(reader, batch: int = 333) -> list:
    out = []
    while (records := reader.poll_batch(batch)) is not None:
        out += records
    return out


def test_a_reader_restored_from_its_snapshot_resumes_at_the_next_event():
    source = NexmarkSource(count=5_000)
    splits = source.create_splits(2)
    reader = source.create_reader(splits[:1], 0, 2)
    first = reader.poll_batch(700) + reader.poll_batch(700)
    restored = source.create_reader(reader.snapshot_splits(), 0, 2)
    assert first + _drain(restored) == NexmarkGenerator().events(0, 2_500, 2)


def test_splits_of_two_subtasks_restored_into_one_generate_every_event_once():
    source = NexmarkSource(count=5_000)
    readers = [source.create_reader([s], i, 2) for i, s in enumerate(source.create_splits(2))]
    seen = readers[0].poll_batch(100) + readers[1].poll_batch(250)
    snapshot = readers[0].snapshot_splits() + readers[1].snapshot_splits()
    resumed = _drain(source.create_reader(snapshot, 0, 1))
    everything = NexmarkGenerator().events(0, 5_000)
    assert sorted(seen + resumed, key=everything.index) == everything
    # one reader, two splits at different positions: still in timestamp order
    assert resumed == sorted(resumed, key=everything.index)
    assert [e.date_time for e in resumed] == sorted(e.date_time for e in resumed)


def test_an_unbounded_source_keeps_generating():
    source = NexmarkSource(count=None)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert len(reader.poll_batch(1000)) == 1000 and len(reader.poll_batch(1000)) == 1000
    assert reader.snapshot_splits()[0].next_index == 2000
