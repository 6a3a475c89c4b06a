"""Runners start the slots of one attempt: `spark` (a barrier-mode stage, the default) and
`local` (plain processes, no JVM — for fast tests and debugging, like Flink's MiniCluster).

Both run the same `run_slot`; the JobMaster watches the slots through the control connection,
so a runner only has to start them, report when they are gone, and stop them on request."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tidegate.deploy import job_pickle, local_zygote, slot_entry
from tidegate.deploy.python_deps import PythonDependencies


def pack_deployment(deployment: Any, python: PythonDependencies | None = None) -> bytes:
    """The driver address and attempt travel outside the cloudpickled job, so a worker that
    cannot load the job (a module missing on the executors) can still say why; so does the
    job's Python code (deploy/python_deps.py), which must be importable before the job is
    unpickled."""
    header = (tuple(deployment.driver_address), deployment.secret, deployment.attempt)
    return pickle.dumps((header, python, job_pickle.dumps(deployment)))


# spark --------------------------------------------------------------------------------------
def _spark_partition(deployment_bytes: bytes):
    def run(iterator):
        task_started = time.time()
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        # Restarts are the JobMaster's job (a new Spark job, from the latest checkpoint), so a
        # task attempt Spark retried on its own just ends. (Stage retries are off in the
        # embedded session; on a user's session the JobMaster cancels the job group first.)
        if ctx.attemptNumber() == 0:
            slot = ctx.partitionId()
            # the executor's host as Spark names it: what preferred locations are matched with
            host = ctx.getTaskInfos()[slot].address.rsplit(":", 1)[0]
            slot_entry.run(deployment_bytes, slot, host, task_started)
        return iter([])

    return run


class SparkSlots:
    def __init__(
        self,
        context: Any,
        deployment_bytes: bytes,
        num_slots: int,
        on_end: Callable[[BaseException | None], None],
        preferred_hosts: Sequence[str | None] | None = None,
    ) -> None:
        self.sc = context
        self.preferred_hosts = preferred_hosts
        self.group = f"tidegate-{uuid.uuid4().hex}"
        self._cancelled = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(deployment_bytes, num_slots, on_end),
            daemon=True,
            name="tidegate-spark-job",
        )
        self._thread.start()

    def _run(self, deployment_bytes, num_slots, on_end) -> None:
        error = None
        try:
            self.sc.setJobGroup(self.group, "tidegate job", interruptOnCancel=True)
            if self._cancelled.is_set():
                raise RuntimeError("cancelled before the Spark job was submitted")
            if self.preferred_hosts is None:
                rdd = self.sc.parallelize(range(num_slots), num_slots)
            else:
                rdd = _placed_slots(self.sc, self.preferred_hosts)
            rdd.barrier().mapPartitions(_spark_partition(deployment_bytes)).collect()
        except BaseException as e:
            error = e
        on_end(error)

    def cancel(self) -> None:
        self._cancelled.set()
        self.sc.cancelJobGroup(self.group)

    def join(self, timeout: float) -> bool:
        # A cancel issued before Spark knew the job is lost, so repeat it while waiting.
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.5)
            if self._cancelled.is_set() and self._thread.is_alive():
                self.sc.cancelJobGroup(self.group)
        return not self._thread.is_alive()


def _placed_slots(sc: Any, hosts: Sequence[str | None]) -> Any:
    """An RDD of one partition per slot whose partition i prefers `hosts[i]`: PySpark's
    `parallelize` cannot say where a partition should run, Scala's `makeRDD` can. Its elements
    are pickles, as a Python RDD's are."""
    from pyspark.rdd import RDD
    from pyspark.serializers import CPickleSerializer

    jvm = sc._jvm
    convert = jvm.scala.jdk.javaapi.CollectionConverters.asScala
    items = jvm.java.util.ArrayList()
    for slot, host in enumerate(hosts):
        where = jvm.java.util.ArrayList()
        if host is not None:
            where.add(host)
        items.add(jvm.scala.Tuple2(bytearray(pickle.dumps(slot)), convert(where).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    located = sc._jsc.sc().makeRDD(convert(items).toSeq(), tag)
    return RDD(located.toJavaRDD(), sc, CPickleSerializer())


def start_spark(
    context: Any,
    deployment_bytes: bytes,
    num_slots: int,
    on_end: Callable[[BaseException | None], None],
    preferred_hosts: Sequence[str | None] | None = None,
) -> SparkSlots:
    """The slots as one barrier stage of `context` (a SparkContext); slot i preferably on
    `preferred_hosts[i]`."""
    return SparkSlots(context, deployment_bytes, num_slots, on_end, preferred_hosts)


# local --------------------------------------------------------------------------------------
class LocalSlots:
    """One process per slot, forked by the driver process's zygote (deploy/local_zygote.py), or
    a fresh `python -m tidegate.deploy.local_slot` process with the deployment on stdin.
    (Not multiprocessing: a spawned child would re-run the user's job script as __main__.)"""

    def __init__(
        self,
        deployment_bytes: bytes,
        num_slots: int,
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        self.processes = [local_zygote.start_slot(deployment_bytes, i) for i in range(num_slots)]
        self._watcher = threading.Thread(target=self._watch, args=(on_end,), daemon=True)
        self._watcher.start()

    def _watch(self, on_end) -> None:
        codes = [p.wait() for p in self.processes]
        bad = [(i, c) for i, c in enumerate(codes) if c != 0]
        on_end(RuntimeError(f"slot processes exited with codes {bad}") if bad else None)

    def cancel(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        # a stopped (SIGSTOP) or wedged process ignores SIGTERM: escalate
        threading.Timer(5.0, self._kill_remaining).start()

    def _kill_remaining(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.kill()

    def join(self, timeout: float) -> bool:
        self._watcher.join(timeout)
        return not self._watcher.is_alive()


def start_local(deployment_bytes: bytes, num_slots: int, on_end) -> LocalSlots:
    return LocalSlots(deployment_bytes, num_slots, on_end)
