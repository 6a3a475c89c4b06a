"""The job of the rescaling tests and its checks: numbers -> an operator with split list state
-> an operator with union list state -> key_by -> running count (ValueState) that records the
subtask it ran on -> exactly-once FileSink. The list-state operators write what they restored
to probe files, so a test sees each new subtask's share."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from tests.e2e.jobs import FailAtValues, RunningCount
from tests.support.environments import file_sink, job_environment
from tests.support.references import NUM_KEYS, check_exactly_once
from tidegate.checkpoint.assignment import redistribute_list_state
from tidegate.datastream import (
    CheckpointedFunction,
    ExternalizedCheckpointRetention,
    MapFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import ListStateDescriptor
from tidegate.state.keygroups import assign_to_key_group, subtask_for_key_group

SPLIT, UNION = "split", "union"


class ListStateProbe(MapFunction, CheckpointedFunction):
    """Passes records on. Its list state (split or union `mode`) holds tokens put there by the
    first run (subtask i adds i + 1 of them, so subtasks hold uneven lists); on every start it
    writes the entries it restored to `<probes>/<mode>-<attempt>-<subtask>.json`."""

    def __init__(self, probes: str, mode: str) -> None:
        self.probes = probes
        self.mode = mode

    def initialize_state(self, context) -> None:
        store = context.get_operator_state_store()
        descriptor = ListStateDescriptor(f"{self.mode}-tokens")
        if self.mode == SPLIT:
            self.state = store.get_list_state(descriptor)
        else:
            self.state = store.get_union_list_state(descriptor)
        self.restored = context.is_restored()
        self.entries = self.state.get()

    def open(self, runtime_context) -> None:
        index = runtime_context.get_index_of_this_subtask()
        attempt = runtime_context.get_attempt_number()
        if not self.restored:  # a first run: this subtask's own tokens
            self.entries = [f"{self.mode}-{index}-{j}" for j in range(index + 1)]
            self.state.update(self.entries)
        elif self.mode == UNION:
            # every subtask restored all entries; as users of union state do, each keeps only
            # its own part of them in the state (here: subtask 0 all), or the next restore
            # would get every entry once per subtask
            self.state.update(self.entries if index == 0 else [])
        os.makedirs(self.probes, exist_ok=True)
        with open(f"{self.probes}/{self.mode}-{attempt}-{index}.json", "w") as f:
            json.dump({"restored": self.restored, "entries": self.entries}, f)

    def snapshot_state(self, context) -> None:
        pass  # the tokens never change: the state already holds them

    def map(self, value):
        return value


class CountOnSubtask(RunningCount):
    """The running count of jobs.py; each line ends with the run (`phase`) and the subtask
    that counted it."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def open(self, runtime_context) -> None:
        super().open(runtime_context)
        self.suffix = f",{self.phase},{runtime_context.get_index_of_this_subtask()}"

    def process_element(self, value, ctx):
        for line in super().process_element(value, ctx):
            yield line + self.suffix


def rescale_job(
    tmp_path: Path,
    phase: str,
    *,
    parallelism: int,
    n: int,
    rate: float | None,
    max_parallelism: int | None = None,
    count_parallelism: int | None = None,
    restore_path: str | None = None,
    fail_at: dict[int, int] | None = None,
) -> StreamExecutionEnvironment:
    """The job; every run writes to `tmp_path/out`, `phase` names its probe directory."""
    env = job_environment(
        "spark",
        tmp_path / "chk",
        parallelism=parallelism,
        restarts=3,
        restore_path=restore_path,
        max_parallelism=max_parallelism or None,
    )
    env.get_checkpoint_config().set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    env.set_default_savepoint_directory(str(tmp_path / "savepoints"))
    probes = str(tmp_path / f"probes-{phase}")
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    ds = env.from_source(source, None, "numbers").uid("numbers")
    if fail_at:
        ds = ds.map(FailAtValues(fail_at)).uid("fail")
    ds = ds.map(ListStateProbe(probes, SPLIT)).uid("split-state")
    ds = ds.map(ListStateProbe(probes, UNION)).uid("union-state")
    counted = ds.key_by(lambda v: v % NUM_KEYS).process(CountOnSubtask(phase)).uid("count")
    if count_parallelism:
        counted = counted.set_parallelism(count_parallelism)
    counted.sink_to(file_sink(tmp_path / "out")).uid("sink")
    return env


def check_rescaled_output(lines: list[str], n: int, first_parallelism: int) -> None:
    """Exactly once, record for record (jobs.check_exactly_once; the sources keep the splits
    of the first run, so its parallelism decides their ranges)."""
    check_exactly_once([line.rsplit(",", 2)[0] for line in lines], n, first_parallelism)


def check_key_placement(
    lines: list[str], phase: str, parallelism: int, max_parallelism: int
) -> None:
    """Every key counted in run `phase` was counted on the subtask the key-group formula gives
    it at that run's parallelism."""
    fields = [line.split(",") for line in lines]
    placed = {(int(f[0]), int(f[4])) for f in fields if f[3] == phase}
    assert placed, f"no output of run {phase}"
    for key, subtask in placed:
        kg = assign_to_key_group(key, max_parallelism)
        assert subtask == subtask_for_key_group(kg, parallelism, max_parallelism), (
            f"key {key} (key group {kg}) counted on subtask {subtask} at parallelism "
            f"{parallelism}, max parallelism {max_parallelism}"
        )


def read_probes(tmp_path: Path, phase: str, mode: str, attempt: int, parallelism: int):
    probes = tmp_path / f"probes-{phase}"
    return [
        json.loads((probes / f"{mode}-{attempt}-{i}.json").read_text()) for i in range(parallelism)
    ]


def check_list_states(tmp_path: Path, old: int, new: int, attempt: int = 0) -> None:
    """Split state: the new subtasks' shares are the old lists cut as DESIGN §6 says, and the
    multiset of entries is unchanged; union state: every new subtask has every entry."""
    first_split = [p["entries"] for p in read_probes(tmp_path, "1", SPLIT, 0, old)]
    first_union = [p["entries"] for p in read_probes(tmp_path, "1", UNION, 0, old)]
    split = read_probes(tmp_path, "2", SPLIT, attempt, new)
    union = read_probes(tmp_path, "2", UNION, attempt, new)
    assert all(p["restored"] for p in split + union)
    shares = [p["entries"] for p in split]
    assert Counter(e for s in shares for e in s) == Counter(e for s in first_split for e in s)
    # at an unchanged parallelism every subtask gets its own entries back
    assert shares == (first_split if old == new else redistribute_list_state(first_split, new))
    everything = [e for s in first_union for e in s]
    assert [p["entries"] for p in union] == [everything] * new
