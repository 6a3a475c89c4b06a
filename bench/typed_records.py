"""Typed records against pickled ones: what declaring a stream's type (`output_type=Types...`)
costs or saves, side by side in one run.

    .venv/bin/python bench/typed_records.py [--quick] [--repeats 3] [--seconds 10]

Four parts:

* codec: ns per record to encode + decode a 512-record batch, pickle vs the typed codec
  (common/record_codec.py), for the shapes PyFlink programs declare; one core, no processes.
* W1: the keyed count (bench/jobs.py: numbers -> map to `(key, 1)` -> key_by -> reduce ->
  counting two-phase-commit sink, 10k keys, 1 s checkpoints, heap state) on Spark, the pairs
  undeclared (pickled frames) and declared `Types.TUPLE([INT, LONG])` (typed frames; the
  edges inside a slot convert through the codec too), at p=1 and p=2, runs interleaved.
* Nexmark q5 (hot items) and q5-typed (its window results declared as three LONGs) at p=1.
* state: writing a heap snapshot (the asynchronous phase: `write_state_file`) of one value
  state of 200k keys, undeclared (pickled) vs declared (typed columns), for LONG and named-Row
  values; ms (best of 3) and bytes.

Figures: steady records/s (median of --repeats) and typed / untyped. Prints a table and
writes JSON (default bench/results/typed_records.json). Nothing asserts a limit.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import statistics
import sys
import tempfile
import time
import timeit
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import jobs
from bench.common import report_header, write_report
from bench.measure import run_job
from bench.nexmark.generator import NexmarkConfig
from bench.nexmark.measure import bare_rate, run_query_job
from bench.run import REPO, start_spark
from tidegate.common import Row, Types
from tidegate.common.record_codec import batch_codec
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.snapshot_format import write_state_file

BATCH = 512
W1_RATE = {1: 700_000, 2: 1_300_000}  # rough steady records/s: sizes runs to --seconds
Q5_RATE = 20_000


def _shapes() -> dict[str, tuple[list[Any], Any]]:
    """Shape name -> (a batch, its declared type)."""
    n = BATCH
    return {
        "(int, long) W1 pair": (
            [(i % 10_000, i) for i in range(n)],
            Types.TUPLE([Types.INT(), Types.LONG()]),
        ),
        "(str, long)": (
            [(f"key-{i % 10_000}", i) for i in range(n)],
            Types.TUPLE([Types.STRING(), Types.LONG()]),
        ),
        "long": (list(range(n)), Types.LONG()),
        "str": ([f"word{i}" for i in range(n)], Types.STRING()),
        "Row(str, int, double)": (
            [Row(f"k{i}", i, i * 0.5) for i in range(n)],
            Types.ROW([Types.STRING(), Types.INT(), Types.DOUBLE()]),
        ),
        "named Row(name, age)": (
            [Row(name=f"k{i}", age=i) for i in range(n)],
            Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]),
        ),
    }


def _ns(fn: Any) -> float:
    """ns per record of `fn` (one batch per call), best of 5 rounds."""
    number = 200
    return min(timeit.repeat(fn, number=number, repeat=5)) / number / BATCH * 1e9


def codec_costs() -> list[dict[str, Any]]:
    out = []
    for name, (batch, type_info) in _shapes().items():
        codec = batch_codec(type_info)
        pickled, encoded = pickle.dumps(batch, protocol=5), codec.encode(batch)
        row = {
            "shape": name,
            "pickle_dumps_ns": _ns(lambda b=batch: pickle.dumps(b, protocol=5)),
            "pickle_loads_ns": _ns(lambda p=pickled: pickle.loads(p)),
            "typed_encode_ns": _ns(lambda b=batch, c=codec: c.encode(b)),
            "typed_decode_ns": _ns(lambda e=encoded, c=codec: c.decode(e, BATCH)),
            "typed_convert_ns": _ns(lambda b=batch, c=codec: c.convert(b)),
            "pickle_bytes_per_record": len(pickled) / BATCH,
            "typed_bytes_per_record": len(encoded) / BATCH,
        }
        row["pickle_ns"] = row["pickle_dumps_ns"] + row["pickle_loads_ns"]
        row["typed_ns"] = row["typed_encode_ns"] + row["typed_decode_ns"]
        out.append(row)
    return out


def state_costs(keys: int = 200_000) -> list[dict[str, Any]]:
    person = Types.ROW_NAMED(["name", "n"], [Types.STRING(), Types.LONG()])
    shapes = [
        ("long", Types.LONG(), lambda k: k),
        ("named Row", person, lambda k: Row(name=f"n{k}", n=k)),
    ]
    out = []
    for name, type_info, make in shapes:
        row: dict[str, Any] = {"shape": name, "keys": keys}
        for label, declared in (("pickle", None), ("typed", type_info)):
            backend = HeapKeyedStateBackend(128, range(128))
            backend.get_state(ValueStateDescriptor("s", declared))
            table = backend.table("s")
            for k in range(keys):
                table[k] = make(k)
            best, size = float("inf"), 0
            for _ in range(3):
                buffer = io.BytesIO()
                started = time.perf_counter()
                write_state_file(buffer, backend.snapshot(), None)
                best = min(best, time.perf_counter() - started)
                size = len(buffer.getvalue())
            row[f"{label}_ms"], row[f"{label}_bytes"] = best * 1e3, size
        out.append(row)
    return out


def run_w1(args, spark, work_root: str) -> list[dict[str, Any]]:
    configs = []
    for p in (1, 2):
        n = args.records or max(100_000, int(round(W1_RATE[p] * args.seconds, -5)))
        for typed in (False, True):
            configs.append(jobs.JobParams("keyed", p, 1000, "count", n, typed=typed))
    runs: dict[jobs.JobParams, list[dict[str, Any]]] = {c: [] for c in configs}
    for rep in range(args.repeats):  # interleaved: load from elsewhere spreads evenly
        for c in configs:
            r = run_job(c, runner="spark", spark=spark, work_root=work_root)
            runs[c].append(r)
            rate = r["steady_rate"] or 0
            print(
                f"[{rep + 1}/{args.repeats}] {c.label:45s} {rate / 1e6:5.2f} M/s "
                f"exact={r['exactly_once_ok']} {r['error'] or ''}",
                flush=True,
            )
    return [
        {
            "label": c.label,
            "params": {"parallelism": c.parallelism, "typed": c.typed, "records": c.records},
            "steady_rates": [r["steady_rate"] for r in rs],
            "median_rate": statistics.median(r["steady_rate"] or 0 for r in rs),
            "exactly_once_ok": all(r["exactly_once_ok"] for r in rs),
            "errors": [r["error"] for r in rs if r["error"]],
        }
        for c, rs in runs.items()
    ]


def run_q5(args, spark, work_root: str) -> list[dict[str, Any]]:
    config = NexmarkConfig()
    events = args.q5_events or max(20_000, int(round(Q5_RATE * args.seconds, -3)))
    _, expected = bare_rate("q5", config, events)
    runs: dict[str, list[dict[str, Any]]] = {"q5": [], "q5-typed": []}
    for rep in range(args.repeats):
        for query in runs:
            r = run_query_job(
                query,
                "hashmap",
                events=events,
                parallelism=1,
                checkpoint_ms=10_000,
                config=config,
                expected_rows=expected,
                spark=spark,
                work_root=work_root,
            )
            runs[query].append(r)
            rate = (r["steady_rate"] or 0) / 1e3
            print(
                f"[{rep + 1}/{args.repeats}] nexmark {query:9s} {rate:6.1f} k ev/s "
                f"exact={r['exactly_once_ok']} {r['error'] or ''}",
                flush=True,
            )
    return [
        {
            "label": f"nexmark {query} p=1 hashmap",
            "events": events,
            "steady_rates": [r["steady_rate"] for r in rs],
            "median_rate": statistics.median(r["steady_rate"] or 0 for r in rs),
            "exactly_once_ok": all(r["exactly_once_ok"] for r in rs),
            "errors": [r["error"] for r in rs if r["error"]],
        }
        for query, rs in runs.items()
    ]


def print_report(report: dict[str, Any]) -> None:
    print("\ncodec: ns per record of a 512-record batch (one core): between processes, encode +")
    print("decode (pickle vs typed); inside a slot, the typed conversion (untyped: nothing)")
    head = f"{'shape':24s} {'pickle':>8s} {'typed':>8s} {'x':>6s} {'convert':>8s}"
    print(f"{head} {'B/rec p':>8s} {'B/rec t':>8s}")
    for r in report["codec"]:
        print(
            f"{r['shape']:24s} {r['pickle_ns']:8.1f} {r['typed_ns']:8.1f} "
            f"{r['pickle_ns'] / r['typed_ns']:6.2f} {r['typed_convert_ns']:8.1f} "
            f"{r['pickle_bytes_per_record']:8.1f} {r['typed_bytes_per_record']:8.1f}"
        )
    print("\nstate: heap snapshot write (async phase), one value state")
    for r in report["state"]:
        print(
            f"{r['shape']:10s} x {r['keys']:,}  pickle "
            f"{r['pickle_ms']:7.1f} ms {r['pickle_bytes'] / 1e6:5.1f} MB   typed "
            f"{r['typed_ms']:7.1f} ms {r['typed_bytes'] / 1e6:5.1f} MB   "
            f"x{r['pickle_ms'] / r['typed_ms']:5.2f}"
        )
    print("\njobs on Spark: steady records/s (median), typed / untyped")
    pairs = report["w1"] + report["q5"]
    for untyped, typed in zip(pairs[0::2], pairs[1::2], strict=True):
        ratio = typed["median_rate"] / untyped["median_rate"] if untyped["median_rate"] else 0
        exact = untyped["exactly_once_ok"] and typed["exactly_once_ok"]
        print(
            f"{untyped['label']:45s} {untyped['median_rate'] / 1e6:6.3f} M/s  typed "
            f"{typed['median_rate'] / 1e6:6.3f} M/s  x{ratio:5.2f}  exact={exact}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 repeat, ~1 s runs")
    p.add_argument("--repeats", type=int, help="runs per configuration (default 3; quick 1)")
    p.add_argument("--seconds", type=float, help="steady seconds per run (default 10; quick 1)")
    p.add_argument("--records", type=int, help="W1 records per run (overrides --seconds)")
    p.add_argument("--q5-events", type=int, help="Nexmark events per run (overrides --seconds)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "typed_records.json"))
    args = p.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.seconds = args.seconds or (1.0 if args.quick else 10.0)
    jobs.register_by_value()
    report = report_header(args)
    report["codec"] = codec_costs()
    report["state"] = state_costs()
    spark = start_spark(args, report)
    work_root = args.work_dir or tempfile.mkdtemp(prefix="tidegate-typed-")
    report["w1"] = run_w1(args, spark, work_root)
    report["q5"] = run_q5(args, spark, work_root)
    spark.stop()
    print_report(report)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
