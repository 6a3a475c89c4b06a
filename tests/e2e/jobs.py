"""Jobs and checks shared by the end-to-end tests: a keyed running count with injected
failures, and an exact comparison of its committed output with a reference computation."""

from __future__ import annotations

import collections
import glob
import os
import signal
import threading
import time
from pathlib import Path

from tidegate.common import Configuration, Encoder, RestartStrategies
from tidegate.connectors.number_seq import split_range
from tidegate.datastream import (
    CheckpointedFunction,
    CheckpointingMode,
    CheckpointListener,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.state import ValueStateDescriptor

NUM_KEYS = 13


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
        try:
            os.close(os.open(f"{self.markers}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        raise InjectedFailure(f"scheduled failure in {name}")

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
) -> StreamExecutionEnvironment:
    conf = Configuration().set_string("execution.runner", runner)
    conf.add_all(configuration or {})
    conf.set_integer("web.checkpoints.history", 10_000)  # tests inspect every checkpoint
    if restore_path:
        conf.set_string("execution.state-recovery.path", restore_path)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(interval_ms, mode)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(checkpoints))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    if failure_markers:
        ds = ds.map(ScheduledFailures(failure_markers)).uid("scheduled-failures")
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(count or RunningCount()).uid("count")
    if slow_sink_s:
        ds = ds.map(SlowMap(slow_sink_s, slow_records)).uid("slow")
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    ds.sink_to(sink).uid("sink")
    return env


def committed_lines(out: Path) -> list[str]:
    """Lines of committed (visible) part files; in-progress files are hidden (dot-prefixed)."""
    lines = []
    for path in glob.glob(f"{out}/**/*", recursive=True):
        if os.path.isfile(path) and not os.path.basename(path).startswith("."):
            with open(path) as f:
                lines.extend(line.rstrip("\n") for line in f)
    return lines


def check_exactly_once(lines: list[str], n: int, parallelism: int) -> None:
    """Committed output == the reference, record for record.

    Reference: every value 0..n-1 appears exactly once with its key; for each key the counts
    are exactly 1..n_k (each state update happened once); and the records a source subtask
    emitted for one key were counted in the order it emitted them (channels are FIFO).
    """
    by_key: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for line in lines:
        key, value, count = map(int, line.split(","))
        assert key == value % NUM_KEYS, line
        by_key[key].append((value, count))
    values = sorted(v for pairs in by_key.values() for v, _ in pairs)
    duplicated = len(values) - len(set(values))
    lost = n - len(set(values))
    assert (lost, duplicated) == (0, 0), f"{lost} lost, {duplicated} duplicated"
    assert values == list(range(n))
    splits = split_range(0, n - 1, parallelism)  # the source's splits (datagen plans these)
    for key, pairs in by_key.items():
        counts = sorted(c for _, c in pairs)
        assert counts == list(range(1, len(pairs) + 1)), f"key {key}: counts {counts[:20]}..."
        for low, high in splits:
            own = sorted((v, c) for v, c in pairs if low <= v <= high)
            assert [c for _, c in own] == sorted(c for _, c in own), f"key {key} out of order"


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
