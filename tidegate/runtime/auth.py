"""Mutual challenge-response authentication for every connection (frames carry pickled objects,
so an unauthenticated peer must never get a frame read or written).

Each side proves it knows the job secret by returning HMAC-SHA256(secret, nonce) for a fresh
random nonce of the other side; nothing else is read before both proofs check out. The
handshake runs on the connection's own thread, so a slow or hostile client cannot stall the
accept loop, and every read in it is bounded by a timeout.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from multiprocessing.connection import Connection

HANDSHAKE_TIMEOUT_S = 10.0
_NONCE_BYTES = 32
_MAGIC = b"tidegate-auth-v1"


class AuthenticationFailedError(ConnectionError):
    pass


def _proof(secret: bytes, nonce: bytes, role: bytes) -> bytes:
    return hmac.new(secret, _MAGIC + role + nonce, hashlib.sha256).digest()


def _recv(conn: Connection, what: str) -> bytes:
    if not conn.poll(HANDSHAKE_TIMEOUT_S):
        raise AuthenticationFailedError(f"peer sent no {what} within {HANDSHAKE_TIMEOUT_S}s")
    data = conn.recv_bytes(maxlength=256)
    return data


def authenticate_server(conn: Connection, secret: bytes) -> None:
    """Step 1 (server): challenge the client, check its proof, then answer its challenge."""
    nonce = os.urandom(_NONCE_BYTES)
    conn.send_bytes(nonce)
    try:
        proof, client_nonce = _split(_recv(conn, "proof"))
    except OSError as e:
        raise AuthenticationFailedError(f"handshake failed: {e}") from e
    if not hmac.compare_digest(proof, _proof(secret, nonce, b"client")):
        raise AuthenticationFailedError("peer does not know the job secret")
    conn.send_bytes(_proof(secret, client_nonce, b"server"))


def authenticate_client(conn: Connection, secret: bytes) -> None:
    """Step 2 (client): prove itself, then check the server's proof."""
    nonce = _recv(conn, "challenge")
    my_nonce = os.urandom(_NONCE_BYTES)
    conn.send_bytes(_proof(secret, nonce, b"client") + my_nonce)
    answer = _recv(conn, "answer")
    if not hmac.compare_digest(answer, _proof(secret, my_nonce, b"server")):
        raise AuthenticationFailedError("server does not know the job secret")


def _split(data: bytes) -> tuple[bytes, bytes]:
    if len(data) != hashlib.sha256().digest_size + _NONCE_BYTES:
        raise AuthenticationFailedError("malformed authentication message")
    return data[:32], data[32:]
