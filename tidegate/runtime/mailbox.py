"""Work handed to a subtask's thread from other threads (Flink's mailbox): an operator whose
results arrive on a thread of its own (runtime/async_io.py) posts a `Mail` to the task's input
gate as a control item; the task's loop, which wakes for control items at once (no polling),
runs its action between two batches, on the task's thread, where operators may emit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Mail", "TaskMailbox"]


@dataclass(frozen=True, slots=True)
class Mail:
    """Control item: run `action` on the task's thread."""

    action: Callable[[], None]


class TaskMailbox:
    """What an operator sees of its task's input gate: posting mail, and whether the task is
    being cancelled (the gate closed)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: Any) -> None:
        self._gate = gate

    def post(self, action: Callable[[], None]) -> None:
        self._gate.put_control(Mail(action))

    @property
    def closed(self) -> bool:
        return self._gate.closed
