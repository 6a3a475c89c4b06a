"""The NATS JetStream connectors: their pure decisions, then each against a real nats-server
with JetStream (the session's `nats_server`): the reader's positions and bounded end, its
durable consumer's ack floor, messages removed before they were read, the sink's message ids
and the committer's deduplication. Every reader and committer is closed, also when a test
fails (the `closing` fixture): a client left open logs errors once the server stops."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from tidegate.connectors.base import CheckpointListeningReader, DataLossError
from tidegate.connectors.nats.connection import NatsClient, NatsConnection
from tidegate.connectors.nats.progress import durable_name
from tidegate.connectors.nats.sink import NatsJetStreamSink, message_id, outside_window
from tidegate.connectors.nats.source import NatsJetStreamSource, NatsSplit, removed_range


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


def test_durable_consumer_names_follow_the_split_subjects():
    assert durable_name("mon", None) == "mon"
    assert durable_name("mon", "orders.eu.*") == "mon_orders_eu_+"
    assert durable_name("mon", "orders.>") == "mon_orders_#"


def test_removed_messages_are_those_after_the_position_before_the_first_present():
    assert removed_range(NatsSplit("S", None, 2), 6) == (3, 5)
    assert removed_range(NatsSplit("S", None, 5), 6) is None
    assert removed_range(NatsSplit("S", None, 9), 6) is None
    assert removed_range(NatsSplit("S", None, 2, end_seq=4), 6) == (3, 4)  # up to its end
    assert removed_range(NatsSplit("S", None, 4, end_seq=4), 9) is None
    assert removed_range(NatsSplit("S", None, 0), 6) is None  # from the first message present


def test_the_durable_consumer_option_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"invalid durable consumer name 'a\.b'"):
        NatsJetStreamSource.builder().set_durable_consumer("a.b")
    with pytest.raises(ValueError, match="durable consumers of one name"):
        NatsJetStreamSource.builder().set_stream("S").set_subjects(
            "a.b", "a_b"
        ).set_durable_consumer("mon").build()


@pytest.fixture
def closing():
    """`closing(x)` returns x and closes it at the end of the test, whatever happens."""
    opened = []
    yield lambda x: opened.append(x) or x
    for x in reversed(opened):
        x.close()


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


def test_a_reader_restored_from_its_splits_resumes_after_the_last_message(nats_server, js, closing):
    s = _stream(js)
    _publish(js, f"{s}.a", *[f"a{i}" for i in range(12)])
    _publish(js, f"{s}.b", *[f"b{i}" for i in range(12)])
    source = _source(nats_server, s, f"{s}.a", f"{s}.b")
    splits = source.create_splits(2)
    assert len(splits) == 2
    reader = closing(source.create_reader(splits, 0, 1))
    first = []
    while len(first) < 6:
        first.extend(reader.poll_batch(6))
    snapshot = reader.snapshot_splits()
    restored = closing(source.create_reader(snapshot, 0, 1))
    rest, finished = _poll_until_quiet(restored)
    assert not finished
    expected = [(f"{s}.a", f"a{i}") for i in range(12)] + [(f"{s}.b", f"b{i}") for i in range(12)]
    assert sorted(first + rest) == sorted(expected)


def test_a_bounded_reader_ends_at_the_last_sequence_of_when_it_was_planned(
    nats_server, js, closing
):
    s = _stream(js)
    _publish(js, f"{s}.a", "1", "2")
    _publish(js, f"{s}.b", "x")  # not matched by the filter
    source = _source(nats_server, s, f"{s}.a", bounded=True)
    splits = source.create_splits(1)
    _publish(js, f"{s}.a", "3")  # after the plan: not read
    reader = closing(source.create_reader(splits, 0, 1))
    got, finished = _poll_until_quiet(reader)
    assert finished
    assert [v for _, v in got] == ["1", "2"]


def test_the_sink_publishes_on_commit_and_a_repeated_commit_is_deduplicated(
    nats_server, js, closing
):
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
    committer = closing(sink.create_committer())
    committer.commit(batches)
    committer.commit(batches)
    closing(sink.create_committer()).commit(batches)
    info = js.run(js.js.stream_info(s))
    assert info.state.messages == 3
    got = [js.run(js.js.get_msg(s, seq)).data for seq in range(1, 4)]
    assert got == [b"a", b"b", b"c"]


def test_without_subjects_one_split_reads_the_whole_stream(nats_server, js, closing):
    s = _stream(js)
    _publish(js, f"{s}.a", "1")
    _publish(js, f"{s}.b", "2")
    source = _source(nats_server, s, bounded=True)
    [split] = source.create_splits(3)
    assert split.subject is None and split.end_seq == 2
    reader = closing(source.create_reader([split], 0, 1))
    got, finished = _poll_until_quiet(reader)
    assert finished and [v for _, v in got] == ["1", "2"]


def test_a_bounded_split_ends_although_the_streams_last_message_is_of_another_subject(
    nats_server, js, closing
):
    s = _stream(js)
    for i in range(4):
        _publish(js, f"{s}.a", f"a{i}")
        _publish(js, f"{s}.b", f"b{i}")
    source = _source(nats_server, s, f"{s}.a", f"{s}.b", bounded=True)
    a_split = source.create_splits(1)[0]
    reader = closing(source.create_reader([a_split], 0, 2))
    got, finished = _poll_until_quiet(reader)
    assert finished and [v for _, v in got] == [f"a{i}" for i in range(4)]


def test_a_batch_committed_after_the_duplicate_window_is_warned_about(
    nats_server, js, closing, caplog
):
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
    committer = closing(sink.create_committer())
    with caplog.at_level(logging.WARNING, logger="tidegate.connectors.nats.sink"):
        committer.commit([old])
    assert "beyond stream" in caplog.text and "duplicate window of 30 s" in caplog.text
    assert js.run(js.js.stream_info(s)).state.messages == 1


def test_a_reader_whose_consumer_the_server_deleted_resumes_with_a_new_one(
    nats_server, js, closing, monkeypatch
):
    from tidegate.connectors.nats import source as nats_source

    monkeypatch.setattr(nats_source, "CONSUMER_CHECK_S", 0.0)
    s = _stream(js)
    _publish(js, f"{s}.a", "1", "2")
    source = _source(nats_server, s)
    reader = closing(source.create_reader(source.create_splits(1), 0, 1))
    first, _ = _poll_until_quiet(reader)
    [sub] = reader._subs.values()
    js.run(js.js.delete_consumer(s, sub._consumer))  # as after INACTIVE_THRESHOLD_S
    _publish(js, f"{s}.a", "3")
    rest, _ = _poll_until_quiet(reader, quiet_polls=5)
    assert [v for _, v in first + rest] == ["1", "2", "3"]


def _ack_floor(js, stream: str, consumer: str) -> int:
    return js.run(js.js.consumer_info(stream, consumer)).ack_floor.stream_seq


def test_the_durable_consumers_ack_floor_follows_completed_checkpoints(nats_server, js, closing):
    s = _stream(js)
    for i in range(10):
        _publish(js, f"{s}.a", f"a{i}")
        _publish(js, f"{s}.b", f"b{i}")
    builder = NatsJetStreamSource.builder().set_servers(nats_server.url).set_stream(s)
    source = builder.set_subjects(f"{s}.a", f"{s}.b").set_durable_consumer("mon").build()
    reader = closing(source.create_reader(source.create_splits(1), 0, 1))
    assert isinstance(reader, CheckpointListeningReader)
    names = [durable_name("mon", f"{s}.a"), durable_name("mon", f"{s}.b")]
    got = []
    while len(got) < 8:
        got.extend(reader.poll_batch(8))
    first = reader.snapshot_splits()
    rest, _ = _poll_until_quiet(reader, max_records=50)
    assert len(got) + len(rest) == 20
    second = reader.snapshot_splits()
    assert [_ack_floor(js, s, n) for n in names] == [0, 0]  # nothing completed yet
    reader.notify_checkpoint_complete(1, first)
    assert [_ack_floor(js, s, n) for n in names] == [sp.last_seq for sp in first]
    reader.notify_checkpoint_complete(2, second)
    assert [_ack_floor(js, s, n) for n in names] == [sp.last_seq for sp in second] == [19, 20]
    info = js.run(js.js.consumer_info(s, names[0]))
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
    # a reader restored from the first checkpoint starts the durable consumers there again
    again = closing(source.create_reader(first, 0, 1))
    pending = [js.run(js.js.consumer_info(s, n)).num_pending for n in names]
    assert sum(pending) == 20 - len(got)
    _poll_until_quiet(again, max_records=50)
    again.notify_checkpoint_complete(3, again.snapshot_splits())
    assert [_ack_floor(js, s, n) for n in names] == [19, 20]


def test_a_durable_consumer_name_of_another_application_is_refused_not_deleted(nats_server, js):
    from nats.js.api import ConsumerConfig

    s = _stream(js)
    js.run(js.js.add_consumer(s, ConsumerConfig(durable_name="theirs", description="billing")))
    builder = NatsJetStreamSource.builder().set_servers(nats_server.url).set_stream(s)
    source = builder.set_durable_consumer("theirs").build()
    with pytest.raises(ValueError, match="already has a consumer 'theirs' that is not a tidegate"):
        source.create_reader(source.create_splits(1), 0, 1)
    assert js.run(js.js.consumer_info(s, "theirs")).config.description == "billing"


def _limited_stream(js, max_msgs: int) -> str:
    name = f"S{uuid.uuid4().hex[:8]}"
    js.run(js.js.add_stream(name=name, subjects=[f"{name}.>"], max_msgs=max_msgs))
    return name


def test_messages_removed_by_the_streams_limits_before_they_were_read_fail_the_reader(
    nats_server, js, closing, caplog
):
    s = _limited_stream(js, 5)
    _publish(js, f"{s}.a", *[str(i) for i in range(1, 11)])  # sequences 6..10 are kept
    source = _source(nats_server, s, f"{s}.a")
    checkpointed = [NatsSplit(s, f"{s}.a", last_seq=2)]
    with pytest.raises(DataLossError) as failure:
        source.create_reader(checkpointed, 0, 1)
    message = str(failure.value)
    assert f"messages 3..5 of stream {s} (subject {s}.a) were removed" in message
    assert "checkpointed position is sequence 2" in message
    assert "first message still present is sequence 6" in message
    assert "set_fail_on_data_loss(False)" in message
    accepting = (
        NatsJetStreamSource.builder()
        .set_servers(nats_server.url)
        .set_stream(s)
        .set_subjects(f"{s}.a")
        .set_fail_on_data_loss(False)
        .build()
    )
    with caplog.at_level(logging.WARNING, logger="tidegate.connectors.nats.source"):
        reader = closing(accepting.create_reader(checkpointed, 0, 1))
    assert "continuing with sequence 6" in caplog.text
    got, _ = _poll_until_quiet(reader)
    assert got == [str(i) for i in range(6, 11)]


def test_a_quiet_subjects_position_follows_the_stream_so_removed_others_are_no_loss(
    nats_server, js, closing, monkeypatch
):
    from tidegate.connectors.nats import source as nats_source

    monkeypatch.setattr(nats_source, "CONSUMER_CHECK_S", 0.0)
    s = _limited_stream(js, 5)
    _publish(js, f"{s}.quiet", "q")
    source = _source(nats_server, s, f"{s}.quiet")
    reader = closing(source.create_reader(source.create_splits(1), 0, 1))
    got, _ = _poll_until_quiet(reader)
    assert [v for _, v in got] == ["q"]
    _publish(js, f"{s}.busy", *[str(i) for i in range(10)])  # sequences 1..6 are removed
    assert _poll_until_quiet(reader, quiet_polls=5) == ([], False)
    [split] = reader.snapshot_splits()
    assert split.last_seq == 11  # the consumer's delivered stream sequence
    closing(source.create_reader([split], 0, 1))  # no DataLossError


def test_a_reader_of_a_missing_stream_names_it_and_leaves_no_client_open(nats_server, js):
    before = sum(t.name == "nats" for t in threading.enumerate())
    source = _source(nats_server, "NOSUCHSTREAM")
    with pytest.raises(LookupError, match="no stream 'NOSUCHSTREAM' on nats://"):
        source.create_reader(source.create_splits(1), 0, 1)
    time.sleep(0.1)
    assert sum(t.name == "nats" for t in threading.enumerate()) == before
