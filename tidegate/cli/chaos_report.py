"""What `tidegate chaos` concludes from its two runs (pure, apart from reading the committed
files): per sink, the records the run under faults lost, duplicated, made up or reordered
compared with the reference run; and the summary of the faults, restarts, checkpoints and
recovery times."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.cli.formatting import format_table
from tidegate.runtime.faults import NON_FAILING_KINDS, FaultKind

#: how many differing records a report shows per category
SHOWN = 5


def committed_records(directory: str) -> list[str]:
    """The lines of the committed files under `directory` (names, and directory names below
    it, not starting with '.'), file after file in natural order of their paths (part-0-1-10
    after part-0-1-9), so a sink subtask's files come in the order it wrote them."""
    paths = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        paths.extend(os.path.join(root, f) for f in files if not f.startswith("."))
    records = []
    for path in sorted(paths, key=_natural):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        records.extend(text.removesuffix("\n").split("\n") if text else [])
    return records


def _natural(path: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


@dataclass(frozen=True)
class SinkDiff:
    """How one sink's committed records under faults differ from the reference run's."""

    name: str
    reference_count: int
    faulty_count: int
    #: reference records missing under faults, with how many copies are missing
    lost: Counter[str]
    #: reference records committed more often under faults, with how many extra copies
    duplicated: Counter[str]
    #: records committed under faults that the reference run never committed
    unexpected: Counter[str]
    #: an ordered sink: the first position where the sequences differ (None: same order, or
    #: the order is not defined)
    reordered_at: int | None
    #: the first differing records, in the order they appear: (what, record)
    examples: tuple[tuple[str, str], ...]

    @property
    def equal(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected) and self.reordered_at is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reference_records": self.reference_count,
            "faulty_records": self.faulty_count,
            "lost": sum(self.lost.values()),
            "duplicated": sum(self.duplicated.values()),
            "unexpected": sum(self.unexpected.values()),
            "reordered_at": self.reordered_at,
            "equal": self.equal,
            "examples": [{"what": what, "record": record} for what, record in self.examples],
        }


def compare_records(
    name: str, reference: Sequence[str], faulty: Sequence[str], ordered: bool
) -> SinkDiff:
    """Compare as multisets; for an `ordered` sink with equal multisets, also as sequences."""
    expected, got = Counter(reference), Counter(faulty)
    lost = expected - got
    extra = got - expected
    duplicated = Counter({r: n for r, n in extra.items() if r in expected})
    unexpected = Counter({r: n for r, n in extra.items() if r not in expected})
    examples: list[tuple[str, str]] = []
    for what, counter, order in (
        ("lost", lost, reference),
        ("duplicated", duplicated, faulty),
        ("unexpected", unexpected, faulty),
    ):
        shown = [r for r in dict.fromkeys(order) if r in counter][:SHOWN]
        examples.extend((what, r) for r in shown)
    reordered_at = None
    if ordered and not lost and not extra:
        pairs = enumerate(zip(reference, faulty, strict=True))
        reordered_at = next((i for i, (a, b) in pairs if a != b), None)
        if reordered_at is not None:
            examples.append(("expected here", reference[reordered_at]))
            examples.append(("found here", faulty[reordered_at]))
    return SinkDiff(
        name, len(reference), len(faulty), lost, duplicated, unexpected, reordered_at,
        tuple(examples),
    )  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q`-th percentile (None without values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def recovery_times(log: Sequence[dict[str, Any]]) -> list[float]:
    """Seconds from each attempt's first injected fault (of a kind that fails something: not
    `slow`) to the next attempt's subtasks running again, their state restored (the last of its
    slots to log `running`), from a fault log (runtime/faults.py). Attempts are numbered per run
    of the driver: after a `driver-restart`, the next attempt is the new driver's first."""
    first_fault: dict[tuple[int, int], float] = {}
    running: dict[tuple[int, int], float] = {}
    for entry in log:
        attempt, at = (entry.get("driver", 0), entry["attempt"]), entry["time"]
        if entry["event"] == "fault":
            if entry["kind"] in NON_FAILING_KINDS:
                continue
            first_fault[attempt] = min(first_fault.get(attempt, at), at)
        else:
            running[attempt] = max(running.get(attempt, at), at)
    times = []
    for attempt, at in sorted(first_fault.items()):
        following = [a for a in running if a > attempt]
        if following:
            times.append(running[min(following)] - at)
    return times


@dataclass(frozen=True)
class ChaosSummary:
    planned: int
    injected: Counter[str]
    restarts: int
    checkpoints_completed: int
    checkpoints_failed: int
    recovery_s: tuple[float, ...]
    sinks: tuple[SinkDiff, ...]

    @property
    def passed(self) -> bool:
        return sum(self.injected.values()) > 0 and all(s.equal for s in self.sinks)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "faults_planned": self.planned,
            "faults_injected": dict(self.injected),
            "restarts": self.restarts,
            "checkpoints_completed": self.checkpoints_completed,
            "checkpoints_failed": self.checkpoints_failed,
            "recovery_s": {
                "p50": percentile(self.recovery_s, 50),
                "p99": percentile(self.recovery_s, 99),
                "all": list(self.recovery_s),
            },
            "records_lost": sum(sum(s.lost.values()) for s in self.sinks),
            "records_duplicated": sum(sum(s.duplicated.values()) for s in self.sinks),
            "records_unexpected": sum(sum(s.unexpected.values()) for s in self.sinks),
            "sinks": [s.to_json() for s in self.sinks],
        }

    def format(self) -> str:
        """The summary table, then one line per sink and its first differing records."""
        p50, p99 = percentile(self.recovery_s, 50), percentile(self.recovery_s, 99)
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.injected.items())) or "none"
        rows = [
            ("faults injected", f"{sum(self.injected.values())} of {self.planned} planned"),
            ("  by kind", kinds),
            ("restarts", self.restarts),
            ("checkpoints completed", self.checkpoints_completed),
            ("checkpoints failed", self.checkpoints_failed),
            ("recovery time p50", "-" if p50 is None else f"{p50:.2f}s"),
            ("recovery time p99", "-" if p99 is None else f"{p99:.2f}s"),
            ("records lost", sum(sum(s.lost.values()) for s in self.sinks)),
            ("records duplicated", sum(sum(s.duplicated.values()) for s in self.sinks)),
            ("records unexpected", sum(sum(s.unexpected.values()) for s in self.sinks)),
        ]
        lines = [format_table(("", ""), [(k, str(v)) for k, v in rows])]
        for sink in self.sinks:
            verdict = "equal" if sink.equal else "DIFFERENT"
            at = sink.reordered_at
            order = "" if at is None else f", reordered from record {at} on"
            lines.append(
                f"sink {sink.name}: {verdict} ({sink.faulty_count} records under faults, "
                f"{sink.reference_count} in the reference run; lost {sum(sink.lost.values())}, "
                f"duplicated {sum(sink.duplicated.values())}, unexpected "
                f"{sum(sink.unexpected.values())}{order})"
            )
            lines.extend(f"  {what}: {record}" for what, record in sink.examples)
        return "\n".join(lines)


def summarize(
    reference: dict[str, Any],
    faulty: dict[str, Any],
    faults_log: Sequence[dict[str, Any]],
    outputs: Sequence[tuple[Sequence[str], Sequence[str]]],
) -> ChaosSummary:
    """The summary of a chaos run from both runs' run.json, the faults the slots logged and
    each sink's (reference, faulty) committed records."""
    jobs = faulty["jobs"]
    injected = [entry for entry in faults_log if entry["event"] == "fault"]
    # a restarted driver's attempts number their part files from 0 again: the file names no
    # longer follow the order the records were written in
    restarted = any(entry["kind"] == FaultKind.DRIVER_RESTART for entry in injected)
    sinks = tuple(
        compare_records(_sink_name(sink), ref, got, sink["ordered"] and not restarted)
        for sink, (ref, got) in zip(reference["sinks"], outputs, strict=True)
    )
    return ChaosSummary(
        planned=sum(len(job["planned_faults"]) for job in jobs),
        injected=Counter(entry["kind"] for entry in injected),
        restarts=sum(job["restarts"] for job in jobs) + _killed_drivers_restarts(faults_log),
        checkpoints_completed=sum(job["checkpoints_completed"] for job in jobs),
        checkpoints_failed=sum(job["checkpoints_failed"] for job in jobs),
        recovery_s=tuple(recovery_times(faults_log)),
        sinks=sinks,
    )


def _killed_drivers_restarts(log: Sequence[dict[str, Any]]) -> int:
    """The restarts of the drivers a `driver-restart` killed (their run.json was never
    written): each one's own (its last attempt that ran, from the log), and the kill."""
    killed = {
        e.get("driver", 0)
        for e in log
        if e["event"] == "fault" and e["kind"] == FaultKind.DRIVER_RESTART
    }
    attempts = [
        max((e["attempt"] for e in log if e["event"] == "running" and e.get("driver", 0) == d),
            default=0)
        for d in killed
    ]  # fmt: skip
    return sum(attempts) + len(killed)


def _sink_name(sink: dict[str, Any]) -> str:
    uid = f" (uid {sink['uid']})" if sink.get("uid") else ""
    return f"{sink['index']} {sink['name']!r}{uid}"
