"""What `tidegate run` shows on stderr while jobs run: the live status line of each submitted
job (polled by a daemon thread), the summary line when it ends, and tidegate's log records."""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from tidegate import rest
from tidegate.cli.errors import ENVIRONMENT_ERRORS, full_traceback
from tidegate.cli.formatting import duration, human_size
from tidegate.common.job_client import JobClient


def format_status(jm: Any, elapsed_s: float, now_ms: int) -> str:
    """The live status line of a running job (JobMaster `jm`)."""
    stats = jm.stats
    parts = [
        f"{jm.status.name} {duration(elapsed_s)}",
        f"{stats.records_per_s:,.0f} rec/s",
        *_counters(stats),
    ]
    cp = stats.last_checkpoint
    if cp is not None:
        age = max(now_ms - cp.completed_ms, 0) / 1000
        parts.append(
            f"last #{cp.checkpoint_id} {cp.duration_ms} ms {human_size(cp.size_bytes)} "
            f"{age:.0f}s ago"
        )
    return " | ".join(parts)


def format_summary(jm: Any, elapsed_s: float) -> str:
    """The line printed when a job has ended."""
    stats = jm.stats
    head = f"{jm.status.name}: job {jm.spec.job_name!r} ({jm.job_id}) after {duration(elapsed_s)}"
    line = " | ".join([head, *_counters(stats)])
    cp = stats.last_checkpoint
    if cp is not None:
        line += f" | last #{cp.checkpoint_id} ({cp.duration_ms} ms, {human_size(cp.size_bytes)})"
    return line


def _counters(stats: Any) -> list[str]:
    """The record, restart and checkpoint counts of a JobMaster's `stats`."""
    return [
        f"read {stats.records_read:,}",
        f"in {stats.records_in:,}",
        f"restarts {stats.restarts}",
        f"checkpoints {stats.completed_checkpoints} done, {stats.failed_checkpoints} failed",
    ]


class StatusPrinter:
    """Writes status lines to `stream`: rewritten in place (`\\r`) on a terminal, else one per
    line. Thread-safe; `line` prints a permanent line (clearing a pending status line first)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._dirty = False

    def status(self, text: str) -> None:
        with self._lock:
            if self.tty:
                width = shutil.get_terminal_size().columns - 1
                self.stream.write(f"\r{text[:width]}\x1b[K")
                self._dirty = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def line(self, text: str) -> None:
        with self._lock:
            if self._dirty:
                self.stream.write("\r\x1b[K")
                self._dirty = False
            self.stream.write(text + "\n")
            self.stream.flush()


@dataclass
class _Watched:
    client: JobClient
    started: float
    ended: float | None = None
    thread: threading.Thread | None = None

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class JobMonitor:
    """The `on_submit` hook: one daemon thread per submitted job prints its status every
    `interval` seconds (0: never) until the job ends; `summarize` prints the final lines."""

    def __init__(self, printer: StatusPrinter, interval: float) -> None:
        self.printer = printer
        self.interval = interval
        self.jobs: list[_Watched] = []

    def __call__(self, client: JobClient) -> None:
        watched = _Watched(client, time.monotonic())
        self.jobs.append(watched)
        spec = client.jobmaster.spec
        server = rest.running_server()
        self.printer.line(
            f"submitted job {spec.job_name!r} ({client.get_job_id()}): runner {spec.runner}, "
            f"parallelism {max(v.parallelism for v in spec.graph.vertices.values())}"
            + ("" if server is None else f", dashboard {server.dashboard_url}")
        )
        watched.thread = threading.Thread(
            target=self._watch, args=(watched,), name="tidegate-cli-status", daemon=True
        )
        watched.thread.start()

    def _watch(self, watched: _Watched) -> None:
        jm = watched.client.jobmaster
        while not jm.done.wait(self.interval or None):
            self.printer.status(format_status(jm, watched.elapsed(), int(time.time() * 1000)))
        watched.ended = time.monotonic()

    def running(self) -> list[JobClient]:
        return [w.client for w in self.jobs if not w.client.jobmaster.done.is_set()]

    def cancel_all(self, timeout_s: float = 15.0) -> None:
        clients = self.running()
        for client in clients:
            self.printer.line(f"cancelling job {client.get_job_id()} ...")
            client.cancel()
        deadline = time.monotonic() + timeout_s
        for client in clients:
            client.jobmaster.done.wait(max(deadline - time.monotonic(), 0))

    def summarize(self) -> None:
        for watched in self.jobs:
            jm = watched.client.jobmaster
            if jm.done.is_set():
                if watched.thread is not None:
                    watched.thread.join(1.0)  # its last status line comes before the summary
                watched.ended = watched.ended or time.monotonic()
                self.printer.line(format_summary(jm, watched.elapsed()))

    def failure_of(self, job_id: str) -> str | None:
        """The JobMaster's error (`<type>: <message>` for crashes) of a submitted job."""
        for watched in self.jobs:
            jm = watched.client.jobmaster
            if jm.job_id == job_id and jm.error is not None:
                return str(jm.error)
        return None


class _LogHandler(logging.Handler):
    """Shows tidegate's log records as `tidegate: <level>: ...` lines, unless the job script
    configured logging itself (then its handlers print them). Crashes caused by the
    environment are left to the final error line, unless verbose."""

    def __init__(self, printer: StatusPrinter, verbose: bool) -> None:
        super().__init__()
        self.printer = printer
        self.verbose = verbose

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        text = f"tidegate: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if type(exc).__name__ in ENVIRONMENT_ERRORS and not self.verbose:
                return
            text += ": " + (
                "\n" + full_traceback(exc) if self.verbose else f"{type(exc).__name__}: {exc}"
            )
        self.printer.line(text.rstrip("\n"))


@contextlib.contextmanager
def cli_logging(printer: StatusPrinter, verbose: bool) -> Iterator[None]:
    """Route the `tidegate` logger's records through `printer` (INFO and up if verbose)."""
    logger = logging.getLogger("tidegate")
    handler = _LogHandler(printer, verbose)
    old_level = logger.level
    logger.addHandler(handler)
    if verbose:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
