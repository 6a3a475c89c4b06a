"""Frames on a channel: `(channel index, payload)` pairs, pickled for the network and for the
channel state of unaligned checkpoints."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle


def encode_frame(frame: Any, plain: bool = True) -> tuple[bytes, bool]:
    """Pickle a frame (with cloudpickle when `plain` is False: records of classes defined in
    the job script only cloudpickle can carry). Returns the bytes and whether plain pickle
    still works, so a transport stops retrying it after the first such frame."""
    if plain:
        try:
            return pickle.dumps(frame, protocol=5), True
        except (pickle.PicklingError, AttributeError, TypeError):
            pass
    return cloudpickle.dumps(frame, protocol=5), False
