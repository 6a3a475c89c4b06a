"""Private message servers for the tests: a redis-server and a nats-server with JetStream
(both from apt, installed by scripts/setup.sh), each on a free loopback port with its data in
a temporary directory, started once per test session when a test first asks for it, waited
for until it answers, and stopped by PID at the end."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import free_port

START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        scheme = "redis" if self.name == "redis-server" else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_by_pid(self.process, STOP_GRACE_S)


def stop_by_pid(process: subprocess.Popen | None, grace_s: float) -> None:
    """Stop a test server by its PID: SIGTERM, SIGKILL after `grace_s` (nothing of a test
    server needs a clean shutdown)."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def log_tail(log: Path | None, lines: int = 30) -> str:
    """The last `lines` lines of a server's log, for an error message."""
    if log is None:
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if path is None:
        raise FileNotFoundError(
            f"{name} is missing: run `bash scripts/setup.sh test` (or apt-get install {name})"
        )
    return path


def _start(name: str, args: list[str], work_dir: Path, port: int, answers) -> Server:
    log = work_dir / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [_binary(name), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work_dir,
        )
    server = Server(name, process, port, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(port):
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(
                f"{name} did not answer on port {port} within {START_TIMEOUT_S:g} s:\n"
                f"{log.read_text()[-2000:]}"
            )
        time.sleep(0.05)
    return server


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _nats_answers(port: int) -> bool:
    """The server greets with INFO; JetStream is ready once its monitoring says so, which a
    PING/PONG after the greeting approximates (JetStream answers requests right after)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if not s.recv(4096).startswith(b"INFO"):
                return False
            s.sendall(b"CONNECT {}\r\nPING\r\n")
            return b"PONG" in s.recv(4096)
    except OSError:
        return False


def start_redis(work_dir: Path) -> Server:
    """redis-server on a free loopback port, no persistence, data in `work_dir`."""
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(work_dir)]
    args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
    return _start("redis-server", args, work_dir, port, _redis_answers)


def start_nats(work_dir: Path) -> Server:
    """nats-server with JetStream on a free loopback port, its store in `work_dir`."""
    port = free_port()
    store = work_dir / "jetstream"
    store.mkdir()
    args = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)]
    return _start("nats-server", args, work_dir, port, _nats_answers)
