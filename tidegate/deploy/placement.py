"""Where a restarted attempt's slots should run: on the hosts that hold their task-local state.

With task-local recovery (`state.backend.local-recovery`), each slot keeps a copy of its
latest checkpointed state on its executor's disk. A restart restores from that copy only if the
slot runs on the same host again; elsewhere it reads the checkpoint storage (correct, slower).
The JobMaster remembers the hosts of the slots whose checkpoint completed last
(`LocalStateHosts`), asks Spark to place each slot there (preferred locations, honoured within
`spark.locality.wait`), and reports each slot that landed elsewhere (`misplaced`). Pure code:
hosts in, preferences and messages out.

Hosts are as Spark names executors (the host part of a barrier task's address), so that they
match the preferred locations Spark's scheduler compares them with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["LocalStateHosts", "misplaced"]


@dataclass
class LocalStateHosts:
    """The host of each slot's task-local state: those of the attempt that completed the latest
    checkpoint (each slot kept a local copy of it where it ran)."""

    enabled: bool
    _running: dict[int, str] = field(default_factory=dict)
    _holding: dict[int, str] = field(default_factory=dict)

    def attempt_running(self, hosts: Mapping[int, str]) -> None:
        """Every slot of a new attempt registered, on these hosts."""
        self._running = dict(hosts)

    def checkpoint_completed(self) -> None:
        """A checkpoint of the running attempt completed: its slots' hosts now hold copies."""
        if self.enabled:
            self._holding = dict(self._running)

    def preferred(self, num_slots: int) -> list[str | None] | None:
        """Each slot's preferred host for the next attempt (None: no preference at all: local
        recovery is off, no checkpoint completed yet, or the slot count changed)."""
        if not self._holding or len(self._holding) != num_slots:
            return None
        return [self._holding.get(slot) for slot in range(num_slots)]


def misplaced(preferred: list[str | None] | None, hosts: Mapping[int, str]) -> list[str]:
    """A message for each slot that runs elsewhere than the host of its local state."""
    if preferred is None:
        return []
    return [
        f"slot {slot} runs on {hosts[slot]}, not on {want} where its task-local state is: it "
        "restores from the checkpoint storage (Spark placed it elsewhere: was that host's "
        "executor busy or gone? spark.locality.wait bounds how long Spark waits for it)"
        for slot, want in enumerate(preferred)
        if want is not None and slot in hosts and hosts[slot] != want
    ]
