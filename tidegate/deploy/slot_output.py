"""The driver's end of the slots' output (runtime/output.py sends it): whole lines of each
writing thread to the driver's stdout or stderr, log records into the driver's logging.

`LineAssembler` decides (pure): fragments in, complete lines out, per writer. `SlotOutputPrinter`
writes what it returns. The control server's reader threads call it, one per slot connection,
so a slot's text is handled in the order it was written, before the slot's later messages
(its `SlotFinished` comes after all of its output).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Hashable

from tidegate.runtime.messages import SlotLog, SlotOutput


class LineAssembler:
    """Joins each writer's fragments into lines; a writer's unterminated text waits for the
    rest of its line, or for `close`."""

    def __init__(self) -> None:
        self._partial: dict[Hashable, str] = {}

    def feed(self, writer: Hashable, text: str) -> str:
        """The complete lines `text` finishes for `writer` (each ending in a newline; '' if
        none)."""
        head, newline, rest = text.rpartition("\n")
        if not newline:
            self._partial[writer] = self._partial.get(writer, "") + text
            return ""
        lines = self._partial.pop(writer, "") + head + "\n"
        if rest:
            self._partial[writer] = rest
        return lines

    def close(self, belongs: Callable[[Hashable], bool]) -> list[tuple[Hashable, str]]:
        """End the writers `belongs(writer)` selects (their slot is gone): their unterminated
        text as lines, so nothing written is lost."""
        ended = [w for w in self._partial if belongs(w)]
        return [(w, self._partial.pop(w) + "\n") for w in ended]


class SlotOutputPrinter:
    """Prints the slots' output on the driver (sys.stdout / sys.stderr looked up per write, so
    redirections and captures apply) and re-emits their log records. Thread-safe."""

    def __init__(self) -> None:
        self._lines = LineAssembler()
        self._lock = threading.Lock()

    def handle(self, message: object) -> bool:
        """Print or log `message` if it is slot output; False for any other message."""
        match message:
            case SlotOutput(attempt=attempt, slot=slot, stream=stream, writer=writer, text=text):
                with self._lock:
                    lines = self._lines.feed((attempt, slot, stream, writer), text)
                    if lines:
                        _write(stream, lines)
                return True
            case SlotLog():
                _log(message)
                return True
        return False

    def slot_ended(self, attempt: int, slot: int) -> None:
        """The slot's connection closed: print what its threads left unterminated."""
        with self._lock:
            for (_a, _s, stream, _w), line in self._lines.close(
                lambda w: w[0] == attempt and w[1] == slot
            ):
                _write(stream, line)


def _write(stream: str, text: str) -> None:
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(text)
    out.flush()


def _log(message: SlotLog) -> None:
    logger = logging.getLogger(message.logger)
    if not logger.isEnabledFor(message.level):
        return
    record = logger.makeRecord(
        message.logger,
        message.level,
        fn="",
        lno=0,
        msg="[%s] %s",
        args=(message.subtask, message.message),
        exc_info=None,
        extra={"subtask": message.subtask, "slot": message.slot},
    )
    record.exc_text = message.exc_text
    logger.handle(record)
