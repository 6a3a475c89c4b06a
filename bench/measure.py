"""Measurements: the bare-loop baseline, one benchmark job run, and one recovery run.

Clocks: everything compared across processes (sink markers written by slots, the kill, status
transitions seen by the driver) uses `time.time()`; the machine is one host, so it is shared.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from bench.jobs import (
    JobParams,
    build_env,
    committed_records,
    first_record_times,
    read_sink_stats,
)
from tidegate.common.configuration import Configuration

# bare loop ------------------------------------------------------------------------------------
BARE_LOOP_SOURCE = """
counts = {}
out = []
for i in range(n):
    event = (i % 10_000, 1)
    key = event[0]
    count = counts.get(key, 0) + event[1]
    counts[key] = count
    out.append((key, count))
"""


def bare_keyed_count(numbers: Iterable[int], counts: dict[int, int]) -> list:
    """The bare loop's work over `numbers`, counting into `counts`: `(key, count)` per event."""
    out = []
    for i in numbers:
        event = (i % 10_000, 1)
        key = event[0]
        count = counts.get(key, 0) + event[1]
        counts[key] = count
        out.append((key, count))
    return out


def _bare_loop_function(n: int) -> None:
    bare_keyed_count(range(n), {})


def bare_loop(n: int, *, scope: str = "function") -> float:
    """Events/s of the work of a keyed count done by hand on one core.

    scope "function": the loop inside a function (local variables; what a fair engine loop
    gets). scope "script": the same statements run at a module's top level (global variables),
    which is what a naive timing script measures and is about half as fast.
    """
    if scope == "function":
        started = time.perf_counter()
        _bare_loop_function(n)
    else:
        code = compile(BARE_LOOP_SOURCE, "<bare-loop>", "exec")
        namespace = {"n": n}
        started = time.perf_counter()
        exec(code, namespace)
    return n / (time.perf_counter() - started)


# CPU accounting (how much of the machine other users took during a run) -------------------------
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_jiffies() -> int:
    """Busy CPU time of the whole machine (user+nice+system+irq+softirq+steal), in jiffies."""
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:9]))
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]


def _tree_jiffies(root: int) -> int:
    """CPU time of `root` and its descendants (reaped children are in their parent's cutime)."""
    procs: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(")") + 2 :].split()
        procs[int(name)] = (int(rest[1]), sum(map(int, rest[11:15])))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += procs.get(pid, (0, 0))[1]
        stack.extend(children.get(pid, ()))
    return total


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds `root` and its descendants have used so far."""
    return _tree_jiffies(root) / _CLK_TCK


class CpuMonitor:
    """Cores used by this benchmark's process tree and by everything else, over an interval."""

    def __init__(self) -> None:
        self.available = os.path.exists("/proc/stat")
        self.start = self._sample() if self.available else None

    @staticmethod
    def _sample() -> tuple[float, int, int]:
        return time.monotonic(), _busy_jiffies(), _tree_jiffies(os.getpid())

    def stop(self) -> dict[str, float | None]:
        if not self.available:
            return {"own_cores": None, "other_cores": None}
        t0, busy0, own0 = self.start
        t1, busy1, own1 = self._sample()
        wall = max(t1 - t0, 1e-9)
        own = (own1 - own0) / _CLK_TCK / wall
        other = max((busy1 - busy0) / _CLK_TCK / wall - own, 0.0)
        return {"own_cores": own, "other_cores": other}


# one job --------------------------------------------------------------------------------------
class Probe:
    """Samples a running JobMaster: status transitions and completed checkpoints."""

    def __init__(self, jm: Any) -> None:
        self.jm = jm
        self.transitions: list[tuple[float, str, int]] = []  # (wall time, status, attempt)
        self.checkpoints: dict[int, dict[str, Any]] = {}
        self.records_in: list[tuple[float, int]] = []

    def sample(self) -> None:
        jm, now = self.jm, time.time()
        status = jm.status.name
        if not self.transitions or self.transitions[-1][1:] != (status, jm.attempt):
            self.transitions.append((now, status, jm.attempt))
        cp = jm.stats.last_checkpoint
        if cp is not None and cp.checkpoint_id not in self.checkpoints:
            self.checkpoints[cp.checkpoint_id] = {
                "checkpoint_id": cp.checkpoint_id,
                "duration_ms": cp.duration_ms,
                "size_bytes": cp.size_bytes,
                "timestamp_ms": cp.timestamp_ms,
                "completed_ms": cp.completed_ms,
            }
        ri = jm.stats.records_in
        if not self.records_in or self.records_in[-1][1] != ri:
            self.records_in.append((now, ri))

    def first_time(self, status: str, min_attempt: int = 0, after: float = 0.0) -> float | None:
        for t, s, a in self.transitions:
            if s == status and a >= min_attempt and t >= after:
                return t
        return None


def _ack_phases(jm: Any) -> dict[int, dict[str, float]]:
    """Per checkpoint: the slowest subtask's synchronous and asynchronous phase, alignment and
    start delay (ms), the in-flight bytes persisted, and whether any subtask went unaligned."""
    phases: dict[int, dict[str, Any]] = {}
    for checkpoint in jm.stats.checkpoints.history():
        acks = list(checkpoint.subtasks.values())
        if not acks:
            continue
        phases[checkpoint.checkpoint_id] = {
            "sync_ms": max(a.sync_duration_ms for a in acks),
            "async_ms": max(a.async_duration_ms for a in acks),
            "alignment_ms": max(a.alignment_duration_ms for a in acks),
            "start_delay_ms": max(a.start_delay_ms for a in acks),
            "channel_state_bytes": sum(a.persisted_data for a in acks),
            "unaligned": any(a.unaligned for a in acks),
        }
    return phases


def run_job(
    params: JobParams,
    *,
    runner: str,
    spark: Any,
    work_root: str,
    poll_s: float = 0.02,
    timeout_s: float = 900.0,
    keep_output: bool = False,
    collect: Callable[[str], Any] | None = None,
    configuration: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one bounded job to the end; return its timings, checkpoints and correctness check
    (and under "collected", what `collect(work directory)` returns, read before it is removed;
    `configuration`: more settings of the job, e.g. `spark.*` for the session it starts).
    """
    work_dir = tempfile.mkdtemp(prefix="job-", dir=work_root)
    env = build_env(params, runner=runner, work_dir=work_dir, spark=spark)
    env.configure(Configuration().add_all(configuration or {}))
    load_before = os.getloadavg()[0]
    cpu = CpuMonitor()
    submitted = time.time()
    client = env.execute_async(params.label)
    jm = client.jobmaster
    probe = Probe(jm)
    deadline = time.monotonic() + timeout_s
    while not jm.done.wait(poll_s):
        probe.sample()
        if time.monotonic() > deadline:
            client.cancel()
            jm.done.wait(60)
            break
    probe.sample()
    done = time.time()
    cores = cpu.stop()
    error = None
    try:
        client.get_job_execution_result().result(timeout=60)
    except Exception as e:  # reported, not raised: one bad run must not lose the others
        error = f"{type(e).__name__}: {e}"
    sink = read_sink_stats(os.path.join(work_dir, "markers"))
    expected = params.expected_sink_records()
    committed = committed_records(params, work_dir)
    running = probe.first_time("RUNNING")
    steady_s = (sink["last"] - sink["first"]) if sink["first"] is not None else None
    phases = _ack_phases(jm)
    checkpoints = []
    for cid, cp in sorted(probe.checkpoints.items()):
        checkpoints.append({**cp, **phases.get(cid, {})})
    result = {
        "params": asdict(params),
        "error": error,
        "status": jm.status.name,
        "wall_s": done - submitted,
        "to_running_s": (running - submitted) if running else None,
        "running_s": (done - running) if running else None,
        "first_record_after_submit_s": (sink["first"] - submitted) if sink["first"] else None,
        "after_last_record_s": (done - sink["last"]) if sink["last"] else None,
        "steady_s": steady_s,
        "steady_rate": (params.records / steady_s) if steady_s else None,
        "running_rate": (params.records / (done - running)) if running else None,
        "sink_records": sink["count"],
        "slot_code": sink["code"],
        "committed_records": committed,
        "expected_records": expected,
        "exactly_once_ok": committed == expected and sink["count"] == expected,
        "completed_checkpoints": jm.stats.completed_checkpoints,
        "failed_checkpoints": jm.stats.failed_checkpoints,
        "restarts": jm.stats.restarts,
        "checkpoints": checkpoints,
        "submitted": submitted,
        "first_record": sink["first"],
        "startup": jm.stats.startup.to_json(),
        **cores,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    if collect is not None:
        result["collected"] = collect(work_dir)
    if not keep_output:
        shutil.rmtree(work_dir, ignore_errors=True)
    return result


# recovery -------------------------------------------------------------------------------------
def run_recovery(
    params: JobParams,
    *,
    runner: str,
    spark: Any,
    work_root: str,
    kill_after_checkpoints: int = 2,
    kill_slot: int = -1,
    timeout_s: float = 120.0,
    configuration: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Kill a slot's worker with SIGKILL after `kill_after_checkpoints` completed checkpoints of
    an unbounded job; measure from the kill to (a) RESTARTING and back to RUNNING and (b) the
    first record reaching the sink after the restore (and the records-in metric rising)."""
    work_dir = tempfile.mkdtemp(prefix="recovery-", dir=work_root)
    markers = os.path.join(work_dir, "markers")
    env = build_env(params, runner=runner, work_dir=work_dir, spark=spark)
    env.configure(Configuration().add_all(configuration or {}))
    submitted = time.time()
    client = env.execute_async(params.label)
    jm = client.jobmaster
    probe = Probe(jm)
    result: dict[str, Any] = {"params": asdict(params), "error": None}
    try:
        deadline = time.monotonic() + timeout_s
        while not (
            jm.status.name == "RUNNING" and jm.stats.completed_checkpoints >= kill_after_checkpoints
        ):
            if jm.done.is_set() or time.monotonic() > deadline:
                raise RuntimeError(f"job never reached {kill_after_checkpoints} checkpoints")
            probe.sample()
            time.sleep(0.01)
        latest_before = jm.store.latest()
        pids = sorted(jm.slot_pids.items())
        slot, pid = pids[kill_slot]
        records_at_kill = jm.stats.records_in
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        # Poll fast: with a 0 ms restart delay, RESTARTING may last only a moment.
        first_new: float | None = None
        metrics_rising: float | None = None
        ri_at_running: int | None = None
        while time.monotonic() < deadline and not jm.done.is_set():
            probe.sample()
            running_again = probe.first_time("RUNNING", min_attempt=1, after=killed)
            if running_again is not None and metrics_rising is None:
                # The JobMaster clears its counters for a new attempt, but `records_in` keeps
                # the old attempt's total until the first report of the new one (slots report
                # once a second): "rising" is the first new value > 0 after RUNNING.
                ri = jm.stats.records_in
                if ri_at_running is None:
                    ri_at_running = ri
                elif ri != ri_at_running and ri > 0:
                    metrics_rising = time.time()
            if first_new is None:
                times = first_record_times(markers, attempt=1) if os.path.isdir(markers) else []
                if times:
                    first_new = min(times)
            if first_new is not None and metrics_rising is not None:
                break
            time.sleep(0.002)
        restarting = probe.first_time("RESTARTING", after=killed)
        running = probe.first_time("RUNNING", min_attempt=1, after=killed)

        def since_kill(t: float | None) -> float | None:
            return (t - killed) if t is not None else None

        result.update(
            {
                "killed_slot": slot,
                "killed_pid": pid,
                "kill_after_s": killed - submitted,
                "checkpoints_before_kill": jm.stats.completed_checkpoints,
                "latest_checkpoint_before_kill": latest_before.checkpoint_id
                if latest_before
                else None,
                "restored_from": jm.stats.restored_from,
                "attempt": jm.attempt,
                "records_in_at_kill": records_at_kill,
                "to_restarting_s": since_kill(restarting),
                "to_running_s": since_kill(running),
                "to_first_record_s": since_kill(first_new),
                "to_metrics_rising_s": since_kill(metrics_rising),
                "transitions": [(round(t - killed, 4), s, a) for t, s, a in probe.transitions],
                "killed": killed,
                "first_record": first_new,
                "startup": jm.stats.startup.to_json(),
            }
        )
        if first_new is None:
            result["error"] = "no record reached the sink after the restart"
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        if configuration and "error" in result and result["error"] is None:
            time.sleep(1.5)  # every slot of the new attempt reported its metrics once
            result["restored_files"] = jm.stats.metrics.restored_files
        client.cancel()
        jm.done.wait(90)
        if jm.error is not None and jm.status.name not in ("CANCELED", "FINISHED"):
            result["job_error"] = str(jm.error)
        result["final_status"] = jm.status.name
        shutil.rmtree(work_dir, ignore_errors=True)
    return result


# summaries ------------------------------------------------------------------------------------
def summary(values: list[float | None]) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "samples": []}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "samples": vals,
    }
