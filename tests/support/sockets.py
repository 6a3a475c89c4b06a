"""The TCP sockets processes listen on, read from /proc (Linux): which process listens where,
so a test can check that a job opens nothing beyond loopback; and hostile peers for them."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True)
class ListeningSocket:
    pid: int
    host: str
    port: int

    @property
    def is_loopback(self) -> bool:
        address = ipaddress.ip_address(self.host)
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (a Java listener)
        return (mapped or address).is_loopback


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        todo.extend(children.get(p, []))
    return found


def listening_sockets(pids: set[int]) -> list[ListeningSocket]:
    """The TCP sockets (IPv4 and IPv6) the processes `pids` listen on."""
    owners: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owners[target[8:-1]] = pid
        except OSError:  # ended meanwhile, or a file descriptor closed while listed
            continue
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != _LISTEN or inode not in owners:
                continue
            hex_host, hex_port = local.split(":")
            raw = bytes.fromhex(hex_host)
            # the kernel writes each 32-bit word of the address in host (little-endian) order
            words = struct.unpack(f"<{len(raw) // 4}I", raw)
            host = socket.inet_ntop(family, struct.pack(f">{len(words)}I", *words))
            found.append(ListeningSocket(owners[inode], host, int(hex_port, 16)))
    return found


# hostile peers ------------------------------------------------------------------------------
class Marker:
    """Unpickling this creates the file `path`: the proof that a peer unpickled it."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def framed(payload: bytes) -> bytes:
    """`payload` as one frame of multiprocessing's Connection (a 4-byte big-endian length)."""
    return struct.pack("!i", len(payload)) + payload


def sent_until_closed(address: tuple[str, int], data: bytes, timeout: float = 10.0) -> bytes:
    """Connect to `address`, send `data`, close our sending side if `data` is not empty, and
    read until the server closes the connection: what it sent. Fails if it is still open after
    `timeout` seconds."""
    with socket.create_connection(address, timeout=timeout) as sock:
        received = b""
        try:
            sock.sendall(data)
            if data:
                with contextlib.suppress(OSError):  # not connected: the server closed already
                    sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:  # closed with our bytes unread: a reset, not a FIN
            pass
        except TimeoutError:
            raise AssertionError(
                f"{address} still open {timeout:g} s after a hostile peer sent {data[:40]!r}"
            ) from None
        return received
