"""Redis Streams and NATS JetStream connectors against the bare client library's loop doing
the same work on the same server (a private server each, started as the tests start them).

    .venv/bin/python bench/connectors.py [--n 100000] [--repeats 3]

* source: N entries/messages read to the end by the connector's reader (`poll_batch(512)`
  until the bounded splits end) vs a bare loop: redis-py `XREAD COUNT 512` from the last id /
  a nats-py pull consumer fetching 512 at a time; both decode each entry to a dict / str.
* sink: N records through the connector's writer, one checkpoint's `prepare_commit` and the
  committer (Redis: one MULTI/EXEC with the marker; NATS: publishes with message ids, all
  acknowledged) vs a bare loop: one redis-py MULTI/EXEC pipeline of N XADDs / nats-py
  `publish_async` of N messages and waiting for their acks.

One process, one core: this is the connector's overhead over the client, not a job's
throughput. Prints a table and writes JSON (default bench/results/connectors.json).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import interleaved, print_ratios, report_header, write_report
from tests.support.servers import start_nats, start_redis
from tidegate.connectors.nats.connection import NatsClient, NatsConnection
from tidegate.connectors.nats.sink import NatsJetStreamSink
from tidegate.connectors.nats.source import NatsJetStreamSource
from tidegate.connectors.redis.sink import RedisStreamSink
from tidegate.connectors.redis.source import RedisStreamSource

BATCH = 512


def drain(reader) -> int:
    n = 0
    while (batch := reader.poll_batch(BATCH)) is not None:
        n += len(batch)
    reader.close()
    return n


# Redis ----------------------------------------------------------------------------------------
def redis_fill(client, n: int) -> str:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    for low in range(0, n, 10_000):
        with client.pipeline(transaction=False) as pipe:
            for i in range(low, min(n, low + 10_000)):
                pipe.xadd(stream, {"v": i})
            pipe.execute()
    return stream


def redis_bare_read(client, stream: str) -> int:
    last, n = "0-0", 0
    while True:
        reply = client.xread({stream: last}, count=BATCH)
        if not reply:
            return n
        for entry_id, fields in reply[0][1]:
            last = entry_id
            {k.decode(): v.decode() for k, v in fields.items()}
            n += 1


def redis_source_read(url: str, stream: str) -> int:
    source = RedisStreamSource.builder().set_url(url).set_streams(stream).set_bounded().build()
    return drain(source.create_reader(source.create_splits(1), 0, 1))


def redis_bare_write(client, n: int) -> int:
    stream = f"bench-out-{uuid.uuid4().hex[:8]}"
    with client.pipeline(transaction=True) as pipe:
        for i in range(n):
            pipe.xadd(stream, {"value": str(i)})
        pipe.execute()
    return n


def redis_sink_write(url: str, n: int) -> int:
    stream = f"bench-out-{uuid.uuid4().hex[:8]}"
    sink = RedisStreamSink.builder().set_url(url).set_stream(stream).build().for_job("bench")
    writer = sink.create_writer(0, 1, 0)
    for low in range(0, n, BATCH):
        writer.write_batch(list(range(low, min(n, low + BATCH))))
    committer = sink.create_committer()
    committer.commit(writer.prepare_commit(1))
    committer.close()
    return n


# NATS -----------------------------------------------------------------------------------------
def nats_stream(client: NatsClient) -> str:
    name = f"B{uuid.uuid4().hex[:8]}"
    client.run(client.js.add_stream(name=name, subjects=[f"{name}.>"]))
    return name


def nats_fill(client: NatsClient, n: int) -> str:
    stream = nats_stream(client)

    async def fill() -> None:
        for i in range(n):
            await client.js.publish_async(f"{stream}.in", str(i).encode())
        await client.js.publish_async_completed()

    client.run(fill(), 600)
    return stream


def nats_bare_read(client: NatsClient, stream: str, n: int) -> int:
    from nats.js.api import AckPolicy, ConsumerConfig

    async def read() -> int:
        sub = await client.js.pull_subscribe(
            "", stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
        )
        got = 0
        while got < n:
            for msg in await sub.fetch(BATCH, timeout=5):
                msg.data.decode()
                got += 1
        await sub.unsubscribe()
        return got

    return client.run(read(), 600)


def nats_source_read(url: str, stream: str) -> int:
    source = NatsJetStreamSource.builder().set_servers(url).set_stream(stream).set_bounded().build()
    return drain(source.create_reader(source.create_splits(1), 0, 1))


def nats_bare_write(client: NatsClient, n: int) -> int:
    stream = nats_stream(client)

    async def publish() -> int:
        futures = [
            await client.js.publish_async(f"{stream}.out", str(i).encode()) for i in range(n)
        ]
        await asyncio.gather(*futures)
        return n

    return client.run(publish(), 600)


def nats_sink_write(client: NatsClient, url: str, n: int) -> int:
    stream = nats_stream(client)
    sink = (
        NatsJetStreamSink.builder()
        .set_servers(url)
        .set_stream(stream)
        .set_subject(f"{stream}.out")
        .build()
        .for_job("bench")
    )
    writer = sink.create_writer(0, 1, 0)
    for low in range(0, n, BATCH):
        writer.write_batch(list(range(low, min(n, low + BATCH))))
    committer = sink.create_committer()
    committer.commit(writer.prepare_commit(1))
    committer.close()
    return n


def main() -> None:
    import redis

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--out", default=os.path.join(here, "results", "connectors.json"))
    args = p.parse_args()
    n = args.n
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "r").mkdir()
        (Path(tmp) / "n").mkdir()
        redis_server = start_redis(Path(tmp) / "r")
        nats_server = start_nats(Path(tmp) / "n")
        try:
            client = redis.Redis.from_url(redis_server.url)
            nats = NatsClient(NatsConnection(nats_server.url))
            rstream = redis_fill(client, n)
            nstream = nats_fill(nats, n)
            cases: dict[str, tuple[Callable[[], int], Callable[[], int]]] = {
                "redis source": (
                    lambda: redis_bare_read(client, rstream),
                    lambda: redis_source_read(redis_server.url, rstream),
                ),
                "redis sink": (
                    lambda: redis_bare_write(client, n),
                    lambda: redis_sink_write(redis_server.url, n),
                ),
                "nats source": (
                    lambda: nats_bare_read(nats, nstream, n),
                    lambda: nats_source_read(nats_server.url, nstream),
                ),
                "nats sink": (
                    lambda: nats_bare_write(nats, n),
                    lambda: nats_sink_write(nats, nats_server.url, n),
                ),
            }
            results = {
                name: interleaved({"bare": bare, "connector": connector}, args.repeats)
                for name, (bare, connector) in cases.items()
            }
            nats.close()
            client.close()
        finally:
            redis_server.stop()
            nats_server.stop()
    print_ratios("records/s (median)", results, "bare", "connector")
    write_report(args.out, {**report_header(args), "results": results})


if __name__ == "__main__":
    main()
