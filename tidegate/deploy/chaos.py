"""One run of a job script under `tidegate chaos` (cli/chaos.py), in the process that runs the
script: `StreamExecutionEnvironment` hands each job it builds to a `ChaosRun`, which moves the
job's sink outputs and checkpoints into the run's directory, lets it restart as often as the
faults need, wraps its user functions' operators and plans the faults (runtime/faults.py), so
that the user's script runs unchanged. What the run did (its sinks, the planned faults, and per
job its planned faults, restarts and checkpoint counts) goes to `run.json` in the run's directory.

A run's directory:

    settings.json        what the harness asks (ChaosSettings)
    sinks/<n>/           the output of the script's n-th sink (in the order they were added)
    checkpoints/         the jobs' checkpoint storage
    faults.jsonl         the faults the slots carried out, and when their subtasks ran
                         again after each restart (runtime/faults.py)
    plan.json            the planned faults, written when the job is built (`load_plan`: the
                         harness carries out the `driver-restart` ones)
    run.json             written by `ChaosRun.write`
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tidegate.common.restart_strategy import RestartStrategies
from tidegate.connectors.base import RedirectableSink, Sink
from tidegate.connectors.file_sink import FileSink
from tidegate.connectors.print_sink import PrintSink
from tidegate.deploy.job_spec import JobSpec
from tidegate.graph.stream_graph import StreamGraph, Transformation
from tidegate.runtime.faults import (
    CLUSTER_KINDS,
    Fault,
    FaultKind,
    FaultPlan,
    FaultSchedule,
    FaultyOperatorFactory,
    plan_faults,
)

#: transformations whose operator runs no user function
_NOT_USER_FUNCTIONS = frozenset({"source", "sink", "side_output", "timestamps_watermarks"})
#: how long a restarted job waits (ms): short, the faults are planned
_RESTART_DELAY_MS = 200
#: with `storage-hang` faults, the checkpoint timeout is at most the longer of these and ten
#: checkpoint intervals (a hung write outlasts it twice)
_HANG_TIMEOUT_MS = 3000
#: the kinds carried out by wrapped user functions' operators
_USER_FUNCTION_KINDS = frozenset({FaultKind.EXCEPTION, FaultKind.SLOW})


@dataclass(frozen=True)
class ChaosSettings:
    """What the harness asks of one run: the run's directory and, for the run under faults,
    which faults (`count` 0: the reference run, without faults)."""

    run_dir: str
    kinds: tuple[str, ...] = ()
    count: int = 0
    seed: int = 0
    schedule: str = "every:2"
    #: which run of the driver this is (after `driver-restart` faults: 1, 2, ...)
    driver: int = 0

    @property
    def path(self) -> str:
        return os.path.join(self.run_dir, "settings.json")

    def save(self) -> str:
        os.makedirs(self.run_dir, exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(dataclasses.asdict(self), f)
        return self.path

    @classmethod
    def load(cls, path: str) -> ChaosSettings:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return cls(**{**data, "kinds": tuple(data["kinds"])})


@dataclass
class ChaosRun:
    settings: ChaosSettings
    #: the script's sinks in the order they were added: index, name, uid, path, ordered
    sinks: list[dict[str, Any]] = field(default_factory=list)
    #: each job's planned faults and the JobMaster that ran it
    jobs: list[tuple[FaultPlan | None, Any]] = field(default_factory=list)

    @property
    def fault_log(self) -> str:
        return os.path.join(self.settings.run_dir, "faults.jsonl")

    @property
    def result_path(self) -> str:
        return os.path.join(self.settings.run_dir, "run.json")

    @property
    def plan_path(self) -> str:
        return plan_path(self.settings.run_dir)

    # building the job ---------------------------------------------------------------------------
    def redirect(self, graph: StreamGraph, parallelism: int) -> None:
        """Before the job is built: its sinks write under the run's directory, and (in the run
        under faults) its user functions' operators can be made to raise. ValueError for a sink
        whose output cannot be moved (it would be written twice to the real system)."""
        reachable = graph.reachable()
        for t in reachable:
            if t.kind != "sink" or isinstance(t.connector, PrintSink):
                continue
            if not isinstance(t.connector, RedirectableSink):
                raise ValueError(
                    f"tidegate chaos cannot move the output of the sink {t.describe()} "
                    f"({type(t.connector).__name__}): running the job twice would write to its "
                    "external system twice. It compares sinks that write files under one "
                    "directory (FileSink, or a sink with `with_output_path`); give the job a "
                    "FileSink in place of this sink to check it"
                )
            if isinstance(t.connector, FileSink) and t.connector.encoder is None:
                raise ValueError(
                    f"tidegate chaos compares the lines of row-format files, but the sink "
                    f"{t.describe()} writes a bulk format (e.g. Parquet), whose files differ "
                    "between runs even with the same records; check the job with a row-format "
                    "FileSink (FileSink.for_row_format) in its place"
                )
            path = os.path.join(self.settings.run_dir, "sinks", str(len(self.sinks)))
            t.connector = t.connector.with_output_path(path)
            self.sinks.append(
                {
                    "index": len(self.sinks),
                    "name": t.name,
                    "uid": t.uid,
                    "path": path,
                    "ordered": _ordered(t, parallelism),
                }
            )
        if self.settings.count and _USER_FUNCTION_KINDS & set(self._kinds):
            for t in reachable:
                user = t.kind not in _NOT_USER_FUNCTIONS
                if user and not isinstance(t.make_operator, FaultyOperatorFactory):
                    t.make_operator = FaultyOperatorFactory(t.make_operator)

    @property
    def _kinds(self) -> tuple[FaultKind, ...]:
        return tuple(FaultKind(k) for k in self.settings.kinds)

    def finish(self, spec: JobSpec) -> JobSpec:
        """The job as this run runs it: checkpoints in the run's directory, restarts for every
        fault, and (in the run under faults) the planned faults."""
        if spec.checkpoint.interval_ms is None:
            raise ValueError(
                "tidegate chaos needs periodic checkpoints: the job has none (call "
                "env.enable_checkpointing(INTERVAL_MS), and run it in STREAMING mode)"
            )
        cluster_kinds = CLUSTER_KINDS & set(self._kinds)
        master = spec.spark_master  # local[N] runs executors in the driver's JVM
        one_jvm = master is None or master == "local" or master.startswith("local[")
        if self.settings.count and cluster_kinds and (spec.runner == "local" or one_jvm):
            raise ValueError(
                f"the {', '.join(sorted(cluster_kinds))} fault needs executors apart from the "
                "driver: run on a Spark cluster (--spark-master spark://HOST:PORT), or leave "
                "it out of --kinds"
            )
        timeout_ms = spec.checkpoint.timeout_ms
        if self.settings.count and FaultKind.STORAGE_HANG in self._kinds:
            hang_ms = max(_HANG_TIMEOUT_MS, 10 * spec.checkpoint.interval_ms)
            timeout_ms = min(timeout_ms, hang_ms)
        checkpoint = dataclasses.replace(
            spec.checkpoint,
            storage=os.path.join(self.settings.run_dir, "checkpoints"),
            storage_defaulted=False,
            timeout_ms=timeout_ms,
        )
        plan = None
        if self.settings.count:
            graph = spec.graph
            user = [
                v.parallelism
                for v in graph.vertices.values()
                if any(isinstance(op.factory, FaultyOperatorFactory) for op in v.operators)
            ]
            sinks = [
                v.parallelism
                for v in graph.vertices.values()
                if any(isinstance(op.connector, Sink) for op in v.operators)
            ]
            slots = dict.fromkeys(FaultKind, graph.num_slots) | {
                FaultKind.EXCEPTION: max(user, default=1),
                FaultKind.SLOW: max(user, default=1),
                FaultKind.COMMIT: max(sinks, default=1),
                FaultKind.METADATA_WRITE: 1,  # the driver's
                FaultKind.DRIVER_RESTART: 1,
            }
            faults = plan_faults(
                FaultSchedule.parse(self.settings.schedule),
                self._kinds,
                self.settings.count,
                self.settings.seed,
                slots,
                spec.checkpoint.interval_ms / 1000,
                timeout_s=timeout_ms / 1000,
            )
            plan = FaultPlan(faults, self.fault_log, self.settings.driver)
            _save_plan(plan, self.plan_path)
        restarts = RestartStrategies.fixed_delay_restart(self.settings.count + 3, _RESTART_DELAY_MS)
        return dataclasses.replace(
            spec, checkpoint=checkpoint, restart_strategy=restarts, faults=plan
        )

    def watched_by(self, on_submit: Callable[[Any], None]) -> Callable[[Any], None]:
        """The `on_submit` hook (`StreamExecutionEnvironment.cli_overrides`) that remembers
        each job the script submits, then calls `on_submit` with its JobClient."""

        def submitted(client: Any) -> None:
            self.jobs.append((client.jobmaster.spec.faults, client.jobmaster))
            on_submit(client)

        return submitted

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around the script's run: write run.json when it ends, however it ends."""
        error = None
        try:
            yield
        except SystemExit as e:
            if e.code not in (0, None):
                error = f"the script exited with status {e.code}"
            raise
        except BaseException as e:
            error = str(e) or type(e).__name__
            raise
        finally:
            self.write(error)

    # what the run did -----------------------------------------------------------------------
    def write(self, error: str | None) -> None:
        """Write run.json: the sinks, and per job the planned faults and what happened;
        `error`: why the script failed (None: it succeeded)."""
        result = {
            "error": error,
            "sinks": self.sinks,
            "jobs": [_job_result(plan, jm) for plan, jm in self.jobs],
        }
        with open(self.result_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


def _ordered(sink: Transformation, parallelism: int) -> bool:
    """Whether the records reach `sink` in one defined order: every transformation up to it
    has parallelism 1 and one input at most (no interleaving of parallel streams)."""
    stack = [sink]
    while stack:
        t = stack.pop()
        if (t.parallelism or parallelism) != 1 or len(t.inputs) > 1:
            return False
        stack.extend(u for u, _ in t.inputs)
    return True


def _job_result(plan: FaultPlan | None, jm: Any) -> dict[str, Any]:
    counts = jm.stats.checkpoints.counts
    return {
        "job_id": jm.job_id,
        "status": jm.status.name,
        "restarts": jm.stats.restarts,
        "checkpoints_completed": counts.completed,
        "checkpoints_failed": counts.failed,
        "planned_faults": [
            {**dataclasses.asdict(f), "kind": str(f.kind), "description": f.describe()}
            for f in (plan.faults if plan is not None else ())
        ],
    }


def plan_path(run_dir: str) -> str:
    return os.path.join(run_dir, "plan.json")


def _save_plan(plan: FaultPlan, path: str) -> None:
    data = [{**dataclasses.asdict(f), "kind": str(f.kind)} for f in plan.faults]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"faults": data, "log_path": plan.log_path, "driver": plan.driver}, f)
    os.replace(path + ".tmp", path)


def load_plan(run_dir: str) -> FaultPlan | None:
    """The plan a run under faults wrote when it built its job (None: not yet)."""
    path = plan_path(run_dir)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    faults = tuple(Fault(**{**d, "kind": FaultKind(d["kind"])}) for d in data["faults"])
    return FaultPlan(faults, data["log_path"], data["driver"])
