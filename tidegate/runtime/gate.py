"""InputGate: a subtask's inbox. Data frames are bounded (backpressure); control messages from
the driver never block and are served first.

During an unaligned checkpoint the gate also records the checkpoint's in-flight frames
(runtime/inflight.py): every frame of a recorded channel is offered to the recorder when it is
appended, under the gate's lock, so nothing slips between "already queued" and "arrives later".
Such frames are admitted beyond the capacity: they were sent before the upstream snapshot and
must all arrive before the checkpoint can complete, so holding them back under backpressure
would only delay it (they are bounded by what was in flight).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidegate.runtime.frames import encode_frame
from tidegate.runtime.inflight import InFlightRecorder


class TaskCancelledError(Exception):
    """Raised in a thread blocked on a gate when the subtask is being cancelled."""


@dataclass(frozen=True, slots=True)
class ChannelStateCaptured:
    """Control item: every recorded channel of `checkpoint_id` delivered its barrier."""

    checkpoint_id: int


class InputGate:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: deque = deque()
        self._control: deque = deque()
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)
        self._closed = False
        self._capture: InFlightRecorder | None = None
        self._announced: InFlightRecorder | None = None
        self._plain_pickle = True

    def put_data(self, item: tuple[int, Any], raw: bytes | None = None) -> None:
        """Append a (channel, frame) pair, blocking while the gate is full. `raw` is the frame
        as it came off the network (pickled), kept if the frame turns out to be in flight."""
        channel = item[0]
        with self._not_full:
            while len(self._data) >= self.capacity and not self._closed:
                capture = self._capture
                if capture is not None and capture.is_recording(channel):
                    break
                self._not_full.wait(0.5)
            if self._closed:
                raise TaskCancelledError("input gate closed")
            self._data.append(item)
            capture = self._capture
            if capture is not None and capture.is_recording(channel):
                self._offer(capture, item, raw)
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

    @property
    def closed(self) -> bool:
        """The subtask is being cancelled (see `close`)."""
        return self._closed

    def close(self) -> None:
        with self._not_empty:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    # unaligned checkpoints ----------------------------------------------------------------------
    def start_capture(
        self, checkpoint_id: int, channels: Iterable[int], before: Iterable[tuple[int, Any]] = ()
    ) -> None:
        """Record `checkpoint_id`'s in-flight frames on `channels`: first those of `before`
        (frames the task took from the gate but has not processed yet, oldest first), then
        the queued ones, then arrivals, each channel up to its barrier. A capture of an older
        checkpoint is dropped. Completion is announced by a ChannelStateCaptured control item.
        """
        recorder = InFlightRecorder(checkpoint_id, set(channels))
        with self._not_full:
            for item in before:
                self._offer(recorder, item, None)
            for item in self._data:
                if recorder.is_recording(item[0]):
                    self._offer(recorder, item, None)
            self._capture = recorder
            self._announce_if_complete(recorder)
            self._not_full.notify_all()  # recorded channels may now exceed the capacity

    def take_capture(self, checkpoint_id: int) -> list[bytes] | None:
        """The recorded frames (each a pickled (channel, records) pair) of a completed
        capture, or None if `checkpoint_id` is not the current, completed capture."""
        with self._not_full:
            capture = self._capture
            if capture is None or capture.checkpoint_id != checkpoint_id or not capture.complete:
                return None
            self._capture = None
            return [blob for _channel, blob in capture.frames]

    def abort_capture(self, checkpoint_id: int) -> None:
        """Stop recording for `checkpoint_id` (or any older checkpoint)."""
        with self._not_full:
            if self._capture is not None and self._capture.checkpoint_id <= checkpoint_id:
                self._capture = None

    def _offer(self, recorder: InFlightRecorder, item: tuple[int, Any], raw: bytes | None) -> None:
        channel, payload = item
        if isinstance(payload, list) and raw is None:
            # Pickle now: the task may process (and a user function mutate) the records later.
            raw, self._plain_pickle = encode_frame(item, self._plain_pickle)
        recorder.offer(channel, payload, raw)
        self._announce_if_complete(recorder)

    def _announce_if_complete(self, recorder: InFlightRecorder) -> None:
        if recorder.complete and recorder is not self._announced:
            self._announced = recorder
            self._control.append(ChannelStateCaptured(recorder.checkpoint_id))
            self._not_empty.notify()
