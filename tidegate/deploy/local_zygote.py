"""The local runner's zygote: one helper process per driver process that has imported tidegate's
slot code and forks a slot process per request, so a local slot (of the first attempt and of
every restart) starts in milliseconds instead of paying a Python start and tidegate's import.

It preloads (`PRELOAD`) the slot's runtime, as the Spark runner's worker daemon does
(tidegate/deploy/worker_daemon.py), and the tidegate modules its driver imported (the API the
job's pickle refers to, not the connectors' client libraries; a zygote with a thread after its
imports exits instead of forking), and is started like a fresh slot (`python -m`, the driver's
working directory and environment), so a forked slot sees the sys.path, environment and modules
a `python -m tidegate.deploy.local_slot` process would; the driver starts another zygote when
its working directory or environment changed, except for the variables a harness sets per call
that no import reads (`VOLATILE_ENVIRONMENT`: pytest's per-test variable), whose current values
each request carries to the slot it forks. The user's job script is never imported in it (so
no multiprocessing: a spawned or forkserver child re-runs `__main__`).

Protocol, over a Unix socket pair whose other end only the driver holds (inherited, nothing
listens): a request is an 8-byte length, sent with the driver's stdout and stderr (SCM_RIGHTS,
the slot's stdout and stderr), then the pickled `(request id, slot, deployment bytes, volatile
variables)`; the zygote answers `("started", id, pid)` (or `("failed", id, reason)`) and, when
a slot process ends, `("exited", pid, code)` with the code as `Popen.returncode` has it (-N:
killed by signal N). Answers are a 4-byte length and a pickle. The zygote exits when the
driver's end closes (the driver exited, or retired it); its slot processes are not its to stop,
as a `Popen` slot is not stopped when the driver dies.

The driver holds a pidfd of each slot process, so it can signal it (terminate, kill) without a
PID-reuse race; if the zygote dies, its running slot processes lose the parent that reports their
exit codes: the driver kills them and reports them as killed (the attempt fails over, as it does
when a slot is killed), and the next start uses a new zygote. A zygote that cannot be started or
does not answer leaves the slot to a fresh process (`Popen`), with a logged reason.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import pickle
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!Q")
_ANSWER = struct.Struct("!I")
#: seconds a driver waits for the zygote's answer to a start (the first one includes the
#: zygote's own start: a Python start and tidegate's import, several seconds on a loaded host)
START_TIMEOUT_S = 60.0
#: what the zygote imports before it forks: the slot's entry and runtime (what the Spark
#: runner's worker daemon preloads); then `driver_modules()`
PRELOAD = ("tidegate.deploy.slot_entry", "tidegate.runtime.slot")


#: environment variables that change between calls of one driver process and that nothing
#: reads when it is imported: not part of a zygote's key (pytest sets its variable for every
#: test, so tests of jobs on the local runner would start a zygote each), and set in each forked
#: slot to their value at its request
VOLATILE_ENVIRONMENT = ("PYTEST_CURRENT_TEST",)


#: tidegate packages the zygote leaves to the slots: they import client libraries (Kafka,
#: Arrow, database drivers ...), some of which start a thread when imported (pyarrow's
#: jemalloc), and a process with threads cannot fork safely; or they are the driver's own
#: (the CLI, the State Processor API)
NOT_PRELOADED = (
    "tidegate.connectors.",
    "tidegate.datastream.connectors.",
    "tidegate.formats.",
    "tidegate.datastream.formats.",
    "tidegate.cli.",
    "tidegate.state_processor.",
)


def driver_modules() -> list[str]:
    """The tidegate modules this (driver) process imported, in the order it imported them: the
    API the job was built with, whose operators and functions the job's pickle refers to. A
    zygote imports them once, where each slot process would import them while unpickling the
    job (1-3 s of a restart on a loaded host). Not `__main__` modules (importing one runs it),
    nor `NOT_PRELOADED` ones."""
    return [
        name
        for name in list(sys.modules)
        if name.startswith("tidegate.")
        and name.rpartition(".")[2] != "__main__"
        and not name.startswith(NOT_PRELOADED)
    ]


def _threads() -> list[str]:
    """The names of this process's threads (Linux), native ones included."""
    tasks = "/proc/self/task"
    names = []
    for task in sorted(os.listdir(tasks)):
        with open(f"{tasks}/{task}/comm") as f:
            names.append(f.read().strip())
    return names


# the zygote ---------------------------------------------------------------------------------
def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_request(sock: socket.socket) -> tuple[int, int, bytes, dict[str, str | None], list[int]]:
    """One request: (id, slot, deployment bytes, the volatile variables' values (None: unset),
    the slot's stdout and stderr fds)."""
    head, fds, _, _ = socket.recv_fds(sock, _LENGTH.size, 2)
    if not head:
        raise EOFError
    head += _read_exactly(sock, _LENGTH.size - len(head))
    request = pickle.loads(_read_exactly(sock, _LENGTH.unpack(head)[0]))
    return (*request, fds)


def serve(sock: socket.socket) -> tuple[int, bytes]:
    """The zygote's loop: returns only in a forked slot process, with its (slot, deployment
    bytes), its standard streams set up and the zygote's descriptors closed; the zygote itself
    exits when the driver's end of `sock` closes."""
    # a Ctrl-C in the driver's terminal reaches its whole process group: the zygote leaves
    # stopping to the driver, its slots get Python's default handler as a fresh slot has
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:
                pidfd = key.fd
                selector.unregister(pidfd)
                pid = children.pop(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                _answer(sock, ("exited", pid, os.waitstatus_to_exitcode(status)))
                continue
            try:
                request_id, slot, payload, volatile, fds = _read_request(sock)
            except (EOFError, OSError):
                os._exit(0)  # the driver is gone or retired this zygote
            try:
                pid = os.fork()
            except OSError as e:
                for fd in fds:
                    os.close(fd)
                _answer(sock, ("failed", request_id, f"fork failed: {e}"))
                continue
            if pid == 0:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                selector.close()
                for pidfd in children:
                    os.close(pidfd)
                sock.close()
                _standard_streams(fds)
                _set_environment(volatile)
                return slot, payload
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            selector.register(pidfd, selectors.EVENT_READ)
            _answer(sock, ("started", request_id, pid))


def _answer(sock: socket.socket, message: tuple) -> None:
    data = pickle.dumps(message)
    try:
        sock.sendall(_ANSWER.pack(len(data)) + data)
    except OSError:
        os._exit(0)  # the driver is gone


def _standard_streams(fds: list[int]) -> None:
    """A forked slot's stdin is empty (a fresh slot's held the deployment, read to its end);
    its stdout and stderr are the requesting driver's."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for target, fd in zip((1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)


def _set_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# the driver's side --------------------------------------------------------------------------
class ZygoteError(Exception):
    """The zygote could not start a slot: the caller starts a fresh process instead."""


class ForkedSlot:
    """A slot process forked by the zygote, with what LocalSlots uses of a `Popen`: its pid,
    `wait`, `poll`, `terminate` and `kill`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it ended already: its exit code is on the way
            self._pidfd = None
        self._ended = threading.Event()
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"slot process {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._pidfd is not None:
                # ProcessLookupError: it ended; its exit code is on the way
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended_with(self, code: int) -> None:
        with self._lock:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self.returncode = code
        self._ended.set()

    def _orphaned(self) -> None:
        """The zygote died: kill the process (its exit code can no longer be known), wait for
        its end and report it as killed."""
        self.kill()
        with self._lock:
            pidfd = self._pidfd
        if pidfd is not None:
            select.select([pidfd], [], [], 10.0)
        self._ended_with(-signal.SIGKILL)


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple | None = None
    #: the started slot process (its "exited" answer may be handled before the start returns)
    slot: ForkedSlot | None = None


@dataclass(frozen=True)
class ZygoteKey:
    """What a fresh slot process's start depends on: a zygote serves only requests with its
    own key."""

    executable: str
    cwd: str
    environment: tuple[tuple[str, str], ...]

    @staticmethod
    def current() -> ZygoteKey:
        environment = (kv for kv in os.environ.items() if kv[0] not in VOLATILE_ENVIRONMENT)
        return ZygoteKey(sys.executable, os.getcwd(), tuple(sorted(environment)))


class Zygote:
    """The driver's handle on one zygote process: its socket, a reader thread of its answers,
    the slot processes it started that have not ended."""

    def __init__(self, key: ZygoteKey) -> None:
        self.key = key
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.process = subprocess.Popen(
                [
                    key.executable,
                    "-m",
                    "tidegate.deploy.local_zygote",
                    str(theirs.fileno()),
                    *driver_modules(),
                ],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                cwd=key.cwd,
            )
        except BaseException:
            self.sock.close()
            raise
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._children: dict[int, ForkedSlot] = {}
        self._retired = False
        self.alive = True
        #: whether it started a slot: one that ended before is broken (e.g. its import failed)
        self.served = False
        self._reader = threading.Thread(target=self._read, daemon=True, name="tidegate-zygote")
        self._reader.start()

    def start_slot(self, deployment_bytes: bytes, slot: int) -> ForkedSlot:
        with self._lock:
            if not self.alive:
                raise ZygoteError("the zygote process has ended")
            request_id, self._next_id = self._next_id, self._next_id + 1
            pending = self._pending[request_id] = _Pending()
            volatile = {name: os.environ.get(name) for name in VOLATILE_ENVIRONMENT}
            body = pickle.dumps((request_id, slot, deployment_bytes, volatile))
            try:
                socket.send_fds(self.sock, [_LENGTH.pack(len(body))], [1, 2])
                self.sock.sendall(body)
            except OSError as e:
                del self._pending[request_id]
                raise ZygoteError(f"the zygote is unreachable: {e}") from e
        if not pending.done.wait(START_TIMEOUT_S):
            self.retire(kill=True)
            raise ZygoteError(f"the zygote did not answer within {START_TIMEOUT_S:g}s")
        answer, started = pending.answer, pending.slot
        if answer is None or started is None:
            reason = "the zygote process ended" if answer is None else answer[2]
            raise ZygoteError(reason)
        return started

    def _read(self) -> None:
        try:
            while True:
                (n,) = _ANSWER.unpack(_read_exactly(self.sock, _ANSWER.size))
                self._handle(pickle.loads(_read_exactly(self.sock, n)))
        except (EOFError, OSError):
            pass
        self._ended()

    def _handle(self, answer: tuple) -> None:
        kind, first, second = answer
        if kind == "exited":
            with self._lock:
                child = self._children.pop(first)
                close = self._retired and not self._children
            child._ended_with(second)
            if close:
                self._close()
            return
        with self._lock:
            pending = self._pending.pop(first)
            if kind == "started":
                pending.slot = self._children[second] = ForkedSlot(second)
                self.served = True
        pending.answer = answer
        pending.done.set()

    def _ended(self) -> None:
        """The zygote's socket closed: fail the waiting starts, kill the slot processes whose
        exit codes are lost with it, reap it."""
        with self._lock:
            self.alive = False
            pending, self._pending = list(self._pending.values()), {}
            orphans, self._children = list(self._children.values()), {}
            retired = self._retired
        for p in pending:
            p.done.set()
        if orphans:
            log.warning(
                "the local runner's zygote (pid %d) ended; its slot processes %s are killed",
                self.process.pid,
                [c.pid for c in orphans],
            )
        elif not retired:
            log.info("the local runner's zygote (pid %d) ended", self.process.pid)
        for child in orphans:
            child._orphaned()
        self.sock.close()
        try:
            self.process.wait(10.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def retire(self, kill: bool = False) -> None:
        """Take no more starts; the zygote exits once its slot processes ended (`kill`: now)."""
        with self._lock:
            self._retired = True
            self.alive = False
            close = kill or not self._children
        if kill and self.process.poll() is None:
            self.process.kill()
        if close:
            self._close()

    def _close(self) -> None:
        with contextlib.suppress(OSError):  # already closed by the reader
            self.sock.shutdown(socket.SHUT_RDWR)


_lock = threading.Lock()
_zygote: Zygote | None = None
#: the key of a zygote that ended before it started a slot: not tried again
_broken: ZygoteKey | None = None


def start_slot(deployment_bytes: bytes, slot: int) -> ForkedSlot | subprocess.Popen:
    """Start local slot `slot`: forked by this driver process's zygote (started, or replaced
    when it died or the working directory or environment changed), else a fresh process."""
    global _zygote, _broken
    key = ZygoteKey.current() if _supported() else None
    zygote = None
    if key is not None and key != _broken:
        with _lock:
            zygote = _zygote
            if zygote is None or not zygote.alive or zygote.key != key:
                if zygote is not None:
                    zygote.retire()
                try:
                    zygote = _zygote = Zygote(key)
                    log.info("started the local runner's zygote (pid %d)", zygote.process.pid)
                except Exception as e:
                    zygote = _zygote = None
                    _broken = key
                    log.warning("the local runner's zygote did not start (%s)", e)
    if zygote is not None:
        try:
            return zygote.start_slot(deployment_bytes, slot)
        except ZygoteError as e:
            if not zygote.served:
                _broken = key
            log.warning("the local runner's zygote did not start slot %d (%s)", slot, e)
    if key is not None:
        log.info("local slot %d is a fresh process", slot)
    return fresh_slot(deployment_bytes, slot)


@functools.cache
def _supported() -> bool:
    """Whether this platform has what the zygote needs (pidfds: Linux 5.3+; fd passing)."""
    if not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as e:
        log.info("no pidfds here (%s): local slots are fresh processes", e)
        return False
    return True


def fresh_slot(deployment_bytes: bytes, slot: int) -> subprocess.Popen:
    """Slot `slot` as a new `python -m tidegate.deploy.local_slot` process, the deployment on
    its stdin."""
    p = subprocess.Popen(
        [sys.executable, "-m", "tidegate.deploy.local_slot", str(slot)], stdin=subprocess.PIPE
    )
    assert p.stdin is not None
    p.stdin.write(deployment_bytes)
    p.stdin.close()
    return p


def _main(argv: list[str]) -> tuple[int, bytes]:
    # a module that fails to import ends the zygote before it served a slot: the driver then
    # starts its slots as fresh processes, which report the error themselves
    for name in (*PRELOAD, *argv[2:]):
        importlib.import_module(name)
    threads = _threads()
    if len(threads) > 1:  # forking now could copy a lock another thread holds
        sys.exit(f"a module imported by the zygote started threads {threads}: cannot fork")
    slot, payload = serve(socket.socket(fileno=int(argv[1])))
    sys.argv = [sys.argv[0], str(slot)]
    return slot, payload


if __name__ == "__main__":
    _slot, _payload = _main(sys.argv)
    from tidegate.deploy import slot_entry

    slot_entry.run(_payload, _slot)
