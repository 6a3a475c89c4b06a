"""The Python worker daemon of the Spark sessions tidegate starts on a local master
(`spark.python.daemon.module`): PySpark's own daemon, with tidegate's slot code imported first.

Spark forks every Python worker from its daemon; the modules the daemon imported before forking
are already there in each worker, so a slot (of the first attempt, and of every restart, whose
workers are new forks) starts without importing tidegate's runtime again (~0.3-0.5 s of CPU per
worker). PySpark's own worker module (`pyspark.worker`, which each fork imports first) is imported
here too: 0.1-0.2 s less per forked worker. The imported modules start no thread (forking a
process with threads is unsafe: PySpark imports its worker module after the fork for this
reason; tests/unit/test_worker_daemon.py checks that these start none).
"""

from __future__ import annotations

# what each forked worker runs first
import pyspark.worker  # noqa: F401

# the slots' entry point and runtime; not the whole datastream API with every connector (its
# import on top slowed the first start in bench/startup.py more than it sped up restarts)
import tidegate.deploy.runners
import tidegate.runtime.slot  # noqa: F401

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
