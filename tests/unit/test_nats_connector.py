"""The NATS JetStream connectors: their pure decisions, then each against a real nats-server
with JetStream (the session's `nats_server`): the reader's positions and bounded end, the
sink's message ids and the committer's deduplication."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from tidegate.connectors.nats.connection import NatsClient, NatsConnection
from tidegate.connectors.nats.sink import NatsJetStreamSink, message_id, outside_window
from tidegate.connectors.nats.source import NatsJetStreamSource


def test_message_ids_name_job_writer_checkpoint_index_and_nonce():
    assert message_id("j", 2, 7, 0, "abc") == "j/2/7/0/abc"


def test_a_batch_is_outside_the_window_once_the_window_passed():
    assert outside_window(100.0, 220.0, 120.0)
    assert not outside_window(100.0, 219.0, 120.0)
    assert not outside_window(0.0, 1e9, 0.0)  # unknown window


def test_the_builders_name_what_is_missing():
    with pytest.raises(ValueError, match="set_stream"):
        NatsJetStreamSource.builder().build()
    with pytest.raises(ValueError, match="set_subject"):
        NatsJetStreamSink.builder().build()
    with pytest.raises(ValueError, match="start at 1"):
        NatsJetStreamSource.builder().set_start_sequence(0)


@pytest.fixture
def js(nats_server):
    client = NatsClient(NatsConnection(nats_server.url))
    yield client
    client.close()


def _stream(js, duplicate_window: float = 120.0) -> str:
    name = f"S{uuid.uuid4().hex[:8]}"
    js.run(js.js.add_stream(name=name, subjects=[f"{name}.>"], duplicate_window=duplicate_window))
    return name


def _publish(js, subject: str, *payloads: str) -> None:
    for p in payloads:
        js.run(js.js.publish(subject, p.encode()))


def _source(nats_server, stream, *subjects, bounded=False):
    builder = NatsJetStreamSource.builder().set_servers(nats_server.url).set_stream(stream)
    if subjects:
        builder.set_subjects(*subjects)
    if bounded:
        builder.set_bounded()
    return builder.set_deserializer(lambda subject, seq, data: (subject, data.decode())).build()


def _poll_until_quiet(reader, max_records=5, quiet_polls=3):
    out, quiet = [], 0
    while quiet < quiet_polls:
        batch = reader.poll_batch(max_records)
        if batch is None:
            return out, True
        out.extend(batch)
        quiet = 0 if batch else quiet + 1
    return out, False


def test_a_reader_restored_from_its_splits_resumes_after_the_last_message(nats_server, js):
    s = _stream(js)
    _publish(js, f"{s}.a", *[f"a{i}" for i in range(12)])
    _publish(js, f"{s}.b", *[f"b{i}" for i in range(12)])
    source = _source(nats_server, s, f"{s}.a", f"{s}.b")
    splits = source.create_splits(2)
    assert len(splits) == 2
    reader = source.create_reader(splits, 0, 1)
    first = []
    while len(first) < 6:
        first.extend(reader.poll_batch(6))
    snapshot = reader.snapshot_splits()
    reader.close()
    restored = source.create_reader(snapshot, 0, 1)
    rest, finished = _poll_until_quiet(restored)
    restored.close()
    assert not finished
    expected = [(f"{s}.a", f"a{i}") for i in range(12)] + [(f"{s}.b", f"b{i}") for i in range(12)]
    assert sorted(first + rest) == sorted(expected)


def test_a_bounded_reader_ends_at_the_last_sequence_of_when_it_was_planned(nats_server, js):
    s = _stream(js)
    _publish(js, f"{s}.a", "1", "2")
    _publish(js, f"{s}.b", "x")  # not matched by the filter
    source = _source(nats_server, s, f"{s}.a", bounded=True)
    splits = source.create_splits(1)
    _publish(js, f"{s}.a", "3")  # after the plan: not read
    reader = source.create_reader(splits, 0, 1)
    got, finished = _poll_until_quiet(reader)
    reader.close()
    assert finished
    assert [v for _, v in got] == ["1", "2"]


def test_the_sink_publishes_on_commit_and_a_repeated_commit_is_deduplicated(nats_server, js):
    s = _stream(js)
    sink = (
        NatsJetStreamSink.builder()
        .set_servers(nats_server.url)
        .set_stream(s)
        .set_subject(f"{s}.out")
        .build()
        .for_job("job-n")
    )
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["a", "b", "c"])
    assert js.run(js.js.stream_info(s)).state.messages == 0
    batches = writer.prepare_commit(3)
    committer = sink.create_committer()
    committer.commit(batches)
    committer.commit(batches)
    sink.create_committer().commit(batches)
    info = js.run(js.js.stream_info(s))
    assert info.state.messages == 3
    got = [js.run(js.js.get_msg(s, seq)).data for seq in range(1, 4)]
    assert got == [b"a", b"b", b"c"]


def test_without_subjects_one_split_reads_the_whole_stream(nats_server, js):
    s = _stream(js)
    _publish(js, f"{s}.a", "1")
    _publish(js, f"{s}.b", "2")
    source = _source(nats_server, s, bounded=True)
    [split] = source.create_splits(3)
    assert split.subject is None and split.end_seq == 2
    reader = source.create_reader([split], 0, 1)
    got, finished = _poll_until_quiet(reader)
    reader.close()
    assert finished and [v for _, v in got] == ["1", "2"]


def test_a_bounded_split_ends_although_the_streams_last_message_is_of_another_subject(
    nats_server, js
):
    s = _stream(js)
    for i in range(4):
        _publish(js, f"{s}.a", f"a{i}")
        _publish(js, f"{s}.b", f"b{i}")
    source = _source(nats_server, s, f"{s}.a", f"{s}.b", bounded=True)
    a_split = source.create_splits(1)[0]
    reader = source.create_reader([a_split], 0, 2)
    got, finished = _poll_until_quiet(reader)
    reader.close()
    assert finished and [v for _, v in got] == [f"a{i}" for i in range(4)]


def test_a_batch_committed_after_the_duplicate_window_is_warned_about(nats_server, js, caplog):
    from tidegate.connectors.nats.sink import NatsBatch

    s = _stream(js, duplicate_window=30.0)
    sink = (
        NatsJetStreamSink.builder()
        .set_servers(nats_server.url)
        .set_stream(s)
        .set_subject(f"{s}.out")
        .build()
        .for_job("job-w")
    )
    old = NatsBatch("job-w", 0, 2, "abc", time.time() - 60, ((f"{s}.out", b"x"),))
    committer = sink.create_committer()
    with caplog.at_level(logging.WARNING, logger="tidegate.connectors.nats.sink"):
        committer.commit([old])
    committer.close()
    assert "beyond stream" in caplog.text and "duplicate window of 30 s" in caplog.text
    assert js.run(js.js.stream_info(s)).state.messages == 1


def test_a_reader_whose_consumer_the_server_deleted_resumes_with_a_new_one(
    nats_server, js, monkeypatch
):
    from tidegate.connectors.nats import source as nats_source

    monkeypatch.setattr(nats_source, "CONSUMER_CHECK_S", 0.0)
    s = _stream(js)
    _publish(js, f"{s}.a", "1", "2")
    source = _source(nats_server, s)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    first, _ = _poll_until_quiet(reader)
    [sub] = reader._subs.values()
    js.run(js.js.delete_consumer(s, sub._consumer))  # as after INACTIVE_THRESHOLD_S
    _publish(js, f"{s}.a", "3")
    rest, _ = _poll_until_quiet(reader, quiet_polls=5)
    reader.close()
    assert [v for _, v in first + rest] == ["1", "2", "3"]
