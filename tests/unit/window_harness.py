"""A window operator on a real heap backend, driven by scripted elements, watermarks and an
injected processing-time clock (shared by the window unit tests)."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest

from tidegate.datastream import EmbeddedRocksDBStateBackend
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.operators import OperatorRuntime, SideOutputOperator
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.windows.contents import Aggregation
from tidegate.runtime.windows.operator import WindowOperator, WindowSpec
from tidegate.state.keygroups import KeyGroupAssigner
from tidegate.state.snapshot_format import read_key_groups

M = 128


class Collect:
    """A downstream operator that keeps every record with its timestamp."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, int | None]] = []

    def process_batch(self, records: list) -> None:
        ts = timestamps_of(records) or [None] * len(records)
        self.records.extend(zip(records, ts, strict=True))

    def process_watermark(self, watermark: int) -> None:
        pass

    def process_watermark_status(self, idle: bool) -> None:
        pass

    def values(self) -> list[Any]:
        return [r for r, _ in self.records]


class Clock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


#: the state backend harnesses create (None: hashmap); the window test modules run each test on
#: both backends by setting it (fixture `window_state_backend`)
STATE_BACKEND: Any = None


@pytest.fixture(autouse=True, params=["hashmap", "rocksdb"])
def window_state_backend(request, tmp_path, monkeypatch):
    """Every test of a module importing this fixture runs on both state backends: window
    state is keyed state."""
    backend = None
    if request.param == "rocksdb":
        backend = EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "rocksdb"))
    monkeypatch.setattr(sys.modules[__name__], "STATE_BACKEND", backend)
    return request.param


class Harness:
    """`add(key, value, ts)` elements are `(key, value)`; results go to `out`, late data to
    `late` (when the spec has a late-data tag)."""

    def __init__(self, spec: WindowSpec, *, subtask=0, parallelism=1, restored=None) -> None:
        self.spec = spec
        self.clock = Clock()
        op = WindowOperator(spec, lambda r: r[0], clock=self.clock, uid="w")
        runtime = OperatorRuntime(subtask, parallelism, M, 0, state_backend=STATE_BACKEND)
        op.initialize_state(runtime, None)
        if restored is not None:
            op.keyed_backend.restore(restored(op.keyed_backend.key_group_range))
            op.current_watermark = restored.watermark  # as operator state restores it
        self.out, self.late = Collect(), Collect()
        outputs: list[Any] = [self.out]
        if spec.late_data_tag is not None:
            side = SideOutputOperator(spec.late_data_tag.tag_id)
            side.outputs = [self.late]
            outputs.append(side)
        op.outputs = outputs
        op.open()
        self.op = op

    def add(self, *elements: tuple[Any, Any, int | None]) -> None:
        if elements[0][2] is None:
            self.op.process_batch([(k, v) for k, v, _ in elements])
        else:
            records = [(k, v) for k, v, _ in elements]
            self.op.process_batch(TimestampedBatch(records, [t for _, _, t in elements]))

    def watermark(self, watermark: int) -> None:
        self.op.process_watermark(watermark)

    def processing_time(self, now: int) -> None:
        self.clock.now = now
        self.op.timers.fire_processing_timers()

    def snapshot_to(self, path) -> Any:
        """Snapshot the operator as a checkpoint does and write its keyed state; returns a
        `restored` callable for a new Harness."""
        with path.open("wb") as f:
            index = self.op.snapshot_state(1, 0).keyed.write(f)
        watermark = self.op.current_watermark

        def restored(key_groups):
            return read_key_groups(path.open("rb"), index, key_groups)

        restored.watermark = watermark  # type: ignore[attr-defined]
        return restored


def add_values(a, b):
    return (a[0], a[1] + b[1])


def sum_spec(assigner, **kw) -> WindowSpec:
    return WindowSpec(assigner, aggregation=Aggregation(add_values), **kw)


class SumProcess:
    """A ProcessWindowFunction: (key, window start, window end, sum, count)."""

    def process(self, key, context, elements):
        w = context.window()
        values = [v for _, v in elements]
        yield (key, w.start, w.end, sum(values), len(values))


def script(seed: int, n: int = 300) -> list:
    """Batches of (key, value, timestamp), out of order by up to 8 ms (one in five by 20-60
    ms), each followed by a watermark that lags the largest timestamp by 10 ms: some elements
    are late, within the allowed lateness or beyond it."""
    rng = random.Random(seed)
    steps, t = [], 0
    while n > 0:
        batch = []
        for _ in range(rng.randint(1, 12)):
            t += rng.randint(0, 4)
            late = rng.randint(0, 8) if rng.random() < 0.8 else rng.randint(20, 60)
            batch.append((rng.choice("abcde"), rng.randint(1, 9), max(0, t - late)))
        n -= len(batch)
        steps.append((batch, t - 10))
    return steps


def run(h: Harness, steps: list) -> Harness:
    for batch, watermark in steps:
        h.add(*batch)
        h.watermark(watermark)
    h.watermark(MAX_WATERMARK)
    return h


def _feed(h: Harness, steps: list, kg: KeyGroupAssigner) -> None:
    """The elements of `steps` whose keys `h`'s subtask owns (a watermark after each batch)."""
    owned = h.op.keyed_backend.key_group_range
    for batch, watermark in steps:
        mine = [e for e in batch if kg.key_group(e[0]) in owned]
        if mine:
            h.add(*mine)
        h.watermark(watermark)


def rescaled_run(make: Any, steps: list, tmp_path: Any) -> list:
    """The records of `steps` run at p=2 until a checkpoint in the middle of the script, then
    at p=3 from it (the snapshot is written after the subtasks went on, as the async phase
    does); `make()` gives the spec."""
    kg, middle = KeyGroupAssigner(M), len(steps) // 2
    fired, snapshots, subtasks = [], [], []
    for i in range(2):
        h = Harness(make(), subtask=i, parallelism=2)
        subtasks.append(h)  # alive until its snapshot is written (rocksdb: its files)
        _feed(h, steps[:middle], kg)
        fired.extend(h.out.records)
        snapshots.append((h.op.snapshot_state(1, 0).keyed, h.op.current_watermark))
        _feed(h, steps[middle:], kg)  # after the synchronous phase
    files = []
    for i, (keyed, _) in enumerate(snapshots):
        path = tmp_path / f"p2-{i}.state"
        with path.open("wb") as f:
            files.append((path, keyed.write(f)))

    def restored(key_groups):
        for path, index in files:
            yield from read_key_groups(path.open("rb"), index, key_groups)

    restored.watermark = min(w for _, w in snapshots)  # type: ignore[attr-defined]
    for j in range(3):
        h = Harness(make(), subtask=j, parallelism=3, restored=restored)
        _feed(h, steps[middle:], kg)
        h.watermark(MAX_WATERMARK)
        fired.extend(h.out.records)
    return fired


def assert_same_results(fast: Harness, reference: Harness, *, cleared: bool) -> None:
    """`fast` (a batched path) gave the per-window `reference`'s outputs and late data (the
    script has some), in order, and the same `clear` calls (`cleared`: the function records
    them), and left no state behind."""
    assert fast.out.records == reference.out.records
    assert fast.late.records == reference.late.records
    assert fast.late.records, "the script has late elements"
    if cleared:
        assert fast.op.spec.function.function.cleared == reference.op.spec.function.function.cleared
    backend = fast.op.keyed_backend
    assert [n for n in backend._kinds if list(backend.entries(n))] == []
