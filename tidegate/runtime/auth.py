"""Mutual challenge-response authentication for every connection (frames carry pickled objects,
so an unauthenticated peer must never get a frame read or written).

Each side proves it knows the job secret by returning HMAC-SHA256(secret, nonce) for a fresh
random nonce of the other side; nothing else is read before both proofs check out, and what
is read until then are raw bytes, never unpickled. The proofs of the two roles differ, so a
proof cannot be reflected back to the side that asked for it. The handshake runs on the
connection's own thread, so a slow or hostile client cannot stall the accept loop, and the
whole of it is bounded by a deadline: a peer that sends nothing, a truncated message, or a
message one byte at a time has its connection shut down when the deadline passes. A message
longer than the handshake's (a huge length prefix) is refused from its prefix, unread.

Not protected (docs/security.md): the traffic after the handshake is neither encrypted nor
signed, so an attacker on the network path who can read or inject TCP segments could read
records or take over an authenticated connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection

#: the most a handshake may take, from the connection's start to its last proof (seconds)
HANDSHAKE_TIMEOUT_S = 10.0
_NONCE_BYTES = 32
_PROOF_BYTES = hashlib.sha256().digest_size
_MAGIC = b"tidegate-auth-v1"
_CLIENT, _SERVER = b"client", b"server"


class AuthenticationFailedError(ConnectionError):
    pass


def proof(secret: bytes, nonce: bytes, role: bytes) -> bytes:
    """What the side of `role` (b"client" or b"server") answers to the other's `nonce`."""
    return hmac.new(secret, _MAGIC + role + nonce, hashlib.sha256).digest()


def authenticate_server(
    conn: Connection, secret: bytes, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> None:
    """The accepting side: challenge the client, check its proof, then answer its challenge.
    Raises AuthenticationFailedError (the caller closes `conn`)."""
    with _deadline(conn, timeout_s, "the client"):
        nonce = os.urandom(_NONCE_BYTES)
        conn.send_bytes(nonce)
        answer = _recv(conn, _PROOF_BYTES + _NONCE_BYTES, "proof")
        client_proof, client_nonce = answer[:_PROOF_BYTES], answer[_PROOF_BYTES:]
        if not hmac.compare_digest(client_proof, proof(secret, nonce, _CLIENT)):
            raise AuthenticationFailedError("peer does not know the job secret")
        conn.send_bytes(proof(secret, client_nonce, _SERVER))


def authenticate_client(
    conn: Connection, secret: bytes, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> None:
    """The dialling side: prove itself, then check the server's proof. Raises
    AuthenticationFailedError (the caller closes `conn`)."""
    with _deadline(conn, timeout_s, "the server"):
        nonce = _recv(conn, _NONCE_BYTES, "challenge")
        my_nonce = os.urandom(_NONCE_BYTES)
        conn.send_bytes(proof(secret, nonce, _CLIENT) + my_nonce)
        answer = _recv(conn, _PROOF_BYTES, "answer")
        if not hmac.compare_digest(answer, proof(secret, my_nonce, _SERVER)):
            raise AuthenticationFailedError("server does not know the job secret")


def _recv(conn: Connection, size: int, what: str) -> bytes:
    """One handshake message of exactly `size` bytes; a longer length prefix is refused
    before anything behind it is read."""
    data = conn.recv_bytes(maxlength=size)
    if len(data) != size:
        raise AuthenticationFailedError(f"malformed {what}: {len(data)} bytes instead of {size}")
    return data


@contextlib.contextmanager
def _deadline(conn: Connection, timeout_s: float, peer: str) -> Iterator[None]:
    """Shut `conn` down if the block has not finished within `timeout_s` (a blocked read then
    ends at once); every failure inside becomes an AuthenticationFailedError."""
    expired = threading.Event()
    lock = threading.Lock()  # a handshake that just finished is not shut down after all
    finished = False

    def expire() -> None:
        with lock:
            if finished:
                return
            expired.set()
            # OSError: already closed
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as s:
                s.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    failure: BaseException | None = None
    try:
        yield
    except (OSError, EOFError) as e:
        failure = e
    finally:
        timer.cancel()
    with lock:
        finished = True
    if expired.is_set():
        raise AuthenticationFailedError(
            f"{peer} did not complete the handshake within {timeout_s:g} s"
        )
    if isinstance(failure, AuthenticationFailedError):
        raise failure
    if isinstance(failure, EOFError):  # its text is empty
        raise AuthenticationFailedError(f"{peer} closed the connection during the handshake")
    if failure is not None:
        reason = str(failure) or type(failure).__name__
        raise AuthenticationFailedError(f"the handshake with {peer} failed: {reason}")
