"""The keyed running count most end-to-end tests run, with the failures they inject into it
(exceptions at planned records or places, kill -9 of slots, damaged state files); its output
is compared with tests.support.references.check_exactly_once."""

from __future__ import annotations

import glob
import os
import signal
import threading
import time
from collections.abc import Collection
from pathlib import Path

from tests.support.environments import file_sink, job_environment
from tests.support.references import NUM_KEYS
from tidegate.common import Row, Types
from tidegate.datastream import (
    CheckpointedFunction,
    CheckpointingMode,
    CheckpointListener,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import ValueStateDescriptor


class InjectedFailure(Exception):
    pass


class FailAtValues(MapFunction):
    """Raises once per job attempt: in attempt a, on the record `fail_at[a]`."""

    def __init__(self, fail_at: dict[int, int]) -> None:
        self.fail_at = fail_at

    def open(self, runtime_context) -> None:
        self.target = self.fail_at.get(runtime_context.get_attempt_number())

    def map(self, value):
        if value == self.target:
            raise InjectedFailure(f"injected failure at record {value}")
        return value


FAILURE_SCHEDULE = ("map", "snapshot", "restore", "kill", "close")


class ScheduledFailures(MapFunction, CheckpointedFunction, CheckpointListener):
    """Fails once in each place of FAILURE_SCHEDULE, in that order, one after another: in
    `map` (the first record after a checkpoint completed), in `snapshot_state`, in
    `initialize_state` of a restore, then a `kill -9` (by `kill_when_scheduled`), then in
    `close`. A failure fires only once the previous one did; each leaves a marker file in
    `markers` (created exclusively, so exactly one subtask fires it)."""

    def __init__(self, markers: str) -> None:
        self.markers = markers

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def _fire(self, name: str) -> None:
        before = FAILURE_SCHEDULE[FAILURE_SCHEDULE.index(name) - 1] if name != "map" else None
        if before is not None and not os.path.exists(f"{self.markers}/{before}"):
            return
        if name == "close" and self.attempt < int(Path(self.markers, "kill").read_text()):
            return  # a slot of the killed attempt, closed late (its teardown may lag)
        if name == "snapshot" and self.attempt <= self._fired_in(before):
            # a subtask of the attempt the map failure ends, still running: its decline would
            # be ignored (the coordinator drops a dying attempt's), no restart would follow
            return
        try:
            fd = os.open(f"{self.markers}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(getattr(self, "attempt", "")).encode())  # none yet in a restore
        os.close(fd)
        raise InjectedFailure(f"scheduled failure in {name}")

    def _fired_in(self, name: str) -> int:
        """The attempt failure `name` fired in (its marker being written: as if this one)."""
        text = Path(self.markers, name).read_text()
        return int(text) if text else self.attempt

    def initialize_state(self, context) -> None:
        if context.is_restored():
            self._fire("restore")

    def snapshot_state(self, context) -> None:
        self._fire("snapshot")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        with open(f"{self.markers}/checkpointed", "a"):
            pass

    def map(self, value):
        if os.path.exists(f"{self.markers}/checkpointed"):
            self._fire("map")
        return value

    def close(self) -> None:
        self._fire("close")


def kill_when_scheduled(client, markers: str) -> threading.Thread:
    """The `kill` step of ScheduledFailures: once the restore failure fired and the next
    attempt completed a checkpoint, SIGKILL a slot; the marker is written after the restart,
    so the `close` failure cannot fire while the killed attempt is torn down."""

    def run() -> None:
        jm = client.jobmaster
        while not jm.done.is_set() and not os.path.exists(f"{markers}/restore"):
            time.sleep(0.02)
        restarts = jm.stats.restarts
        while not jm.done.is_set() and jm.stats.restarts == restarts:
            time.sleep(0.02)
        target = jm.stats.completed_checkpoints + 1
        while not jm.done.is_set():
            if jm.stats.completed_checkpoints >= target and jm.status.name == "RUNNING":
                break
            time.sleep(0.02)
        if jm.done.is_set():
            return
        restarts = jm.stats.restarts
        _slot, pid = sorted(jm.slot_pids.items())[0]
        os.kill(pid, signal.SIGKILL)
        while not jm.done.is_set() and jm.stats.restarts == restarts:
            time.sleep(0.02)
        with open(f"{markers}/kill", "w") as f:
            f.write(str(jm.attempt))  # the attempt after the kill: close fails from it on

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class AlwaysBroken(MapFunction):
    def map(self, value):
        raise ValueError(f"always broken at {value}")


class SlowMap(MapFunction):
    """A deliberately slow operator before the sink: backpressure on its input channels."""

    def __init__(self, seconds_per_record: float, slow_records: int | None = None) -> None:
        self.seconds = seconds_per_record
        self.slow_records = slow_records  # per subtask and attempt; None: all

    def open(self, runtime_context) -> None:
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.slow_records is None or self.seen <= self.slow_records:
            time.sleep(self.seconds)
        return value


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{value % NUM_KEYS},{value},{c}"


class TypedRunningCount(RunningCount):
    """RunningCount of `Row(key=..., value=...)` records (typed_records=True): reads the fields
    by name, which only the declared ROW_NAMED type gave the positional Rows upstream."""

    def process_element(self, row, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{row.key},{row.value},{c}"


KEYED_ROW = Types.ROW_NAMED(["key", "value"], [Types.INT(), Types.LONG()])


def count_job(
    out: Path,
    checkpoints: Path,
    *,
    runner: str,
    n: int,
    parallelism: int = 2,
    rate: float | None = None,
    interval_ms: int = 200,
    fail_at: dict[int, int] | None = None,
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE,
    restarts: int = 10,
    restore_path: str | None = None,
    slow_sink_s: float = 0.0,
    slow_records: int | None = None,
    failure_markers: str | None = None,
    count: RunningCount | None = None,
    configuration: dict[str, str] | None = None,
    typed_records: bool = False,
) -> StreamExecutionEnvironment:
    """numbers 0..n-1 (`rate`/s; None: unlimited) -> [failures] -> key_by(v % NUM_KEYS) ->
    running count (uid `count`) -> [slow map] -> FileSink; its committed output is compared
    with references.check_exactly_once. With `typed_records`, the numbers become positional
    `Row(v % NUM_KEYS, v)` declared KEYED_ROW before the key_by, and the count emits declared
    STRINGs: both edges carry typed frames."""
    config = {**(configuration or {}), "web.checkpoints.history": "10000"}  # every checkpoint
    env = job_environment(
        runner,
        checkpoints,
        parallelism=parallelism,
        interval_ms=interval_ms,
        mode=mode,
        restarts=restarts,
        restore_path=restore_path,
        config=config,
    )
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    if failure_markers:
        ds = ds.map(ScheduledFailures(failure_markers)).uid("scheduled-failures")
    if typed_records:
        rows = ds.map(lambda v: Row(v % NUM_KEYS, v), output_type=KEYED_ROW).uid("rows")
        ds = rows.key_by(lambda row: row[0], key_type=Types.INT())  # as emitted: positional
        ds = ds.process(count or TypedRunningCount(), Types.STRING()).uid("count")
    else:
        ds = ds.key_by(lambda v: v % NUM_KEYS).process(count or RunningCount()).uid("count")
    if slow_sink_s:
        ds = ds.map(SlowMap(slow_sink_s, slow_records)).uid("slow")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def kill_slots(client, kills: int, after_checkpoints: int = 1) -> threading.Thread:
    """SIGKILL a slot's worker process `kills` times, each after `after_checkpoints` new
    completed checkpoints of a running attempt. Records what it did in `thread.killed`."""

    def run() -> None:
        jm = client.jobmaster
        for k in range(kills):
            target = jm.stats.completed_checkpoints + after_checkpoints
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not jm.done.is_set():
                if jm.stats.completed_checkpoints >= target and jm.status.name == "RUNNING":
                    break
                time.sleep(0.05)
            if jm.done.is_set():
                return
            pids = sorted(jm.slot_pids.items())
            slot, pid = pids[k % len(pids)]
            os.kill(pid, signal.SIGKILL)
            thread.killed.append((slot, pid))
            restarts = jm.stats.restarts
            while jm.stats.restarts == restarts and not jm.done.is_set():
                time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.killed = []
    thread.start()
    return thread


def check_restarts(client, *, kills: int, exceptions: Collection[int] = (0,)) -> None:
    """The job restarted once per failure and failed only by the injected faults: each recorded
    failure is an InjectedFailure or one of the `kills` slots killed (or stopped), and the number
    of InjectedFailures that fired is one of `exceptions`. A fault may land in an attempt another
    one is already ending, which then records one failure for both: a schedule of exceptions
    per attempt can lose one to a kill, and a kill can be absorbed by an exception."""
    failures = client.jobmaster.stats.timeline.failures()
    fired = sum("InjectedFailure" in f.message + f.detail for f in failures)
    summary = [(f.attempt, f.name, f.message[:120]) for f in failures]
    assert client.jobmaster.stats.restarts == len(failures), summary
    assert 0 <= len(failures) - fired <= kills, summary  # the others: the kills
    assert fired in exceptions, (fired, summary)


class CountThenFailAfterCheckpoint(RunningCount):
    """The running count; in the first attempt, when its second checkpoint completed, it flips
    a byte of this subtask's state file of that checkpoint (if `damage`: storage corrupting a
    file) and fails before the sink chained after it is notified, so the sink commits nothing
    of that checkpoint (integrity tests: falling back past it stays exactly-once)."""

    def __init__(self, checkpoints: str, damage: bool) -> None:
        self.checkpoints = checkpoints
        self.damage = damage

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.first_attempt = runtime_context.get_attempt_number() == 0
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.completed = 0

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed += 1
        if not self.first_attempt or self.completed < 2:
            return
        if self.damage:
            pattern = f"{self.checkpoints}/*/chk-{checkpoint_id}/count-{self.subtask}-*"
            for path in glob.glob(pattern):
                flip_a_byte(path)
        raise InjectedFailure(f"injected failure after checkpoint {checkpoint_id}")


def flip_a_byte(path: str) -> None:
    """Flip one bit in the middle of a file, as a storage fault would."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x01]))
