"""Global ids of the exactly-once sink's prepared transactions, and the decisions a restore
makes with them. Pure.

A gid is `tidegate:<job id>:<writer index>:<attempt>:<checkpoint id>:<nonce>`: the job that
prepared it, the sink writer index (its subtask when it wrote), the job's attempt (restart
count), the checkpoint whose records it holds, and a random nonce of the writer instance
(a job restored twice from one snapshot with a fixed `pipeline.job-id` prepares the same job,
writer, attempt and checkpoint again; the nonce keeps its commit markers apart). From a gid
alone, `tidegate transactions` and `pg_prepared_xacts` show which job and checkpoint left a
transaction. The job id may hold ':' (a user-chosen `pipeline.job-id`); it is the part
between the prefix and the last four fields.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tidegate.connectors.base import writer_subtask

__all__ = [
    "GID_PREFIX",
    "CommitOutcome",
    "Gid",
    "commit_outcome",
    "format_gid",
    "parse_gid",
    "to_roll_back",
]

GID_PREFIX = "tidegate"
#: PostgreSQL's limit on a gid (bytes, the terminating zero excluded)
MAX_GID_BYTES = 199


@dataclass(frozen=True, slots=True, order=True)
class Gid:
    job_id: str
    writer: int
    attempt: int
    checkpoint_id: int
    nonce: str

    def __str__(self) -> str:
        return format_gid(self)


def format_gid(gid: Gid) -> str:
    text = f"{GID_PREFIX}:{gid.job_id}:{gid.writer}:{gid.attempt}:{gid.checkpoint_id}:{gid.nonce}"
    if len(text.encode()) > MAX_GID_BYTES or not gid.job_id or ":" in gid.nonce:
        raise ValueError(
            f"cannot name a prepared transaction {text!r}: PostgreSQL takes gids of at most "
            f"{MAX_GID_BYTES} bytes (a shorter pipeline.job-id fixes it)"
        )
    return text


def parse_gid(text: str) -> Gid | None:
    """The parts of a gid this module formatted; None for any other gid (another program's
    prepared transaction, never touched)."""
    head, sep, rest = text.partition(":")
    if head != GID_PREFIX or not sep:
        return None
    parts = rest.rsplit(":", 4)
    if len(parts) != 5 or not parts[0] or not parts[4]:
        return None
    job_id, writer, attempt, checkpoint, nonce = parts
    try:
        return Gid(job_id, int(writer), int(attempt), int(checkpoint), nonce)
    except ValueError:
        return None


def to_roll_back(
    prepared: Iterable[str],
    job_ids: Iterable[str],
    subtask_index: int,
    parallelism: int,
    restored: Iterable[str],
) -> list[str]:
    """The prepared gids a recovering sink subtask rolls back: those of the jobs `job_ids`
    (the running job, and the jobs whose committables it restored) whose writer index it takes
    over (`writer_subtask`), except the `restored` ones (their checkpoint completed: they are
    committed next). Gids of other programs, other jobs and other writer indexes are left
    alone: other subtasks recover those concurrently."""
    jobs, keep = set(job_ids), set(restored)
    chosen = []
    for text in prepared:
        gid = parse_gid(text)
        if (
            gid is not None
            and gid.job_id in jobs
            and writer_subtask(gid.writer, parallelism) == subtask_index
            and text not in keep
        ):
            chosen.append(text)
    return sorted(chosen)


class CommitOutcome(enum.Enum):
    COMMITTED = "committed"  # COMMIT PREPARED succeeded now
    ALREADY_COMMITTED = "already committed"  # no such prepared transaction; its marker exists
    LOST = "lost"  # no such prepared transaction and no marker: it was rolled back or lost


def commit_outcome(prepared_found: bool, marker_found: bool) -> CommitOutcome:
    """What a `COMMIT PREPARED` of a restored gid means. Flink's XA sink takes an unknown
    xid as already committed; here the transaction also inserted a marker row, visible only
    if it committed, so an unknown gid without its marker is known to be lost (rolled back by
    someone, or prepared in another database) and is reported, never passed over."""
    if prepared_found:
        return CommitOutcome.COMMITTED
    return CommitOutcome.ALREADY_COMMITTED if marker_found else CommitOutcome.LOST
