"""tidegate's Python worker daemon (deploy/worker_daemon.py) forks Spark's workers: what it
imports must start no thread, Python's or native (forking a process with threads is unsafe)."""

from __future__ import annotations

import subprocess
import sys


def test_the_daemons_imports_start_no_thread():
    probe = (
        "import os, sys, threading, tidegate.deploy.worker_daemon, pyspark.daemon; "
        "print(threading.active_count(), len(os.listdir('/proc/self/task')), "
        "'tidegate.runtime.slot' in sys.modules, 'pyspark.worker' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["1", "1", "True", "True"]
