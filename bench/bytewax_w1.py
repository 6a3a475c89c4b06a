"""W1 on Bytewax, for `bench/compare.py` (run by the bench venv's Python, which has Bytewax and
not tidegate): N numbers -> key `i % keys` -> running count per key -> `(key, count)` per
event -> a counting sink, one worker, recovery on (sqlite partitions in a temp directory),
an epoch (Bytewax's checkpoint) every second. Prints one JSON line.

The sink counts what it is given and, at every snapshot (the end of each epoch), writes the
count since the previous one to a file, as tidegate's CountSink's committer does at each
completed checkpoint; Bytewax has no separate commit step, so this is the closest it offers.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

STARTED = time.time()  # before Bytewax's imports

import bytewax.operators as op  # noqa: E402
from bytewax._bytewax import cli_main, init_db_dir  # noqa: E402
from bytewax.dataflow import Dataflow  # noqa: E402
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition  # noqa: E402
from bytewax.recovery import RecoveryConfig  # noqa: E402
from bytewax.testing import TestingSource  # noqa: E402


class CountPartition(StatefulSinkPartition):
    def __init__(self, directory: str, committed: int, timings: dict[str, Any]) -> None:
        self.directory, self.committed, self.timings = directory, committed, timings
        self.uncommitted = 0
        self.snapshots = 0

    def write_batch(self, values: list[Any]) -> None:
        now = time.time()
        self.timings.setdefault("first", now)
        self.timings["last"] = now
        self.uncommitted += len(values)

    def snapshot(self) -> int:
        self.snapshots += 1
        self.committed += self.uncommitted
        path = os.path.join(self.directory, f"count-{self.snapshots}")
        with open(f"{path}.tmp", "w") as f:
            f.write(str(self.uncommitted))
        os.replace(f"{path}.tmp", path)
        self.uncommitted = 0
        return self.committed


class CountSink(FixedPartitionedSink):
    def __init__(self, directory: str, timings: dict[str, Any]) -> None:
        self.directory, self.timings = directory, timings

    def list_parts(self) -> list[str]:
        return ["0"]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> CountPartition:
        return CountPartition(self.directory, resume_state or 0, self.timings)


def count(state: int | None, _value: int) -> tuple[int, int]:
    total = (state or 0) + 1
    return total, total


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    args = p.parse_args()
    keys = args.keys
    work = tempfile.mkdtemp(prefix="bytewax-w1-")
    out, db = os.path.join(work, "out"), Path(work, "recovery")
    os.makedirs(out)
    db.mkdir()
    init_db_dir(db, 1)
    timings: dict[str, Any] = {}
    flow = Dataflow("w1")
    numbers = op.input("numbers", flow, TestingSource(range(args.records), batch_size=512))
    keyed = op.key_on("key", numbers, lambda i: str(i % keys))
    counts = op.stateful_map("count", keyed, count)
    op.output("sink", counts, CountSink(out, timings))
    run_started = time.time()
    cli_main(flow, epoch_interval=timedelta(seconds=1), recovery_config=RecoveryConfig(db))
    ended = time.time()
    cpu = os.times()
    committed = sum(int(Path(out, name).read_text()) for name in os.listdir(out))
    print(
        json.dumps(
            {
                "imported": STARTED,
                "run_started": run_started,
                "ended": ended,
                "cpu_s": cpu.user + cpu.system,
                "first_record": timings.get("first"),
                "last_record": timings.get("last"),
                "committed_records": committed,
                "exactly_once_ok": committed == args.records,
            }
        )
    )


if __name__ == "__main__":
    main()
