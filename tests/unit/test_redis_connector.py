"""The Redis connectors: their pure decisions, then each against a real redis-server (the
session's `redis_server`): the reader's positions, bounded end and consumer group, entries
trimmed before they were read, the sink writers' batches and the committer's idempotence."""

from __future__ import annotations

import logging
import uuid

import pytest
import redis

from tidegate.connectors.base import CheckpointListeningReader, DataLossError, UsesJobId
from tidegate.connectors.redis.commit import (
    CommitDecision,
    RedisBatch,
    RedisBatchCommitter,
    commit_decision,
    marker_key,
)
from tidegate.connectors.redis.connection import RedisConnection
from tidegate.connectors.redis.ids import id_after, parse_id, split_finished
from tidegate.connectors.redis.sink import RedisKeyValueSink, RedisStreamSink
from tidegate.connectors.redis.source import RedisStreamSource
from tidegate.connectors.redis.trimming import StreamInfo, missing_entries


def test_entry_ids_compare_by_milliseconds_then_sequence():
    assert parse_id("1700000000000-3") == (1700000000000, 3)
    assert parse_id("5") == (5, 0)
    assert id_after("10-0", "9-99") and not id_after("9-99", "10-0")
    assert not id_after("10-0", None)
    with pytest.raises(ValueError, match="not a Redis stream entry id"):
        parse_id("abc")


def test_a_bounded_split_is_finished_once_it_reached_its_end():
    assert split_finished("10-1", "10-1") and split_finished("11-0", "10-1")
    assert not split_finished("10-0", "10-1") and not split_finished("99-0", None)


def test_a_batch_is_skipped_only_when_its_own_marker_exists():
    assert commit_decision(False) is CommitDecision.WRITE
    assert commit_decision(True) is CommitDecision.SKIP
    one = RedisBatch("j", 1, 7, "n1", ())
    other = RedisBatch("j", 1, 7, "n2", ())  # another sink's, or another run's
    assert marker_key("p", one) == "p:j:1:7:n1" != marker_key("p", other)


def test_the_builder_names_what_is_missing():
    with pytest.raises(ValueError, match="set_streams"):
        RedisStreamSource.builder().build()
    with pytest.raises(ValueError, match="set_stream"):
        RedisStreamSink.builder().build()
    with pytest.raises(ValueError, match="set_string_writes"):
        RedisKeyValueSink.builder().build()
    with pytest.raises(ValueError, match="not read"):
        RedisStreamSource.builder().set_streams("a").set_starting_ids({"b": "0-0"}).build()


@pytest.fixture
def client(redis_server):
    c = redis.Redis.from_url(redis_server.url)
    yield c
    c.close()


def _name() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def _source(redis_server, *streams, **options):
    builder = RedisStreamSource.builder().set_url(redis_server.url).set_streams(*streams)
    if options.get("bounded"):
        builder.set_bounded()
    if options.get("group"):
        builder.set_consumer_group(options["group"])
    builder.set_deserializer(lambda stream, entry_id, fields: (stream, fields["v"]))
    return builder.build()


def _poll_all(reader, limit=100):
    out = []
    for _ in range(limit):
        batch = reader.poll_batch(7)
        if batch is None:
            return out, True
        out.extend(batch)
        if not batch:
            return out, False
    return out, False


def test_a_reader_restored_from_its_splits_resumes_after_the_last_entry_returned(
    redis_server, client
):
    a, b = _name(), _name()
    for i in range(20):
        client.xadd(a, {"v": f"a{i}"})
        client.xadd(b, {"v": f"b{i}"})
    source = _source(redis_server, a, b)
    splits = source.create_splits(1)
    assert [s.stream for s in splits] == [a, b]
    reader = source.create_reader(splits, 0, 1)
    first = reader.poll_batch(10)
    snapshot = reader.snapshot_splits()
    reader.close()
    restored = source.create_reader(snapshot, 0, 1)
    rest, finished = _poll_all(restored)
    restored.close()
    assert not finished  # unbounded
    expected = [(a, f"a{i}") for i in range(20)] + [(b, f"b{i}") for i in range(20)]
    assert sorted(first + rest) == sorted(expected)
    assert len(first) == 10


def test_a_bounded_reader_ends_at_the_last_entry_of_when_it_was_planned(redis_server, client):
    s = _name()
    for i in range(5):
        client.xadd(s, {"v": str(i)})
    source = _source(redis_server, s, _name(), bounded=True)  # the second stream is missing
    splits = source.create_splits(1)
    for i in range(5, 8):
        client.xadd(s, {"v": str(i)})  # after the plan: not read
    reader = source.create_reader(splits, 0, 1)
    got, finished = _poll_all(reader)
    reader.close()
    assert finished
    assert [v for _, v in got] == [str(i) for i in range(5)]


def test_consumer_group_mode_acks_up_to_the_completed_checkpoints_position(redis_server, client):
    s = _name()
    for i in range(10):
        client.xadd(s, {"v": str(i)})
    source = _source(redis_server, s, group="g")
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert isinstance(reader, CheckpointListeningReader)
    assert len(reader.poll_batch(4)) == 4
    at_checkpoint = reader.snapshot_splits()
    assert len(reader.poll_batch(100)) == 6
    assert client.xpending(s, "g")["pending"] == 10
    reader.notify_checkpoint_complete(1, at_checkpoint)
    assert client.xpending(s, "g")["pending"] == 6
    reader.close()
    # a restored reader rewinds the group to its checkpointed position: the 6 come again
    again = source.create_reader(at_checkpoint, 0, 1)
    got, _ = _poll_all(again)
    again.close()
    assert [v for _, v in got] == [str(i) for i in range(4, 10)]


def _commit_with(redis_server, batch: RedisBatch) -> None:
    RedisBatchCommitter(RedisConnection(redis_server.url), "tg-test", 60).commit([batch])


def test_a_stream_sink_writes_nothing_before_commit_and_each_batch_once(redis_server, client):
    out = _name()
    sink = RedisStreamSink.builder().set_url(redis_server.url).set_stream(out).build()
    assert isinstance(sink, UsesJobId)
    sink = sink.for_job("job-a")
    writer = sink.create_writer(1, 2, 0)
    writer.write_batch([{"v": "1"}, 2])
    assert client.xlen(out) == 0
    [batch] = writer.prepare_commit(7)
    assert (batch.job_id, batch.writer, batch.checkpoint_id) == ("job-a", 1, 7)
    assert writer.prepare_commit(8) == []  # nothing new
    committer = sink.create_committer()
    committer.commit([batch])
    committer.commit([batch])  # again, e.g. after a restore: skipped
    sink.create_committer().commit([batch])
    entries = client.xrange(out)
    assert [e[1] for e in entries] == [{b"v": b"1"}, {b"value": b"2"}]
    marker = marker_key("tidegate:commit", batch)
    assert client.exists(marker)
    assert 0 < client.ttl(marker) <= 7 * 24 * 3600


def test_a_key_value_sink_upserts_the_last_value_per_key(redis_server, client):
    k = _name()
    sink = (
        RedisKeyValueSink.builder()
        .set_url(redis_server.url)
        .set_hash_writes(lambda r: f"{k}:{r[0]}", lambda r: {r[1]: r[2]})
        .build()
        .for_job("job-b")
    )
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([("x", "a", 1), ("x", "b", 2), ("y", "a", 3), ("x", "a", 4)])
    [batch] = writer.prepare_commit(1)
    assert len(batch.writes) == 2
    sink.create_committer().commit([batch, batch])
    assert client.hgetall(f"{k}:x") == {b"a": b"4", b"b": b"2"}
    assert client.hgetall(f"{k}:y") == {b"a": b"3"}
    strings = (
        RedisKeyValueSink.builder()
        .set_url(redis_server.url)
        .set_string_writes(lambda r: f"{k}:s:{r[0]}", lambda r: r[1])
        .build()
        .for_job("job-b")
    )
    w = strings.create_writer(0, 1, 0)
    w.write_batch([("p", 1), ("p", 2)])
    strings.create_committer().commit(w.prepare_commit(1))
    assert client.get(f"{k}:s:p") == b"2"


def test_a_write_redis_refuses_fails_the_commit_naming_the_batch(redis_server, client):
    k = _name()
    client.set(k, "a string")
    batch = RedisBatch("job-c", 0, 4, "n", (("xadd", k, {"v": "1"}, None),))
    with pytest.raises(RuntimeError, match=r"job job-c, writer 0, checkpoint 4.*WRONGTYPE"):
        _commit_with(redis_server, batch)


def test_two_sinks_batches_of_one_checkpoint_are_committed_and_skipped_separately(
    redis_server, client
):
    a, b = _name(), _name()
    batches = [
        RedisBatch("job-d", 0, 1, uuid.uuid4().hex, (("xadd", a, {"v": "1"}, None),)),
        RedisBatch("job-d", 0, 1, uuid.uuid4().hex, (("xadd", b, {"v": "2"}, None),)),
    ]
    for batch in batches + batches:
        _commit_with(redis_server, batch)
    assert (client.xlen(a), client.xlen(b)) == (1, 1)


def test_entries_are_missing_when_the_first_entry_passed_the_position_and_the_count_is_short():
    info = StreamInfo("8-0", "10-0", "10-0", entries_added=10, length=3)
    assert missing_entries("4-0", 4, None, info) == 3  # 5-0, 6-0, 7-0
    assert missing_entries("7-0", 7, None, info) == 0  # read up to what was trimmed
    assert missing_entries("4-0", None, None, info) == 0  # not counted: unknown
    assert missing_entries("4-0", 4, "4-0", info) == 0  # a bounded split at its end
    assert missing_entries("9-0", 9, None, info) == 0  # the first entry is before it
    empty = StreamInfo(None, None, "10-0", entries_added=10, length=0)
    assert missing_entries("4-0", 4, None, empty) == 6


def test_entries_trimmed_past_a_checkpointed_position_fail_the_reader_naming_them(
    redis_server, client, caplog
):
    s = _name()
    for i in range(1, 11):
        client.xadd(s, {"v": str(i)}, id=f"{i}-0")
    source = _source(redis_server, s)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert len(reader.poll_batch(4)) == 4
    [checkpointed] = reader.snapshot_splits()
    reader.close()
    assert (checkpointed.last_id, checkpointed.offset) == ("4-0", 4)
    client.xtrim(s, maxlen=3, approximate=False)  # keeps 8-0..10-0: 5-0..7-0 were not read
    with pytest.raises(DataLossError) as failure:
        source.create_reader([checkpointed], 0, 1)
    message = str(failure.value)
    assert f"3 entries of Redis stream {s!r} added after" in message
    assert "checkpointed position 4-0 were trimmed" in message
    assert "the first entry still present is 8-0" in message
    assert "set_fail_on_data_loss(False)" in message
    accepting = (
        RedisStreamSource.builder()
        .set_url(redis_server.url)
        .set_streams(s)
        .set_fail_on_data_loss(False)
        .set_deserializer(lambda stream, entry_id, fields: fields["v"])
        .build()
    )
    with caplog.at_level(logging.WARNING, logger="tidegate.connectors.redis.source"):
        reader = accepting.create_reader([checkpointed], 0, 1)
    got, _ = _poll_all(reader)
    [after] = reader.snapshot_splits()
    reader.close()
    assert "continuing with it" in caplog.text
    assert got == ["8", "9", "10"] and after.offset == 10
    # a reader that has read nothing starts with the first entry present: no loss
    fresh = source.create_reader(source.create_splits(1), 0, 1)
    got, _ = _poll_all(fresh)
    fresh.close()
    assert [v for _, v in got] == ["8", "9", "10"]


def test_a_reader_that_caught_up_counts_its_position_from_the_server(
    redis_server, client, monkeypatch
):
    """Its position comes from given starting ids, so it counts only once it caught up; a
    deletion (XDEL) after the position with the oldest entries still present is no loss."""
    from tidegate.connectors.redis import source as redis_source

    monkeypatch.setattr(redis_source, "OFFSET_COUNT_S", 0.0)
    s = _name()
    for i in range(1, 6):
        client.xadd(s, {"v": str(i)}, id=f"{i}-0")
    builder = RedisStreamSource.builder().set_url(redis_server.url).set_streams(s)
    source = builder.set_starting_ids({s: "2-0"}).build()
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert reader.snapshot_splits()[0].offset is None
    _poll_all(reader)
    [split] = reader.snapshot_splits()
    assert (split.last_id, split.offset) == ("5-0", 5)
    for i in range(6, 9):
        client.xadd(s, {"v": str(i)}, id=f"{i}-0")
    client.xdel(s, "7-0")
    reader.close()
    source.create_reader([split], 0, 1).close()  # 1-0 is still there: nothing trimmed
    client.xtrim(s, maxlen=1, approximate=False)  # 6-0 is gone (7-0 was deleted)
    with pytest.raises(DataLossError, match=r"2 entries .* first entry still present is 8-0"):
        source.create_reader([split], 0, 1)
