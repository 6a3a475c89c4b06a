"""Per-record cost of each stage of the keyed count, measured in isolation on one core with
tidegate's own classes (no processes, no threads): where the ~µs per record goes.

    .venv/bin/python bench/micro.py [--batch 512] [--records 2000000] [--json out.json]

Each stage processes the same batches (of --batch records, the default frame size) as in a
job; the figure is ns per record, median of 5 rounds. Stages, in pipeline order:

  source      NumberSequenceReader.poll_batch
  map         MapOperator.process_batch with to_pair (x -> (x % 10000, 1))
  route       KeyGroupStreamPartitioner(first).bind(2, 128): key -> channel buffers
  pickle      frames.encode_frame((channel, batch)) + pickle.loads (one remote frame)
  gate        InputGate.put_data + get (one frame through a subtask's inbox)
  reduce      KeyedReduceOperator.process_batch (rolling count per key, 10k keys)
  reduce cow  the same, 1M keys, right after a snapshot (every key's first update after a
              checkpoint takes the state backend's copy-on-write path)
  reduce 1M   the same, 1M keys, no snapshot taken yet
  file sink   FileSinkWriter.write_batch of the reduce output (simple string encoder)
  count sink  CountWriter.write_batch (bench/jobs.py)

and two references on the same batches:

  floor       the keyed count's unavoidable work with no engine around it, in one fused loop:
              the job's user functions (to_pair, the key selector on both sides of the
              shuffle, add_counts), one pickle round trip of the batch (the shuffle between
              processes) and a dict of counts. What a record-at-a-time engine that calls
              Python functions per record cannot go below, whatever its own loops cost.
  bare loop   bench/measure.py's baseline (tuple, dict count of 10k keys, append), per batch

Times are CPU time of the measuring thread (`time.thread_time`), so other processes on a
shared machine slow the figures less than wall-clock timing would (caches are still shared).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.jobs import CountWriter, add_counts, first, to_pair
from bench.measure import bare_keyed_count
from tidegate.common import Encoder
from tidegate.connectors.file_sink import BucketAssigner, FileSink
from tidegate.connectors.number_seq import NumberSequenceReader, NumberSequenceSplit
from tidegate.runtime.frames import encode_frame
from tidegate.runtime.gate import InputGate
from tidegate.runtime.operators import KeyedReduceOperator, MapOperator, OperatorRuntime
from tidegate.runtime.partitioners import KeyGroupStreamPartitioner


class _Null:
    def process_batch(self, records: list) -> None:
        pass


class _Keep:
    def __init__(self) -> None:
        self.last: list = []

    def process_batch(self, records: list) -> None:
        self.last = records


def _time(fn, batches: list, rounds: int = 5) -> float:
    n = sum(len(b) for b in batches)
    results = []
    for _ in range(rounds):
        started = time.thread_time()
        for b in batches:
            fn(b)
        results.append((time.thread_time() - started) / n * 1e9)
    return statistics.median(results)


def measure(batch: int, records: int) -> dict[str, float]:
    numbers = [list(range(i, min(i + batch, records))) for i in range(0, records, batch)]
    pairs = [[to_pair(x, 10_000) for x in b] for b in numbers]
    out: dict[str, float] = {}

    def source(_b):
        reader = source.reader
        if reader.poll_batch(batch) is None:
            source.reader = NumberSequenceReader([NumberSequenceSplit("0", 0, records - 1)])

    source.reader = NumberSequenceReader([NumberSequenceSplit("0", 0, records - 1)])
    out["source"] = _time(source, numbers)

    map_op = MapOperator(None, lambda x: to_pair(x, 10_000), None, uid="map", name="map")
    map_op.outputs = [_Null()]
    out["map"] = _time(map_op.process_batch, numbers)

    route = KeyGroupStreamPartitioner(first).bind(2, 128)

    def do_route(b):
        route(b, [[], []])

    out["route"] = _time(do_route, pairs)

    out["pickle"] = _time(lambda b: pickle.loads(encode_frame((0, b), True)[0]), pairs)

    gate = InputGate(64)

    def through_gate(b):
        gate.put_data((0, b))
        gate.get(0)

    out["gate"] = _time(through_gate, pairs)

    reduce_op = KeyedReduceOperator(None, add_counts, first, uid="count", name="count")
    reduce_op.initialize_state(OperatorRuntime(0, 1, 128, 0), None)
    keep = _Keep()
    reduce_op.outputs = [keep]
    reduce_op.open()
    out["reduce"] = _time(reduce_op.process_batch, pairs)

    big = [[to_pair(x, 1_000_000) for x in b] for b in numbers]

    def big_reduce(after_snapshot: bool):
        op = KeyedReduceOperator(None, add_counts, first, uid="big", name="big")
        op.initialize_state(OperatorRuntime(0, 1, 128, 0), None)
        op.outputs = [_Null()]
        op.open()
        for b in big:  # fill the state: every key present
            op.process_batch(b)

        def run(b):
            if b is big[0] and after_snapshot:
                op.keyed_backend.snapshot()  # what a checkpoint's synchronous phase does
            op.process_batch(b)

        return run

    out["reduce cow"] = _time(big_reduce(True), big, rounds=3)
    out["reduce 1M"] = _time(big_reduce(False), big, rounds=3)
    reduced = []
    for b in pairs[: max(1, len(pairs) // 4)]:
        reduce_op.process_batch(b)
        reduced.append(keep.last)

    with tempfile.TemporaryDirectory() as d:
        sink = (
            FileSink.for_row_format(d, Encoder.simple_string_encoder())
            .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
            .build()
        )
        writer = sink.create_writer(0, 1, 0)
        out["file sink"] = _time(writer.write_batch, reduced)
        writer.close()
    out["count sink"] = _time(CountWriter(0, 0).write_batch, reduced)
    out["floor"] = _time(_floor(), numbers)
    out["bare loop"] = _time(_bare(), numbers)
    return out


def _floor():
    counts: dict = {}

    def floor(b: list) -> None:
        # sender: map, key selector (routing); the shuffle; receiver: key selector, reduce
        pairs = [to_pair(x, 10_000) for x in b]
        for p in pairs:
            first(p)
        received = pickle.loads(pickle.dumps(pairs, protocol=5))
        get = counts.get
        for p in received:
            key = first(p)
            current = get(key)
            counts[key] = p if current is None else add_counts(current, p)

    return floor


def _bare():
    counts: dict = {}
    return lambda b: bare_keyed_count(b, counts)  # bench/measure.py's, over the job's numbers


#: stages that are not a part of the job's per-record path (alternatives and references)
#: (W1, bench/compare.py, ends in the count sink; the file sink is shown for comparison)
_NOT_IN_PATH = ("reduce cow", "reduce 1M", "file sink", "floor", "bare loop")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    stages = measure(args.batch, args.records)
    total = sum(v for k, v in stages.items() if k not in _NOT_IN_PATH)
    print(f"per-record cost, batches of {args.batch}, one core (CPU ns/record, median of 5)")
    for name, ns in stages.items():
        if name not in _NOT_IN_PATH or name in ("reduce cow", "reduce 1M", "file sink"):
            share = "" if name in _NOT_IN_PATH else f"{100 * ns / total:5.1f}%"
            print(f"  {name:12s} {ns:8.1f} ns  {share}")
    for name, ns in (
        ("total", total),
        ("floor", stages["floor"]),
        ("bare loop", stages["bare loop"]),
    ):
        print(f"  {name:12s} {ns:8.1f} ns  -> {1e9 / ns / 1e6:.2f} M records/s per core")
    print(
        f"  engine / floor {total / stages['floor']:.2f}x; floor / bare loop "
        f"{stages['floor'] / stages['bare loop']:.2f}x"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "ns_per_record": stages, "total_ns": total}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
