"""The SparkContext a job runs on: the running one, or an embedded `local[N]` one."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from tidegate.common.configuration import CLASS_ARCHIVE
from tidegate.deploy import class_archive
from tidegate.deploy.java import JavaRuntime, JavaUnavailableError, use_java
from tidegate.deploy.network_plan import is_local_master
from tidegate.runtime.addresses import LOOPBACK


class SparkUnavailableError(RuntimeError):
    pass


#: how long a job on a cluster master waits for executors with enough cores to register
EXECUTOR_WAIT_S = 60.0
#: the Spark setting naming the executors' Python (PySpark reads PYSPARK_PYTHON: spark-submit
#: turns the setting into it, and so does tidegate for the sessions it creates)
PYSPARK_PYTHON_CONF = "spark.pyspark.python"
#: the JVMs of a session tidegate creates (its driver, and on a cluster its executors): JIT
#: compiler C1 only (the job's own setting wins)
JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
#: the settings of the driver's and the executors' JVM options
DRIVER_OPTIONS_KEY = "spark.driver.extraJavaOptions"
EXECUTOR_OPTIONS_KEY = "spark.executor.extraJavaOptions"
#: PySpark's worker daemon with tidegate's slot code imported before it forks workers
WORKER_DAEMON = "tidegate.deploy.worker_daemon"
#: where the Spark driver binds its RPC server and block manager, and the address it advertises
_DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")


def executor_python(
    master: str | None, environ: Mapping[str, str], conf: Mapping[str, str], driver_python: str
) -> str | None:
    """The PYSPARK_PYTHON to set before tidegate creates a session (None: leave it as it is).

    Spark's own order first: `spark.pyspark.python` from the job's configuration, else
    PYSPARK_PYTHON as set. Only then, and only on a local master, the driver's interpreter
    (`driver_python`, which has tidegate): local executors run on this host. A cluster's
    executors run the Python their hosts have, so tidegate leaves Spark's default (`python3`).
    `master` None: spark-submit's own `--master`; spark-submit resolved the Python itself."""
    configured = conf.get(PYSPARK_PYTHON_CONF)
    if configured:
        return configured
    if "PYSPARK_PYTHON" in environ or master is None:
        return None
    return driver_python if is_local_master(master) else None


def loopback_driver_conf(
    master: str | None, environ: Mapping[str, str], conf: Mapping[str, str]
) -> dict[str, str]:
    """The settings that keep the Spark driver's own endpoints (its RPC server and block
    manager) on loopback in a session tidegate creates on a local master (`master` None:
    spark-submit's, left alone): its executors run on this host, and Spark's RPC is not
    authenticated unless `spark.authenticate` is on. Spark would otherwise bind the address of
    the host's name (or, when that is loopback, of its first interface). Nothing when the
    user chose: `spark.driver.host` / `spark.driver.bindAddress` set, or SPARK_LOCAL_IP."""
    chosen = "SPARK_LOCAL_IP" in environ or any(k in conf for k in _DRIVER_ADDRESS_KEYS)
    if master is None or not is_local_master(master) or chosen:
        return {}
    return dict.fromkeys(_DRIVER_ADDRESS_KEYS, LOOPBACK)


def task_slots(context: Any, num_slots: int) -> int:
    """The tasks Spark can run at once, as its barrier scheduling counts them (free executor
    cores of the registered executors); on a cluster master after waiting up to
    EXECUTOR_WAIT_S for executors to register (`defaultParallelism` would count only those
    registered, and at least 2 on a standalone master)."""
    scala = context._jsc.sc()
    profile = scala.resourceProfileManager().defaultResourceProfile()
    deadline = time.monotonic() + (0 if is_local_master(context.master) else EXECUTOR_WAIT_S)
    while (slots := scala.maxNumConcurrentTasks(profile)) < num_slots:
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return slots


def archive_plan(
    runtime: JavaRuntime, conf: Mapping[str, str], environ: Mapping[str, str]
) -> class_archive.ArchivePlan:
    """The driver JVM's options of a session tidegate starts: C1 only, and the class-data-
    sharing archive of this Java and Spark installation (deploy/class_archive.py) unless
    `tidegate.spark.class-archive` is false. (The job's own `spark.driver.extraJavaOptions`
    replaces them all.)"""
    if conf.get(CLASS_ARCHIVE, "true").strip().lower() == "false":
        return class_archive.ArchivePlan(JVM_OPTIONS)
    jars = class_archive.spark_jars_directory()
    key = class_archive.installation_key(runtime.java, jars, environ, conf)
    directory = class_archive.cache_directory(environ)
    return class_archive.plan(directory, key, JVM_OPTIONS, lambda: class_archive.start_writer(conf))


def spark_context(
    master: str | None,
    num_slots: int,
    conf: dict[str, str] | None = None,
    *,
    check_slots: bool = True,
) -> Any:
    """The running SparkContext, or one started on `master` (default `local[N]`, N =
    max(slots, cores)) with the `spark.*` entries of `conf` (the job's configuration: `tidegate
    run --conf spark.driver.host=...`); a running context keeps its own settings. Only the
    context: the slots need no SQL session (its start in the JVM took another 1-1.5 s).

    `check_slots`: wait for Spark to offer `num_slots` task slots (on a cluster, for its
    executors to register) and fail if it does not; without it the context is returned at once
    (for checks that need only the master and the driver's address)."""
    from pyspark import SparkContext

    # getActiveSession() is per thread; the JobMaster runs on its own thread, so look for a
    # running SparkContext instead (the user's session's, or one spark-submit started).
    context = SparkContext._active_spark_context
    if context is None:
        context = _start_context(master, num_slots, conf or {})
        context.setLogLevel("ERROR")
    elif master is not None and context.master != master:
        raise SparkUnavailableError(
            f"a SparkSession on {context.master!r} is already active in this process; "
            f"cannot switch to {master!r}. Stop it first or leave spark.master unset."
        )
    if not check_slots:
        return context
    cores = task_slots(context, num_slots)
    if cores < num_slots:
        raise SparkUnavailableError(
            f"the job needs {num_slots} slots (its highest parallelism), but Spark offers "
            f"{cores} task slots ({context.master}); barrier mode starts every slot at "
            "once. Lower the parallelism or give Spark more cores (e.g. local[N])."
        )
    return context


def _start_context(master: str | None, num_slots: int, conf: dict[str, str]) -> Any:
    try:
        runtime = use_java()
    except JavaUnavailableError as e:
        raise SparkUnavailableError(str(e)) from None
    # under spark-submit the master comes from its --master; else the embedded default
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = f"local[{max(num_slots, os.cpu_count() or 1, 4)}]"
    # the JVM only schedules the slots (records never pass through it): compiling with C1
    # only starts it about twice as fast, and so does a class-data-sharing archive
    # (docs/spark.md, bench/startup.py); under spark-submit the JVM is already running
    archive = class_archive.ArchivePlan(JVM_OPTIONS)
    if "PYSPARK_GATEWAY_PORT" not in os.environ and DRIVER_OPTIONS_KEY not in conf:
        archive = archive_plan(runtime, conf, os.environ)
    try:
        return start_context(master, conf, archive.java_options)
    except Exception:
        if archive.archive is None:
            raise
        archive.discard()  # an archive must never fail a job: start without it
        return start_context(master, conf, JVM_OPTIONS)


def start_context(master: str | None, conf: Mapping[str, str], java_options: str) -> Any:
    """A SparkContext on `master` with tidegate's settings, the driver JVM's `java_options`
    and the `spark.*` entries of `conf` (which win)."""
    from pyspark import SparkConf, SparkContext

    python = executor_python(master, os.environ, conf, sys.executable)
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = SparkConf()  # under spark-submit: its settings, spark.master among them
    if master is not None:
        settings.setMaster(master)
    settings.setAppName("tidegate").setAll(
        [
            ("spark.ui.enabled", "false"),
            ("spark.ui.showConsoleProgress", "false"),
            ("spark.python.worker.reuse", "true"),
            ("spark.stage.maxConsecutiveAttempts", "1"),
            # a barrier stage waiting for free slots re-checks every second, not every 15 s
            ("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s"),
            ("spark.sql.shuffle.partitions", "4"),
        ]
    )
    settings.set(DRIVER_OPTIONS_KEY, java_options)
    if master is not None and is_local_master(master):
        # workers forked with tidegate already imported (deploy/worker_daemon.py); on a
        # cluster the executors' Python may lack tidegate until the job ships it
        settings.set("spark.python.daemon.module", WORKER_DAEMON)
    elif master is not None:
        # a cluster starts executor JVMs for this application: they too only schedule
        settings.set(EXECUTOR_OPTIONS_KEY, JVM_OPTIONS)
    settings.setAll(loopback_driver_conf(master, os.environ, conf).items())
    # the job's spark.* entries win
    settings.setAll(
        (k, v) for k, v in conf.items() if k.startswith("spark.") and k != "spark.master"
    )
    return SparkContext(conf=settings)


def get_spark(master: str | None, num_slots: int, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession on `spark_context`'s context, for callers that use Spark's SQL API too
    (the state processor's readers, tests, benchmarks)."""
    from pyspark.sql import SparkSession

    return SparkSession(spark_context(master, num_slots, conf))
