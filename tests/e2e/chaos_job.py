"""The job script `tidegate chaos` runs in tests/e2e/test_chaos.py, unchanged by the harness:
generated numbers keyed by `value % KEYS` through a running count per key into FileSinks, one
`key,count` line per record (the same lines in every run, whatever order the two source
readers' records arrive in). `chaos_job.py VARIANT [COUNT RATE]`:

- `counts`: the count in keyed ValueState into our FileSink: exactly once under any fault;
- `planted`: three sinks, the first as in `counts`, then two planted bugs:
  1. a sink that commits in its pre-commit, before the checkpoint completed (the counts of
     ValueState): a checkpoint that then fails leaves records committed that the restarted job
     writes again (duplicated);
  2. a count kept in a plain Python attribute (a dict on the function object) instead of
     managed state, into our FileSink: a restore resets it, so after a failure the counts start
     again from 1 (low counts duplicated, high ones lost).
"""

from __future__ import annotations

import sys

from tidegate.common import Encoder, WatermarkStrategy
from tidegate.connectors.file_sink import FileSinkWriter
from tidegate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.state import ValueStateDescriptor

KEYS = 16
#: where the script says its output and checkpoints go: not writable, so the job runs only if
#: the harness moved them
NOWHERE = "/nonexistent/moved-by-the-harness"


class StateCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value % KEYS},{count}"


class AttributeCount(KeyedProcessFunction):
    """The bug: the counts live in the function object, which no checkpoint captures."""

    def open(self, runtime_context):
        self.counts = {}

    def process_element(self, value, ctx):
        key = value % KEYS
        self.counts[key] = self.counts.get(key, 0) + 1
        yield f"{key},{self.counts[key]}"


class EagerCommitFileSink(FileSink):
    """The bug: its writer commits what it pre-commits at once, not when the checkpoint
    completed."""

    def create_writer(self, subtask_index, parallelism, attempt):
        return EagerCommitWriter(self, subtask_index, attempt, self.create_committer())


class EagerCommitWriter(FileSinkWriter):
    def __init__(self, sink, subtask_index, attempt, committer):
        super().__init__(sink, subtask_index, attempt)
        self.committer = committer

    def prepare_commit(self, checkpoint_id):
        committables = super().prepare_commit(checkpoint_id)
        self.committer.commit(committables)
        return committables


def file_sink() -> FileSink:
    return (
        FileSink.for_row_format(NOWHERE, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )


def main(variant: str, count: int, rate: float) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage_dir(NOWHERE)
    source = DataGeneratorSource(lambda i: i, count=count, records_per_second=rate)
    keyed = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "numbers")
        .uid("numbers")
        .key_by(lambda value: value % KEYS)
    )
    counts = keyed.process(StateCount()).uid("count")
    counts.sink_to(file_sink()).uid("sink")
    if variant == "planted":
        sink = file_sink()  # the builder builds a FileSink: the same settings, the buggy class
        eager = EagerCommitFileSink(**{f: getattr(sink, f) for f in sink.__dataclass_fields__})
        counts.sink_to(eager).uid("eager-sink")
        keyed.process(AttributeCount()).uid("attribute-count").sink_to(file_sink()).uid(
            "attribute-sink"
        )
    env.execute(f"chaos test job ({variant})")


if __name__ == "__main__":
    variant = sys.argv[1]
    if variant not in ("counts", "planted"):
        sys.exit(f"unknown variant {variant!r}: counts or planted")
    count, rate = (int(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (6000, 1500)
    main(variant, count, rate)
