"""A job with keyed list and map state and operator (split and union) state, for the state
processor tests: its output lines say what state each record saw, so a test can compare the
state in a savepoint with the committed output record by record."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.environments import file_sink, job_environment
from tests.support.snapshots import stop_with_savepoint
from tidegate.datastream import (
    CheckpointedFunction,
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    MapFunction,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

PROBE_KEYS = 5


class ListMapProbe(KeyedProcessFunction):
    """Appends each value to list state `seen` and counts it in map state `by_rest` under
    `value % 3`; emits `key,value,position` (the position the value got in `seen`)."""

    def open(self, runtime_context) -> None:
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))
        self.by_rest = runtime_context.get_map_state(MapStateDescriptor("by_rest"))

    def process_element(self, value, ctx):
        position = len(self.seen.get())
        self.seen.add(value)
        rest = value % 3
        self.by_rest.put(rest, (self.by_rest.get(rest) or 0) + 1)
        yield f"{ctx.get_current_key()},{value},{position}"


#: processing-time timers of AllKindsProbe are due this far in the future (they never fire)
FAR_FUTURE_MS = 10**13


class AllKindsProbe(ListMapProbe):
    """ListMapProbe plus value state `count` (values seen) and a processing-time timer per
    value, due at FAR_FUTURE_MS + value: value, list and map state and timers, all derived
    from the values a key has seen."""

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_processing_time_timer(FAR_FUTURE_MS + value)
        yield from super().process_element(value, ctx)


class RecordOperatorState(MapFunction, CheckpointedFunction):
    """Keeps split list state `tags` and union list state `everyone` as restored, and writes
    what each subtask restored to `<report_dir>/restored-<subtask>.json`."""

    def __init__(self, report_dir: str) -> None:
        self.report_dir = report_dir

    def initialize_state(self, context) -> None:
        store = context.get_operator_state_store()
        self.tags = store.get_list_state(ListStateDescriptor("tags"))
        self.everyone = store.get_union_list_state(ListStateDescriptor("everyone"))
        self.restored = {"tags": self.tags.get(), "everyone": self.everyone.get()}

    def open(self, runtime_context) -> None:
        subtask = runtime_context.get_index_of_this_subtask()
        Path(self.report_dir, f"restored-{subtask}.json").write_text(json.dumps(self.restored))

    def snapshot_state(self, context) -> None:
        pass

    def map(self, value):
        return value


def probe_job(out: Path, checkpoints: Path, report_dir: Path, restore_path: str, runner: str):
    """numbers (rate-limited) -> tagger (operator state) -> key_by(v % 5) -> probe (list and
    map state) -> FileSink, parallelism 2, restored from `restore_path`."""
    env = job_environment(runner, checkpoints, restarts=3, restore_path=restore_path)
    source = DataGeneratorSource(lambda i: i, count=1_000_000, records_per_second=2_000)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    ds = ds.map(RecordOperatorState(str(report_dir))).uid("tagger")
    ds = ds.key_by(lambda v: v % PROBE_KEYS).process(ListMapProbe()).uid("probe")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def run_until_savepoint(env, savepoints: Path, checkpoints: int = 2) -> str:
    """Start the job, let it complete `checkpoints` checkpoints, stop it with a savepoint."""
    client = env.execute_async("state processor probe")
    return stop_with_savepoint(client, savepoints, after_checkpoints=checkpoints)


def incremental_probe_job(
    out: Path, checkpoints: Path, local_dir: Path, restore_path: str | None, drop_all: bool
):
    """numbers (rate-limited) -> tagger -> [drop everything if `drop_all`] -> key_by(v % 5) ->
    AllKindsProbe -> FileSink, parallelism 2, on incremental RocksDB, keeping its checkpoints
    when cancelled. `drop_all`: the probe's state stays exactly as restored."""
    env = job_environment("spark", checkpoints, restarts=3, restore_path=restore_path)
    env.set_state_backend(
        EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True, local_dir=str(local_dir))
    )
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    source = DataGeneratorSource(lambda i: i, count=1_000_000, records_per_second=2_000)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    ds = ds.map(RecordOperatorState(str(out.parent))).uid("tagger")
    if drop_all:
        ds = ds.filter(lambda v: False)
    ds = ds.key_by(lambda v: v % PROBE_KEYS).process(AllKindsProbe()).uid("probe")
    ds.sink_to(file_sink(out)).uid("sink")
    return env
