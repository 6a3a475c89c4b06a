"""A keyed job whose output depends on state TTL, with a processing-time clock driven by its
records (so expiry is deterministic, also across a restore), and its reference computation."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.jobs import FailAtValues
from tests.support.environments import file_sink, job_environment
from tidegate.common import Time
from tidegate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import StateTtlConfig, ValueStateDescriptor
from tidegate.state.ttl import set_time_provider

NUM_KEYS = 13
TTL_MS = 2_000
BLOCK = 1_000  # records between two jumps of the clock
JUMP_MS = 5_000  # longer than the TTL: every key's state expires at a jump


def record_time(i: int) -> int:
    """The processing time (ms) the job's clock shows while record i is processed: 10 ms per
    record (a key's records are 130 ms apart, well within the TTL), plus a jump per block."""
    return 1_000_000 + 10 * i + JUMP_MS * (i // BLOCK)


class RecordClock:
    """The TTL clock of this process: the time of the record being processed."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class LastSeen(KeyedProcessFunction):
    """Emits `key,i,previous` where previous is the key's last record if it has not expired
    (TTL_MS after it was written), else `-`. Every cleanup strategy is on: each only removes
    entries that are expired at the clock's time, which never goes back in a subtask, so none
    can change the output."""

    def open(self, runtime_context) -> None:
        self.clock = RecordClock()
        self._previous_clock = set_time_provider(self.clock)
        ttl = (
            StateTtlConfig.new_builder(Time.milliseconds(TTL_MS))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .cleanup_full_snapshot()
            .cleanup_incrementally(10, True)
            .cleanup_in_rocksdb_compact_filter(100)
            .build()
        )
        descriptor = ValueStateDescriptor("last-seen")
        descriptor.enable_time_to_live(ttl)
        self.last = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        self.clock.now = record_time(value)
        previous = self.last.value()
        self.last.update(value)
        yield f"{value % NUM_KEYS},{value},{'-' if previous is None else previous}"

    def close(self) -> None:
        set_time_provider(self._previous_clock)


def ttl_job(
    out: Path, checkpoints: Path, *, n: int, rate: float, fail_at: dict[int, int]
) -> StreamExecutionEnvironment:
    """numbers (one source subtask, so each keyed subtask sees increasing times) -> failures ->
    key_by(i % 13) -> LastSeen (2 subtasks) -> exactly-once file sink."""
    env = job_environment("spark", checkpoints, restarts=5)
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(1)
    ds = ds.map(FailAtValues(fail_at)).uid("fail").set_parallelism(1)
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(LastSeen()).uid("last-seen")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def reference(n: int) -> list[str]:
    """What LastSeen emits for 0..n-1, computed directly."""
    last: dict[int, tuple[int, int]] = {}  # key -> (record, written at)
    out = []
    for i in range(n):
        key, now = i % NUM_KEYS, record_time(i)
        seen = last.get(key)
        previous = "-" if seen is None or seen[1] + TTL_MS <= now else str(seen[0])
        last[key] = (i, now)
        out.append(f"{key},{i},{previous}")
    return out
