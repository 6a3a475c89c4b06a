"""InputGate: a subtask's inbox. Data frames are bounded (backpressure); control messages from
the driver never block and are served first."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class TaskCancelledError(Exception):
    """Raised in a thread blocked on a gate when the subtask is being cancelled."""


class InputGate:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: deque = deque()
        self._control: deque = deque()
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)
        self._closed = False

    def put_data(self, item: Any) -> None:
        """Append a (channel, frame) pair, blocking while the gate is full."""
        with self._not_full:
            while len(self._data) >= self.capacity and not self._closed:
                self._not_full.wait(0.5)
            if self._closed:
                raise TaskCancelledError("input gate closed")
            self._data.append(item)
            self._not_empty.notify()

    def put_control(self, message: Any) -> None:
        with self._not_empty:
            self._control.append(message)
            self._not_empty.notify()

    def get(self, timeout: float | None) -> tuple[bool, Any] | None:
        """Next (is_control, item), or None when nothing arrived within `timeout` seconds."""
        with self._not_empty:
            if not self._control and not self._data:
                if timeout == 0 or self._closed:
                    return None
                self._not_empty.wait(timeout)
            if self._control:
                return True, self._control.popleft()
            if self._data:
                item = self._data.popleft()
                self._not_full.notify()
                return False, item
            return None

    def close(self) -> None:
        with self._not_empty:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
