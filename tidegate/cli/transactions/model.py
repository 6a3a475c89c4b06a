"""The one model of `tidegate transactions`: a lingering sink transaction (its id, the sink
kind, writer, checkpoint, age, and the completed checkpoint covering it), the committables of a
job's completed checkpoints it is judged against, and the rule for resolving one. Pure, but for
`job_committables` (reads the checkpoints).

A transaction is *covered* when the sink committables of one of the job's completed checkpoints
name it: that checkpoint completed, so its records belong in the output and `commit` makes them
visible (a restore from it would commit them too). `commit` refuses an uncovered transaction
(its records are written again by a restore, or were never part of a completed checkpoint),
and `abort` refuses a covered one (its records would be lost).

Each sink kind (postgres.py, kafka.py, files.py) turns the committables and what it finds in
its external system into `LingeringTransaction`s, and commits or aborts them by id
(`SinkTransactions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tidegate.cli.checkpoints import find_checkpoints
from tidegate.cli.errors import CliError
from tidegate.runtime.connector_operators import SinkOperator
from tidegate.state_processor.snapshot import SnapshotView

__all__ = [
    "Covered",
    "JobCommittables",
    "LingeringTransaction",
    "SinkTransactions",
    "job_committables",
    "refusal",
]


@dataclass(frozen=True, slots=True)
class LingeringTransaction:
    """A sink transaction a job left open. None where the kind cannot tell."""

    kind: str  # "postgres", "kafka" or "files"
    id: str  # what `commit` / `abort` take
    writer: int | None  # the sink writer index (subtask) that wrote it
    checkpoint_id: int | None  # the checkpoint whose records it holds
    attempt: int | None  # the job attempt (restart count) that wrote it
    age_s: float | None  # seconds since it was prepared / written
    #: the first completed checkpoint whose committables name it; None: uncovered
    covered_by: int | None
    #: what else the kind knows (the job of a prepared transaction, "may be open", ...)
    note: str = ""


@dataclass(frozen=True, slots=True)
class Covered:
    """A committable in the sink state of a completed checkpoint."""

    #: the sink operator's uid
    uid: str
    #: the completed checkpoint whose state holds it
    covered_by: int
    #: when that checkpoint completed (epoch ms)
    completed_ms: int
    writer: int
    #: the checkpoint the committable was pre-committed in
    checkpoint_id: int
    committable: Any


@dataclass(frozen=True, slots=True)
class JobCommittables:
    """The job a source names, and the committables of its completed checkpoints (none for a
    bare job id)."""

    job_id: str
    covered: tuple[Covered, ...]

    def of_type(self, kind: type) -> list[Covered]:
        return [c for c in self.covered if isinstance(c.committable, kind)]


def job_committables(job_dir: str) -> JobCommittables:
    """The committables of the completed checkpoints of one job directory, with the completed
    checkpoint whose state holds them, by checkpoint (a committable pending over several
    checkpoints is there once per checkpoint: the kinds keep its first)."""
    found = find_checkpoints(job_dir)
    jobs = {f.job_id for f in found}
    if len(jobs) != 1:
        raise CliError(
            f"{job_dir} holds the completed checkpoints of {len(jobs)} jobs, not one",
            "pass one job directory (the one holding chk-<n>)",
        )
    covered: list[Covered] = []
    for chk in sorted(found, key=lambda f: f.checkpoint_id):
        view = SnapshotView.open(chk.path)
        completed_ms = view.metadata.completed_or_triggered_ms
        for uid in view.operators:
            for _subtask, states in view.operator_state(uid):
                _mode, entries = states.get(SinkOperator.COMMITTABLES, (None, []))
                covered += [
                    Covered(uid, chk.checkpoint_id, completed_ms, writer, cid, committable)
                    for writer, cid, committable in entries
                ]
    return JobCommittables(jobs.pop(), tuple(covered))


def refusal(t: LingeringTransaction, commit: bool, job_id: str) -> CliError | None:
    """Why committing (or aborting) `t` is refused, None if it is allowed."""
    if commit and t.covered_by is None:
        return CliError(
            f"refusing to commit {t.id}: no completed checkpoint of job {job_id} covers it, "
            "so its records are not part of the job's consistent output",
            "abort it (a restore of the job writes those records again)",
        )
    if not commit and t.covered_by is not None:
        return CliError(
            f"refusing to abort {t.id}: checkpoint {t.covered_by} covers it (it completed), "
            "aborting would lose its records",
            "commit it",
        )
    return None


class SinkTransactions(Protocol):
    """One sink kind's lingering transactions of a job, and resolving them (I/O)."""

    kind: str

    def lingering(self) -> list[LingeringTransaction]:
        """The kind's lingering transactions of the job, covered or not."""
        ...

    def commit(self, t: LingeringTransaction) -> bool:
        """Commit `t` (covered); False if it was resolved meanwhile by another."""
        ...

    def abort(self, t: LingeringTransaction) -> bool:
        """Abort `t` (uncovered); False if it was resolved meanwhile by another."""
        ...

    def close(self) -> None: ...
