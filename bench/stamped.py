"""Events stamped with their creation time, for the latency benchmark (bench/latency.py): the
source that creates them on a schedule, the keyed count's functions that carry the stamp, and
the sink wrapper that records when each event was processed and when it became visible.

Clock: `time.time_ns()` (CLOCK_REALTIME) everywhere, because the stamps are compared across
processes (the source's slot, the sink's slot); the benchmark runs on one host.

Like bench/jobs.py, this module is pickled by value (the slots cannot import `bench`).
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass, replace
from typing import Any

from tidegate.connectors.base import Boundedness
from tidegate.connectors.number_seq import split_range

#: the longest a reader sleeps in one poll waiting for its next event (SourceReader contract)
MAX_SLEEP_S = 0.05


# source ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScheduledSplit:
    """Reader `subtask`'s events: `count` in all, `emitted` so far."""

    subtask: int
    emitted: int
    count: int


class ScheduledSource:
    """`count` events `(index, created_ns)`, bounded.

    With `rate` (events/s of the whole source; each reader an equal share) the source is an
    open loop: reader event n is created at `t0 + n / reader rate` (t0: the reader's first
    poll), and a poll returns every event whose time has come, stamped with that time, however
    late the poll is. So a pipeline that falls behind sees its events age (as when they wait
    in a message queue), rather than the source slowing down (which would hide the delay).
    Without a rate events are created when polled, as fast as the job takes them.
    """

    boundedness = Boundedness.BOUNDED

    def __init__(self, count: int, rate: float | None, log_dir: str | None = None) -> None:
        """`log_dir`: where each reader writes, on close, how many polls returned events and
        how many events they returned (`polls-<subtask>.txt`)."""
        self.count, self.rate, self.log_dir = count, rate, log_dir

    def create_splits(self, parallelism: int) -> list[ScheduledSplit]:
        ranges = split_range(0, self.count - 1, parallelism)
        return [ScheduledSplit(i, 0, high - low + 1) for i, (low, high) in enumerate(ranges)]

    def create_reader(
        self, splits: list[ScheduledSplit], subtask_index: int, parallelism: int
    ) -> ScheduledReader:
        rate = None if self.rate is None else self.rate / parallelism
        log = None if self.log_dir is None else f"{self.log_dir}/polls-{subtask_index}.txt"
        return ScheduledReader(splits, parallelism, rate, log)


class ScheduledReader:
    def __init__(
        self,
        splits: list[ScheduledSplit],
        stride: int,
        rate: float | None,
        log_path: str | None = None,
    ) -> None:
        self.splits = [s for s in splits if s.emitted < s.count]
        self.stride = stride
        self.interval_ns = None if rate is None else 1e9 / rate
        self.t0: int | None = None
        self.log_path = log_path
        #: polls that returned events, and the events they returned
        self.polls = self.events = 0

    def poll_batch(self, max_records: int) -> list[tuple[int, int]] | None:
        if not self.splits:
            return None
        split = self.splits[0]
        now = time.time_ns()
        if self.t0 is None:
            self.t0 = now
        start, interval = split.emitted, self.interval_ns
        if interval is None:
            n = min(max_records, split.count - start)
            created = [now] * n
        else:
            due = min(int((now - self.t0) / interval) + 1, split.count)
            if due <= start:  # the next event is not due yet: wait for it (briefly)
                wait_ns = self.t0 + start * interval - now
                time.sleep(min(max(wait_ns, 0) / 1e9, MAX_SLEEP_S))
                due = min(int((time.time_ns() - self.t0) / interval) + 1, split.count)
            n = max(min(max_records, due - start), 0)
            # t0 + int(i * interval) for each i, in C loops: the harness's own per-event cost
            # (a list comprehension here was 15 % of a slot's CPU at 800k events/s)
            created = list(
                map(self.t0.__add__, map(int, map(interval.__mul__, range(start, start + n))))
            )
        stride, sub = self.stride, split.subtask
        ids = range(start * stride + sub, (start + n) * stride + sub, stride)
        batch = list(zip(ids, created, strict=True))
        if n:
            self.polls += 1
            self.events += n
        split = replace(split, emitted=start + n)
        if split.emitted >= split.count:
            self.splits.pop(0)
        else:
            self.splits[0] = split
        return batch

    def snapshot_splits(self) -> list[ScheduledSplit]:
        return list(self.splits)

    def close(self) -> None:
        self.splits = []
        if self.log_path is not None:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            with open(self.log_path, "w") as f:
                f.write(f"{self.polls} {self.events}\n")


# the keyed count on stamped events (bench/jobs.py's W1 with the stamp carried along) ----------
def stamped_pair(event: tuple[int, int], keys: int) -> tuple[int, int, int]:
    return (event[0] % keys, 1, event[1])


def add_stamped_counts(a: tuple, b: tuple) -> tuple:
    """The count so far, stamped with the creation time of the event that updated it last."""
    return (a[0], a[1] + b[1], b[2])


# sink ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatencyCommittable:
    """The records a writer wrote for checkpoint `checkpoint_id`: positions `start..end` of its
    creation-time log."""

    subtask: int
    attempt: int
    checkpoint_id: int
    start: int
    end: int


class LatencyWriter:
    """Logs each record's creation time (its last field) and, per batch, when it was written
    (the record was processed by the last operator); on close, writes both logs to files."""

    def __init__(self, inner: Any, directory: str, subtask: int, attempt: int) -> None:
        self.inner, self.directory = inner, directory
        self.subtask, self.attempt = subtask, attempt
        self.created = array("q")
        #: per batch: the wall time it was written and the log's length after it
        self.batches = array("q")
        self.committed_upto = 0

    def write_batch(self, records: list[Any]) -> None:
        self.created.extend([r[-1] for r in records])
        self.batches.extend((time.time_ns(), len(self.created)))
        self.inner.write_batch(records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        own = LatencyCommittable(
            self.subtask, self.attempt, checkpoint_id, self.committed_upto, len(self.created)
        )
        self.committed_upto = len(self.created)
        return [*self.inner.prepare_commit(checkpoint_id), own]

    def close(self) -> None:
        name = f"{self.attempt}-{self.subtask}"
        with open(os.path.join(self.directory, f"created-{name}.bin"), "wb") as f:
            self.created.tofile(f)
        with open(os.path.join(self.directory, f"batches-{name}.bin"), "wb") as f:
            self.batches.tofile(f)
        self.inner.close()


class LatencyCommitter:
    """Commits the inner sink's committables, then logs when the records of each
    LatencyCommittable became visible: `subtask attempt checkpoint start end wall_ns`."""

    def __init__(self, inner: Any, directory: str) -> None:
        self.inner, self.directory = inner, directory

    def commit(self, committables: list[Any]) -> None:
        own = [c for c in committables if isinstance(c, LatencyCommittable)]
        self.inner.commit([c for c in committables if not isinstance(c, LatencyCommittable)])
        visible = time.time_ns()
        for c in own:
            path = os.path.join(self.directory, f"commits-{c.attempt}-{c.subtask}.txt")
            with open(path, "a") as f:
                f.write(f"{c.subtask} {c.attempt} {c.checkpoint_id} {c.start} {c.end} {visible}\n")


class LatencySink:
    """Wraps a sink (bench/jobs.py's CountSink) whose records end with their creation time."""

    def __init__(self, inner: Any, directory: str) -> None:
        self.inner, self.directory = inner, directory

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> LatencyWriter:
        os.makedirs(self.directory, exist_ok=True)
        inner = self.inner.create_writer(subtask_index, parallelism, attempt)
        return LatencyWriter(inner, self.directory, subtask_index, attempt)

    def create_committer(self) -> LatencyCommitter:
        return LatencyCommitter(self.inner.create_committer(), self.directory)

    def recover(self, subtask_index, parallelism, attempt, restored) -> None:
        inner = [c for c in restored if not isinstance(c, LatencyCommittable)]
        self.inner.recover(subtask_index, parallelism, attempt, inner)


# reading the logs (the benchmark's process) ----------------------------------------------------
@dataclass
class LatencyLogs:
    """One job's records: creation time, processed time (ns) and, for committed ones, the
    time they became visible."""

    created: list[int]
    processed: list[int]
    visible: list[tuple[int, int]]  # (created, visible) of committed records
    #: the source's polls that returned events, and those events (None: not logged)
    polls: tuple[int, int] | None = None


def read_latency_logs(directory: str, attempt: int = 0) -> LatencyLogs:
    created_all: list[int] = []
    processed_all: list[int] = []
    visible: list[tuple[int, int]] = []
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    for name in names:
        if not name.startswith(f"created-{attempt}-"):
            continue
        subtask = name.removeprefix(f"created-{attempt}-").removesuffix(".bin")
        created = array("q")
        with open(os.path.join(directory, name), "rb") as f:
            created.frombytes(f.read())
        batches = array("q")
        with open(os.path.join(directory, f"batches-{attempt}-{subtask}.bin"), "rb") as f:
            batches.frombytes(f.read())
        processed: list[int] = []
        for i in range(0, len(batches), 2):
            processed.extend([batches[i]] * (batches[i + 1] - len(processed)))
        created_all.extend(created)
        processed_all.extend(processed)
        commits = os.path.join(directory, f"commits-{attempt}-{subtask}.txt")
        if os.path.exists(commits):
            with open(commits) as f:
                for line in f:
                    _s, _a, _cid, start, end, at = map(int, line.split())
                    visible.extend((c, at) for c in created[start:end])
    polls = None
    poll_logs = [name for name in names if name.startswith("polls-")]
    if poll_logs:
        totals = [0, 0]
        for name in poll_logs:
            with open(os.path.join(directory, name)) as f:
                for i, value in enumerate(f.read().split()):
                    totals[i] += int(value)
        polls = (totals[0], totals[1])
    return LatencyLogs(created_all, processed_all, visible, polls)
