"""What a window costs per element: the window operator (runtime/windows) on one core, fed
timestamped batches of `(key, value)` with a watermark after each batch, against a bare Python
loop that computes the same results with a dict (the ratio is the figure to watch, DESIGN §8).

    .venv/bin/python bench/windows.py [--records N] [--keys K] [--repeats R] [--cases TEXT]
                                      [--backend hashmap|rocksdb] [--json FILE]
                                      [--profile N]

Cases: tumbling 1 s reduce, sliding 10 s / 1 s reduce (10 windows per element), tumbling 1 s
and sliding 10 s / 1 s process (all elements kept), session windows reduce with a gap of 50 ms
(each element of a key, 100 ms apart, is a session of its own) and of 500 ms (one session per
key, merged with every element, fired at the end; also with process, all elements kept); their
bare loop keeps one open session per key, as in-order input allows, and must make as many
sessions as the operator. The tumbling and sliding process cases are also compared with a bare
loop keeping the elements (a list per key and window) and calling the same
ProcessWindowFunction on each list ("bare kept"). Timestamps are 1 ms apart.
The operator's state is on `--backend` (hashmap by default; rocksdb in a temporary directory).
Rates are per CPU-second of this process (`time.process_time`: other processes' load on a
shared machine changes them less than wall time); each case runs the operator and the bare
loop(s) alternately `--repeats` times and reports the medians and the median of the ratios.
JSON: bench/results/windows.json (`--json`). `--profile N`: after its rounds, each case's
operator runs once more under cProfile, which prints its Python calls per element and the N
functions with the most time of their own (cProfile inflates times, not the call counts).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tidegate.datastream import EmbeddedRocksDBStateBackend
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.records import TimestampedBatch
from tidegate.runtime.windows.assigners import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.operator import WindowOperator, WindowSpec

BATCH = 1_000


class _Count:
    def __init__(self) -> None:
        self.n = 0

    def process_batch(self, records: list) -> None:
        self.n += len(records)

    def process_watermark(self, watermark: int) -> None:
        pass


class _Sizes:
    def process(self, key, context, elements):
        yield len(elements)


def _add(a, b):
    return (a[0], a[1] + b[1])


def _first(r):
    return r[0]


def _operator_rate(spec: WindowSpec, batches: list, backend: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-windows-") as local_dir:
        state_backend = None  # hashmap
        if backend == "rocksdb":
            state_backend = EmbeddedRocksDBStateBackend(local_dir=local_dir)
        return _run_operator(spec, batches, state_backend)


def _run_operator(spec: WindowSpec, batches: list, state_backend: object) -> tuple[float, int]:
    op = WindowOperator(spec, _first, uid="bench")
    op.initialize_state(OperatorRuntime(0, 1, 128, 0, state_backend=state_backend), None)
    out = _Count()
    op.outputs = [out]
    op.open()
    n = sum(len(b) for b in batches)
    start = time.process_time()
    for batch in batches:
        op.process_batch(batch)
        op.process_watermark(batch.timestamps[-1])
    op.process_watermark(MAX_WATERMARK)
    rate = n / (time.process_time() - start)
    op.close()  # rocksdb: its files go
    return rate, out.n


def _profile(spec: WindowSpec, batches: list, backend: str, top: int) -> None:
    profile = cProfile.Profile()
    profile.enable()
    _operator_rate(spec, batches, backend)
    profile.disable()
    stats = pstats.Stats(profile)
    n = sum(len(b) for b in batches)
    print(f"{'':24} cProfile: {stats.total_calls / n:.1f} Python calls per element")
    stats.sort_stats("tottime").print_stats(top)


def _bare_rate(size: int, slide: int, batches: list) -> float:
    """A dict of sums per (key, window start), emitted when the watermark passes the end."""
    n = sum(len(b) for b in batches)
    start = time.process_time()
    sums: dict = collections.defaultdict(int)
    emitted = 0
    for batch in batches:
        for (key, value), t in zip(batch, batch.timestamps, strict=True):
            last = t - t % slide
            for s in range(last, t - size, -slide):
                sums[(key, s)] += value
        watermark = batch.timestamps[-1]
        for k in [k for k in sums if k[1] + size - 1 <= watermark]:
            del sums[k]
            emitted += 1
    return n / (time.process_time() - start)


def _bare_session_rate(gap: int, batches: list) -> tuple[float, int]:
    """Session windows by hand, for input in time order per key (as here): one open session per
    key, `[start, end (last timestamp + gap), sum]`, emitted when an element comes at or after
    its end (a new session starts) or the watermark passes it."""
    n = sum(len(b) for b in batches)
    start = time.process_time()
    sessions: dict = {}
    emitted = 0
    for batch in batches:
        for (key, value), t in zip(batch, batch.timestamps, strict=True):
            session = sessions.get(key)
            if session is not None and t < session[1]:
                session[1] = t + gap
                session[2] += value
            else:
                if session is not None:
                    emitted += 1
                sessions[key] = [t, t + gap, value]
        watermark = batch.timestamps[-1]
        for k in [k for k, session in sessions.items() if session[1] - 1 <= watermark]:
            del sessions[k]
            emitted += 1
    elapsed = time.process_time() - start
    return n / elapsed, emitted + len(sessions)


def _bare_kept_rate(size: int, slide: int, function: _Sizes, batches: list) -> float:
    """The same windows keeping their elements: a list per (key, window start), and
    `function.process(key, None, elements)` on each list when the watermark passes its end."""
    n = sum(len(b) for b in batches)
    start = time.process_time()
    lists: dict = collections.defaultdict(list)
    out: list = []
    for batch in batches:
        for r, t in zip(batch, batch.timestamps, strict=True):
            last = t - t % slide
            for s in range(last, t - size, -slide):
                lists[(r[0], s)].append(r)
        watermark = batch.timestamps[-1]
        for k in [k for k in lists if k[1] + size - 1 <= watermark]:
            out.extend(function.process(k[0], None, lists.pop(k)))
    return n / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="", help="only the cases whose name contains this")
    parser.add_argument("--backend", choices=["hashmap", "rocksdb"], default="hashmap")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile: top N")
    parser.add_argument(
        "--json",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "windows.json"),
    )
    args = parser.parse_args()
    batches = [
        TimestampedBatch(
            [(v % args.keys, v) for v in range(s, s + BATCH)], list(range(s, s + BATCH))
        )
        for s in range(0, args.records, BATCH)
    ]
    cases = {
        "tumbling 1s reduce": (
            WindowSpec(TumblingEventTimeWindows.of(1_000), aggregation=Aggregation(_add)),
            (1_000, 1_000),
        ),
        "sliding 10s/1s reduce": (
            WindowSpec(SlidingEventTimeWindows.of(10_000, 1_000), aggregation=Aggregation(_add)),
            (10_000, 1_000),
        ),
        "tumbling 1s process": (
            WindowSpec(
                TumblingEventTimeWindows.of(1_000),
                function=InternalWindowFunction("process", _Sizes()),
            ),
            (1_000, 1_000),
        ),
        "sliding 10s/1s process": (
            WindowSpec(
                SlidingEventTimeWindows.of(10_000, 1_000),
                function=InternalWindowFunction("process", _Sizes()),
            ),
            (10_000, 1_000),
        ),
        "session 50ms reduce": (
            WindowSpec(EventTimeSessionWindows.with_gap(50), aggregation=Aggregation(_add)),
            50,
        ),
        "session 500ms reduce": (
            WindowSpec(EventTimeSessionWindows.with_gap(500), aggregation=Aggregation(_add)),
            500,
        ),
        "session 500ms process": (
            WindowSpec(
                EventTimeSessionWindows.with_gap(500),
                function=InternalWindowFunction("process", _Sizes()),
            ),
            500,
        ),
    }
    results = {}
    for name, (spec, bare) in cases.items():
        if args.cases not in name:
            continue
        kept = spec.function.kind == "process"  # also against a bare loop keeping elements
        rates, bare_rates, ratios, kept_rates, kept_ratios = [], [], [], [], []
        for _ in range(args.repeats):
            rate, fired = _operator_rate(spec, batches, args.backend)
            rates.append(rate)
            if isinstance(bare, int):  # a session gap
                bare_rate, sessions = _bare_session_rate(bare, batches)
                if sessions != fired:
                    raise SystemExit(f"{name}: the bare loop made {sessions} sessions, not {fired}")
                bare_rates.append(bare_rate)
                ratios.append(rate / bare_rates[-1])
            elif bare:
                bare_rates.append(_bare_rate(*bare, batches))
                ratios.append(rate / bare_rates[-1])
            if isinstance(bare, tuple) and kept:
                kept_rates.append(_bare_kept_rate(*bare, spec.function.function, batches))
                kept_ratios.append(rate / kept_rates[-1])
        rate = statistics.median(rates)
        bare_rate = statistics.median(bare_rates) if bare_rates else None
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        results[name] = {
            "elements_per_cpu_s": round(rate),
            "bare_elements_per_cpu_s": round(bare_rate) if bare_rate else None,
            "windows": fired,
            "bare_ratio": ratio,
            "ratios": [round(r, 3) for r in ratios],
        }
        bare_text = f"{bare_rate:>12,.0f}" if bare_rate else f"{'-':>12}"
        print(
            f"{name:24} {rate:>12,.0f} elements/cpu-s  bare {bare_text}  {fired:>7} windows  "
            f"x bare loop {ratio}  ({', '.join(f'{r:.2f}' for r in ratios) or '-'})"
        )
        if kept_rates:
            kept_rate, kept_ratio = statistics.median(kept_rates), statistics.median(kept_ratios)
            results[name] |= {
                "bare_kept_elements_per_cpu_s": round(kept_rate),
                "bare_kept_ratio": f"{kept_ratio:.2f}",
                "kept_ratios": [round(r, 3) for r in kept_ratios],
            }
            print(
                f"{'':24} {'':>12} {'':14} bare kept {kept_rate:>12,.0f}  {'':>7} {'':7}  "
                f"x bare loop {kept_ratio:.2f}  ({', '.join(f'{r:.2f}' for r in kept_ratios)})"
            )
        if args.profile:
            _profile(spec, batches, args.backend, args.profile)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    results["_run"] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load_average": load,
        "cores": os.cpu_count(),
        "args": vars(args),
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
