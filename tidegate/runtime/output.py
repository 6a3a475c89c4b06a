"""A slot's output reaches the driver (DESIGN: output where the user looks).

A Python worker's own stdout is not the user's terminal: Spark sends it to the executor's log
(on a local master, the driver's stderr), and a local-runner slot is a child process. So while
a slot runs, `sys.stdout` and `sys.stderr` are `ForwardingStream`s that send each thread's
text to the driver over the control connection, line by line (and at `flush()`), tagged with
the writing thread; the driver assembles each thread's fragments into whole lines
(deploy/slot_output.py), so lines of concurrent subtasks never mix, a subtask's lines keep
their order, and text flushed before a worker dies is not lost. `print()` in user functions
and the print sink write to `sys.stdout`, looked up when they write, so both are forwarded.

`logging` records of the slot process at or above the driver's log level go the same way, as
`SlotLog` messages naming the subtask (its thread's name), and the driver re-emits them
through its own logging configuration.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tidegate.runtime.control import ControlClient
from tidegate.runtime.messages import SlotLog, SlotOutput


class ForwardingStream(io.TextIOBase):
    """A text stream whose writes go to the driver, line-buffered per thread (as on a
    terminal): a thread's text is sent when it ends a line, on `flush()` (`print(...,
    flush=True)`), and when the slot ends. Without the control connection it goes to
    `fallback` (the worker's own stream), so nothing written is dropped."""

    def __init__(
        self, control: ControlClient, attempt: int, slot: int, name: str, fallback: Any
    ) -> None:
        super().__init__()
        self._control, self._attempt, self._slot = control, attempt, slot
        self._name, self._fallback = name, fallback
        #: thread ident -> its text since its last newline
        self._pending: dict[int, str] = {}
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        writer = threading.get_ident()
        with self._lock:
            pending = self._pending.pop(writer, "") + text
            if "\n" not in pending:
                self._pending[writer] = pending
                return len(text)
        self._send(writer, pending)
        return len(text)

    def flush(self) -> None:
        """Send the calling thread's unterminated text."""
        writer = threading.get_ident()
        with self._lock:
            pending = self._pending.pop(writer, "")
        self._send(writer, pending)

    def flush_all(self) -> None:
        """Send every thread's unterminated text (the slot ends)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for writer, text in pending.items():
            self._send(writer, text)

    def _send(self, writer: int, text: str) -> None:
        if not text:
            return
        if not self._control.send(SlotOutput(self._attempt, self._slot, self._name, writer, text)):
            self._fallback.write(text)
            self._fallback.flush()


class ForwardingLogHandler(logging.Handler):
    """Sends the slot's log records to the driver, formatted here (their arguments may not
    pickle), with the name of the thread that logged (the subtask)."""

    def __init__(self, control: ControlClient, attempt: int, slot: int) -> None:
        super().__init__()
        self._control, self._attempt, self._slot = control, attempt, slot
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = None
            if record.exc_info:
                exc_text = self._formatter.formatException(record.exc_info)
            message = SlotLog(
                self._attempt,
                self._slot,
                record.threadName or "",
                record.name,
                record.levelno,
                record.getMessage(),
                exc_text,
            )
        except Exception:
            self.handleError(record)
            return
        self._control.send(message)


@contextlib.contextmanager
def forward_output(
    control: ControlClient, attempt: int, slot: int, log_level: int
) -> Iterator[None]:
    """While the block runs, this process's stdout, stderr and log records go to the driver;
    afterwards everything is as before (a Spark Python worker is reused for other tasks)."""
    saved_out, saved_err = sys.stdout, sys.stderr
    root = logging.getLogger()
    saved_level = root.level
    handler = ForwardingLogHandler(control, attempt, slot)
    streams = [
        ForwardingStream(control, attempt, slot, "stdout", saved_out),
        ForwardingStream(control, attempt, slot, "stderr", saved_err),
    ]
    sys.stdout, sys.stderr = streams
    root.addHandler(handler)
    root.setLevel(log_level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
        sys.stdout, sys.stderr = saved_out, saved_err
        for stream in streams:
            stream.flush_all()
