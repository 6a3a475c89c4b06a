"""A window operator on a real heap backend, driven by scripted elements, watermarks and an
injected processing-time clock (shared by the window unit tests)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tidegate.datastream import EmbeddedRocksDBStateBackend
from tidegate.runtime.operators import OperatorRuntime, SideOutputOperator
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.windows.contents import Aggregation
from tidegate.runtime.windows.operator import WindowOperator, WindowSpec
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
