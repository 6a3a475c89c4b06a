"""A job script for `tidegate check-restore` and `tidegate rewrite-savepoint` tests, with
switches that change it the ways a user changes a job between a savepoint and a restore.

    numbers (uid numbers) -> key_by -> running count (uid count; value state "count")
        -> [tagger (uid tagger; operator list state "tagged")] -> FileSink (uid sink, 2PC)

Run as a script (what check-restore runs) it submits the job with `env.execute()`; tests import
`build_job` to produce real savepoints with the local runner.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.environments import file_sink, job_environment
from tests.support.references import NUM_KEYS
from tidegate.common import RestartStrategies
from tidegate.datastream import (
    CheckpointedFunction,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.state.descriptors import ListStateDescriptor, ValueStateDescriptor


class Count(KeyedProcessFunction):
    """The running count per key, in value state "count" (or, with kind="list", a list state
    under the same name: a changed state kind)."""

    def __init__(self, kind: str = "value", fail_open: bool = False) -> None:
        self.kind = kind
        self.fail_open = fail_open

    def open(self, runtime_context) -> None:
        if self.fail_open:
            raise ConnectionError("cannot reach the lookup service")
        if self.kind == "list":
            self.count = runtime_context.get_list_state(ListStateDescriptor("count"))
        else:
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{value % NUM_KEYS},{value},{c}"


class Tagger(MapFunction, CheckpointedFunction):
    """Passes records on; keeps how many it saw in operator list state "tagged"."""

    def initialize_state(self, context) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("tagged")
        )
        self.seen = sum(self.state.get())

    def snapshot_state(self, context) -> None:
        self.state.update([self.seen])

    def map(self, value):
        self.seen += 1
        return value


def build_job(
    out: str,
    checkpoints: str,
    *,
    runner: str = "local",
    n: int = 2_000,
    rate: float | None = 2_000,
    parallelism: int = 2,
    max_parallelism: int | None = 128,
    kind: str = "value",
    tagger: bool = True,
    fail_open: bool = False,
    count_uid: str = "count",
    config: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    env = job_environment(
        runner,
        checkpoints,
        parallelism=parallelism,
        restarts=None,
        config=config,
        max_parallelism=max_parallelism,
    )
    env.set_restart_strategy(RestartStrategies.no_restart())
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    ds = ds.key_by(lambda v: v % NUM_KEYS).process(Count(kind, fail_open)).uid(count_uid)
    if tagger:
        ds = ds.map(Tagger()).uid("tagger")
    ds.sink_to(file_sink(out)).uid("sink")
    return env


def _main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/tidegate-restore-check-out")
    parser.add_argument("--chk", default="/tmp/tidegate-restore-check-chk")
    parser.add_argument("--max-parallelism", type=int, default=128)
    parser.add_argument("--no-max-parallelism", action="store_true")
    parser.add_argument("--kind", default="value")
    parser.add_argument("--no-tagger", action="store_true")
    parser.add_argument("--fail-open", action="store_true")
    parser.add_argument("--count-uid", default="count")
    args = parser.parse_args()
    env = build_job(
        args.out,
        args.chk,
        max_parallelism=None if args.no_max_parallelism else args.max_parallelism,
        kind=args.kind,
        tagger=not args.no_tagger,
        fail_open=args.fail_open,
        count_uid=args.count_uid,
    )
    env.execute("restore check")


if __name__ == "__main__":
    _main()
