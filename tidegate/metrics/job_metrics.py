"""Records, rates, backpressure and busy time of a job's subtasks, from the counters every slot
reports each second (`SlotMetrics`).

A slot's counters are cumulative since the slot started: records in and out, seconds blocked
handing output downstream (backpressure: the downstream input queue or the TCP connection to
it was full) and seconds waiting for input (idle). Rates and ratios are the differences
between two samples of the same slot divided by the time between them (the slot's own clock),
so they describe roughly the last second. A subtask is busy when neither blocked nor idle
(Flink's busyTimeMsPerSecond = 1000 - idle - backpressured).

Counters restart with every job attempt: the first report of a new attempt clears the old one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from tidegate.runtime.messages import SlotMetrics, SubtaskId, SubtaskMetrics
from tidegate.runtime.plan import JobGraph

#: shortest time between two samples that rates are computed over
MIN_RATE_WINDOW_S = 0.5


def backpressure_level(ratio: float) -> str:
    """Flink's levels: ok up to 10 % of the time backpressured, low up to 50 %, then high."""
    if ratio <= 0.10:
        return "ok"
    return "low" if ratio <= 0.5 else "high"


@dataclass(frozen=True, slots=True)
class SubtaskRates:
    records_in_per_s: float = 0.0
    records_out_per_s: float = 0.0
    #: fractions of the sampled time
    backpressure_ratio: float = 0.0
    idle_ratio: float = 0.0

    @property
    def busy_ratio(self) -> float:
        return max(1.0 - self.backpressure_ratio - self.idle_ratio, 0.0)

    @classmethod
    def between(cls, old: SubtaskMetrics, new: SubtaskMetrics, seconds: float) -> SubtaskRates:
        def ratio(a: float, b: float) -> float:
            return min(max((b - a) / seconds, 0.0), 1.0)

        return cls(
            records_in_per_s=max(new.records_in - old.records_in, 0) / seconds,
            records_out_per_s=max(new.records_out - old.records_out, 0) / seconds,
            backpressure_ratio=ratio(old.backpressured_s, new.backpressured_s),
            idle_ratio=ratio(old.idle_s, new.idle_s),
        )


class JobMetrics:
    """The latest counters and rates of every subtask of one job. Thread-safe."""

    def __init__(self, graph: JobGraph) -> None:
        self.graph = graph
        self._sources = {v.vertex_id for v in graph.vertices.values() if v.is_source}
        self._lock = threading.Lock()
        self._attempt = -1
        self._latest: dict[SubtaskId, SubtaskMetrics] = {}
        #: per subtask: the sample the next rates are computed from (slot clock, counters)
        self._base: dict[SubtaskId, tuple[float, SubtaskMetrics]] = {}
        self._rates: dict[SubtaskId, SubtaskRates] = {}
        self.updated_ms: int | None = None

    def update(self, msg: SlotMetrics) -> None:
        with self._lock:
            if msg.attempt < self._attempt:
                return  # a zombie slot of an ended attempt
            if msg.attempt > self._attempt:
                self._attempt = msg.attempt
                self._latest.clear()
                self._base.clear()
                self._rates.clear()
            for subtask, metrics in msg.subtasks.items():
                self._latest[subtask] = metrics
                base = self._base.get(subtask)
                if base is None:
                    self._base[subtask] = (msg.sampled_s, metrics)
                    continue
                seconds = msg.sampled_s - base[0]
                if seconds >= MIN_RATE_WINDOW_S:
                    self._rates[subtask] = SubtaskRates.between(base[1], metrics, seconds)
                    self._base[subtask] = (msg.sampled_s, metrics)
            self.updated_ms = int(time.time() * 1000)

    # job totals (what `tidegate run` shows) ------------------------------------------------------
    @property
    def records_read(self) -> int:
        """Records the sources read since the attempt started."""
        with self._lock:
            return sum(m.records_in for s, m in self._latest.items() if s[0] in self._sources)

    @property
    def records_in(self) -> int:
        """Records the other subtasks received since the attempt started."""
        with self._lock:
            return sum(m.records_in for s, m in self._latest.items() if s[0] not in self._sources)

    @property
    def records_per_s(self) -> float:
        """Records the sources read per second."""
        with self._lock:
            return sum(r.records_in_per_s for s, r in self._rates.items() if s[0] in self._sources)

    @property
    def restored_files(self) -> tuple[int, int]:
        """Keyed-state files this attempt's subtasks read on restore: (task-local, remote)."""
        with self._lock:
            latest = list(self._latest.values())
        return (
            sum(m.restored_local_files for m in latest),
            sum(m.restored_remote_files for m in latest),
        )

    def subtask(self, subtask: SubtaskId) -> tuple[SubtaskMetrics | None, SubtaskRates]:
        with self._lock:
            return self._latest.get(subtask), self._rates.get(subtask, SubtaskRates())

    # JSON ----------------------------------------------------------------------------------------
    def vertices_json(self) -> list[dict[str, Any]]:
        """Per vertex: totals, rates, backpressure and busy ratios (the highest of its
        subtasks, as Flink shows them), and its subtasks."""
        with self._lock:
            latest, rates = dict(self._latest), dict(self._rates)
        vertices = []
        for vertex in self.graph.vertices.values():
            subtasks = []
            for i in range(vertex.parallelism):
                m = latest.get((vertex.vertex_id, i)) or SubtaskMetrics(0, 0)
                subtasks.append(_subtask_json(i, m, rates.get((vertex.vertex_id, i))))
            vertices.append(
                {
                    "id": vertex.vertex_id,
                    "name": vertex.name,
                    "parallelism": vertex.parallelism,
                    "metrics": _vertex_metrics(subtasks),
                    "subtasks": subtasks,
                }
            )
        return vertices


def _subtask_json(index: int, m: SubtaskMetrics, rates: SubtaskRates | None) -> dict[str, Any]:
    r = rates or SubtaskRates()
    return {
        "subtask": index,
        "read-records": m.records_in,
        "write-records": m.records_out,
        "read-records-per-second": round(r.records_in_per_s, 1),
        "write-records-per-second": round(r.records_out_per_s, 1),
        "backpressure-ratio": round(r.backpressure_ratio, 3),
        "backpressure-level": backpressure_level(r.backpressure_ratio),
        "idle-ratio": round(r.idle_ratio, 3),
        "busy-ratio": round(r.busy_ratio, 3) if rates is not None else 0.0,
        "accumulated-backpressured-time": round(m.backpressured_s * 1000),
        "accumulated-idle-time": round(m.idle_s * 1000),
        "restored-state-files-local": m.restored_local_files,
        "restored-state-files-remote": m.restored_remote_files,
        "rates-known": rates is not None,
    }


def _vertex_metrics(subtasks: list[dict[str, Any]]) -> dict[str, Any]:
    backpressure = max(s["backpressure-ratio"] for s in subtasks)
    return {
        "read-records": sum(s["read-records"] for s in subtasks),
        "write-records": sum(s["write-records"] for s in subtasks),
        "read-records-per-second": round(sum(s["read-records-per-second"] for s in subtasks), 1),
        "write-records-per-second": round(sum(s["write-records-per-second"] for s in subtasks), 1),
        "backpressure-ratio": backpressure,
        "backpressure-level": backpressure_level(backpressure),
        "busy-ratio": max(s["busy-ratio"] for s in subtasks),
        "idle-ratio": min(s["idle-ratio"] for s in subtasks),
    }
