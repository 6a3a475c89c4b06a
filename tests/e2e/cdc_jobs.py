"""The job the PostgreSQL CDC end-to-end tests run: the source's changelog keyed by the
table's primary key into a mirror of the table in keyed state, which checks every change
against the row it holds (tests/support/cdc.apply_change) and writes each key's new state with
its version through an exactly-once FileSink; failures by an exception at a planned row
(jobs.FailAtValues) and by kill -9 of a slot (jobs.kill_slots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.jobs import FailAtValues
from tests.support.cdc import ChangelogError, apply_change
from tests.support.environments import file_sink, job_environment
from tidegate.common import WatermarkStrategy
from tidegate.datastream import (
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.state import ValueStateDescriptor

#: what the mirror writes for a key whose row was deleted
GONE = "-"


class Mirror(KeyedProcessFunction):
    """Keyed by the row's first column: applies each change to the row held in state and
    emits `key,version,state` (state: the row's values joined by `|`, GONE when deleted;
    version: 1, 2, ... per key, one per change), or
    `VIOLATION,...` when a change does not fit the row held (a change read twice or lost)."""

    def open(self, runtime_context) -> None:
        self.row = runtime_context.get_state(ValueStateDescriptor("row"))
        self.version = runtime_context.get_state(ValueStateDescriptor("version"))

    def process_element(self, row, ctx):
        key = row[0]
        held = self.row.value()
        mirror = {} if held is None else {key: held}
        try:
            apply_change(mirror, key, row)
        except ChangelogError as e:
            yield f"VIOLATION,{key},{e}"
            return
        self.row.update(mirror.get(key))
        version = (self.version.value() or 0) + 1
        self.version.update(version)
        state = GONE if key not in mirror else "|".join(map(str, mirror[key]))
        yield f"{key},{version},{state}"


def cdc_mirror_job(
    source: Any,
    out: Path,
    checkpoints: Path,
    *,
    parallelism: int,
    fail_at: dict[int, Any] | None = None,
    restore_path: str | None = None,
) -> StreamExecutionEnvironment:
    """CDC source -> [failures] -> key_by(primary key) -> Mirror -> FileSink(out);
    checkpoints every 200 ms, retained on cancel."""
    env = job_environment("spark", checkpoints, parallelism=parallelism, restore_path=restore_path)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "cdc").uid("cdc")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at), output_type=ds.get_type()).uid("fail")
    mirrored = ds.key_by(lambda row: row[0]).process(Mirror()).uid("mirror")
    mirrored.sink_to(file_sink(out)).uid("sink")
    return env


def mirrored_state(lines: list[str]) -> dict[int, str]:
    """The table the committed mirror output describes (key -> `|`-joined values), after
    checking it: no violations, and each key's versions exactly 1..n (nothing lost or doubled
    on the way to the sink)."""
    violations = [line for line in lines if line.startswith("VIOLATION")]
    assert not violations, violations[:5]
    latest: dict[int, tuple[int, str]] = {}
    versions: dict[int, list[int]] = {}
    for line in lines:
        key, version, state = line.split(",", 2)
        k, v = int(key), int(version)
        versions.setdefault(k, []).append(v)
        if k not in latest or latest[k][0] < v:
            latest[k] = (v, state)
    for k, vs in versions.items():
        assert sorted(vs) == list(range(1, len(vs) + 1)), f"key {k}: versions {sorted(vs)}"
    return {k: state for k, (_, state) in latest.items() if state != GONE}
