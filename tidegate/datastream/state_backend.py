"""State backends (PyFlink's names): where working state lives while the job runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HashMapStateBackend:
    """Keyed state in Python dicts on the heap of each worker; snapshots are written per key
    group to the checkpoint storage. Fast; state must fit in memory."""
