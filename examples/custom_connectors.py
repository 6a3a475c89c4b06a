"""A source and an exactly-once sink written against `tidegate.connectors.base`.

`ShardedLogSource` reads records from append-only "shards" (here: in-memory lists standing in
for the partitions of a log); a split is one shard plus the offset of the next record, so a
restore resumes exactly after the last record emitted before the checkpoint.

`JsonDirectorySink` writes each checkpoint's records of each subtask into one JSON-lines file,
by two-phase commit: records are buffered, written to a hidden temporary file when the
checkpoint is taken (pre-commit), and renamed to their final name only when the checkpoint
completed (commit). A plain `glob("*.jsonl")` therefore only ever sees exactly-once output.

    .venv/bin/python examples/custom_connectors.py [--runner local|spark] [--kill]

See docs/guide.md, "Writing a source or a sink".
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from tidegate.common import Configuration, RestartStrategies
from tidegate.connectors.base import Boundedness, writer_subtask
from tidegate.datastream import StreamExecutionEnvironment


# --- a source ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardSplit:
    """Shard `shard` from record `offset` on. Immutable: the reader replaces it as it reads."""

    shard: str
    offset: int = 0


class ShardedLogSource:
    """A bounded source over named shards of records (`{shard name: [records]}`)."""

    boundedness = Boundedness.BOUNDED

    def __init__(self, shards: dict[str, list[Any]], poll_delay_s: float = 0.0) -> None:
        self.shards = shards
        self.sleep = poll_delay_s

    def create_splits(self, parallelism: int) -> list[ShardSplit]:
        # Called once, on a first run without restored state; the runtime gives split i to
        # subtask i % parallelism. Must be deterministic.
        return [ShardSplit(name) for name in sorted(self.shards)]

    def create_reader(self, splits, subtask_index: int, parallelism: int) -> ShardReader:
        # `splits` are fresh from create_splits, or restored from a checkpoint.
        return ShardReader(self.shards, splits, self.sleep)


class ShardReader:
    def __init__(self, shards: dict[str, list[Any]], splits: list[ShardSplit], sleep: float):
        self.shards = shards
        self.splits = [s for s in splits if s.offset < len(shards[s.shard])]
        self.sleep = sleep

    def poll_batch(self, max_records: int) -> list[Any] | None:
        if not self.splits:
            return None  # every split is exhausted: this reader is finished
        if self.sleep:
            time.sleep(self.sleep)  # stand-in for waiting on I/O; keep it short (< 50 ms)
        split = self.splits[0]
        records = self.shards[split.shard][split.offset : split.offset + max_records]
        offset = split.offset + len(records)
        if offset >= len(self.shards[split.shard]):
            self.splits.pop(0)
        else:
            self.splits[0] = replace(split, offset=offset)
        return records

    def snapshot_splits(self) -> list[ShardSplit]:
        # Called between two poll_batch calls, in the checkpoint's synchronous phase.
        return list(self.splits)

    def close(self) -> None:
        self.splits = []


# --- a two-phase-commit sink -------------------------------------------------------------------
@dataclass(frozen=True)
class PendingFile:
    temporary: str
    final: str


class JsonDirectorySink:
    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> JsonWriter:
        return JsonWriter(self.directory, subtask_index, attempt)

    def create_committer(self) -> JsonCommitter:
        return JsonCommitter()

    def recover(self, subtask_index: int, parallelism: int, attempt: int, restored: list) -> None:
        # Before the writer of a (re)started attempt exists: temporary files that the writer
        # indexes this subtask takes over (its own; after a rescale down, also vanished ones)
        # wrote in earlier attempts and that no restored committable names were pre-committed
        # for checkpoints that never completed. Their records will be produced again: delete.
        keep = {c.temporary for c in restored}
        pattern = re.compile(r"\.(\d+)-(\d+)-\d+\.jsonl\.tmp")
        for path in glob.glob(os.path.join(self.directory, ".*.tmp")):
            match = pattern.fullmatch(os.path.basename(path))
            if (
                match
                and writer_subtask(int(match[1]), parallelism) == subtask_index
                and int(match[2]) < attempt
                and path not in keep
            ):
                os.remove(path)


class JsonWriter:
    def __init__(self, directory: str, subtask: int, attempt: int) -> None:
        self.directory, self.subtask, self.attempt = directory, subtask, attempt
        self.buffer: list[Any] = []
        os.makedirs(directory, exist_ok=True)

    def write_batch(self, records: list[Any]) -> None:
        self.buffer.extend(records)

    def prepare_commit(self, checkpoint_id: int) -> list[PendingFile]:
        # Phase 1, in the checkpoint's synchronous phase: durable but invisible.
        if not self.buffer:
            return []
        name = f"{self.subtask}-{self.attempt}-{checkpoint_id}.jsonl"
        pending = PendingFile(
            os.path.join(self.directory, f".{name}.tmp"), os.path.join(self.directory, name)
        )
        with open(pending.temporary, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in self.buffer)
            f.flush()
            os.fsync(f.fileno())
        self.buffer = []
        return [pending]

    def close(self) -> None:
        self.buffer = []  # unsent records are replayed from the restored source position


class JsonCommitter:
    def commit(self, committables: list[PendingFile]) -> None:
        # Phase 2, after the checkpoint completed (and again after a restore): idempotent.
        for c in committables:
            if os.path.exists(c.temporary):
                os.replace(c.temporary, c.final)
            elif not os.path.exists(c.final):
                raise FileNotFoundError(f"{c.temporary} is gone and {c.final} does not exist")


# --- a job using them ----------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description="custom source and sink, checked end to end")
    parser.add_argument("--runner", choices=["spark", "local"], default="local")
    parser.add_argument("--kill", action="store_true", help="SIGKILL a worker mid-run")
    args = parser.parse_args()

    base = os.path.join(tempfile.gettempdir(), "tidegate-custom-connectors")
    shutil.rmtree(base, ignore_errors=True)
    shards = {f"shard-{s}": [{"shard": s, "seq": i} for i in range(10_000)] for s in range(4)}

    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", args.runner)
    )
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(base, "checkpoints"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 500))
    (
        env.from_source(ShardedLogSource(shards, poll_delay_s=0.05), None, "log")
        .uid("log")
        .map(lambda r: {**r, "square": r["seq"] ** 2})
        .uid("square")
        .sink_to(JsonDirectorySink(os.path.join(base, "out")))
        .uid("json-sink")
    )
    client = env.execute_async("custom connectors")
    if args.kill:
        jm = client.jobmaster

        def kill() -> None:
            while jm.stats.completed_checkpoints < 2 and not jm.done.is_set():
                time.sleep(0.05)
            if not jm.done.is_set():
                os.kill(max(jm.slot_pids.values()), signal.SIGKILL)
                print("killed a worker", flush=True)

        threading.Thread(target=kill, daemon=True).start()
    client.get_job_execution_result().result()

    got = []
    for path in glob.glob(os.path.join(base, "out", "*.jsonl")):
        with open(path, encoding="utf-8") as f:
            got.extend((r["shard"], r["seq"]) for r in map(json.loads, f))
    expected = sorted((s, i) for s in range(4) for i in range(10_000))
    ok = sorted(got) == expected
    print(
        f"{len(got)} records committed, expected {len(expected)}: {'OK' if ok else 'MISMATCH'}"
        f" ({client.jobmaster.stats.restarts} restarts)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
