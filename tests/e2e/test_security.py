"""Hostile peers against a running job on Spark (docs/security.md): every socket the job
listens on is on loopback (a local master), and each of its own sockets (the driver's control
server, every slot's data listener, the REST server) is tried with no secret, a wrong secret
and garbage (random bytes, a truncated frame, huge length prefixes, a pickle whose unpickling
would create a marker file): each connection is closed having received nothing but the
challenge, nothing is unpickled, a silent connection is cut off at the handshake deadline,
and the job runs on without a restart and commits exactly the reference output."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import struct
import time
from urllib.parse import urlsplit

import pytest

from tests.e2e.jobs import count_job
from tests.e2e.observed import http, rest_url
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.sockets import (
    Marker,
    descendants,
    framed,
    listening_sockets,
    sent_until_closed,
)
from tests.support.waiting import resolved, wait_for_checkpoints
from tidegate.runtime.auth import (
    HANDSHAKE_TIMEOUT_S,
    AuthenticationFailedError,
    authenticate_client,
)
from tidegate.runtime.connect import connect

N = 45_000
RATE = 3_000  # 15 s of input: the job outlives the handshake deadline of the silent peers
#: all a peer without the secret ever receives: the server's 32-byte challenge, one frame
CHALLENGE_BYTES = 4 + 32

GARBAGE = {
    "a pickle instead of a proof": lambda marker: framed(pickle.dumps(Marker(marker))),
    "an unframed pickle": lambda marker: pickle.dumps(Marker(marker)),
    "random bytes": lambda _marker: os.urandom(4096),
    "a truncated frame": lambda _marker: framed(os.urandom(64))[:20],
    "a huge length prefix": lambda _marker: struct.pack("!i", 0x7FFFFFFF) + os.urandom(64),
    "a huge 8-byte length": lambda _marker: struct.pack("!iQ", -1, 1 << 62) + os.urandom(64),
    "a proof of random bytes": lambda _marker: framed(os.urandom(64)),
}


def refuses_a_wrong_secret(address: tuple[str, int], marker) -> None:
    conn = connect(address, "peer", timeout=5)
    try:
        with pytest.raises(AuthenticationFailedError):
            authenticate_client(conn, b"not the job secret")
        # whatever might still get through (OSError: closed by the server, nothing does)
        with contextlib.suppress(OSError):
            conn.send(Marker(marker))
    finally:
        conn.close()


def test_a_running_job_refuses_hostile_peers_on_every_socket_and_stays_exactly_once(
    spark, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="tidegate.deploy.control_server")
    marker = tmp_path / "unpickled"
    client = count_job(tmp_path / "out", tmp_path / "chk", runner="spark", n=N, rate=RATE)
    client = client.execute_async("hostile peers")
    wait_for_checkpoints(client, 1)
    jm = client.jobmaster
    attempt = jm.attempt

    # everything the job listens on, in the driver, Spark's JVM and its Python workers
    jvm = spark.sparkContext._gateway.proc.pid
    listening = listening_sockets(descendants(jvm) | {os.getpid()})
    assert [s for s in listening if not s.is_loopback] == []
    ours = {"control server": jm.server.address}
    ours |= {f"slot {slot} data listener": a for slot, a in sorted(jm.slot_addresses.items())}
    assert {a[1] for a in ours.values()} <= {s.port for s in listening}

    silent = [socket.create_connection(a, timeout=5) for a in ours.values()]
    silent_since = time.monotonic()
    for name, address in ours.items():
        for what, garbage in GARBAGE.items():
            received = sent_until_closed(address, garbage(marker))
            assert len(received) <= CHALLENGE_BYTES, f"{name} answered {what}: {received!r}"
        refuses_a_wrong_secret(address, marker)

    rest = urlsplit(rest_url())
    rest_address = (rest.hostname, rest.port)
    assert sent_until_closed(rest_address, os.urandom(4096)).startswith((b"", b"HTTP/1.1 4"))
    job_path = f"{rest_url()}/jobs/{client.get_job_id()}"
    pickled = pickle.dumps(Marker(marker))
    status, body, _ = http(f"{job_path}/checkpoints", "POST", pickled)
    assert status == 400 and "not JSON" in body["errors"][0]
    huge = b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n"
    assert sent_until_closed(rest_address, huge).startswith(b"HTTP/1.1 413")
    assert http(job_path)[1]["state"] == "RUNNING"

    # a silent peer holds its connection until the handshake deadline, then it is closed
    for sock in silent:
        sock.settimeout(HANDSHAKE_TIMEOUT_S + 10)
        assert len(sock.recv(100)) == CHALLENGE_BYTES
        assert sock.recv(100) == b""
        sock.close()
    assert time.monotonic() - silent_since >= HANDSHAKE_TIMEOUT_S - 1

    assert not marker.exists()
    resolved(client.get_job_execution_result(), "the job to finish", timeout=120)
    assert (jm.status.name, jm.attempt, jm.stats.restarts) == ("FINISHED", attempt, 0)
    check_exactly_once(committed_lines(tmp_path / "out"), N, 2)
    assert not marker.exists()
    refused = [r for r in caplog.records if "refused a control connection" in r.getMessage()]
    assert len(refused) == len(GARBAGE) + 2  # the garbage, the wrong secret, the silent peer
