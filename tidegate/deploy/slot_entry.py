"""Where every slot process begins, whichever runner started it (a Spark barrier task, a
process forked by the local runner's zygote, a `python -m tidegate.deploy.local_slot`): load
the packed deployment (`runners.pack_deployment`) and run the slot."""

from __future__ import annotations

import contextlib
import pickle
import time

import cloudpickle

from tidegate.deploy.python_deps import installed
from tidegate.metrics.startup import process_start_time
from tidegate.runtime.messages import SlotStartup


def run(
    payload: bytes, slot: int, host: str | None = None, task_started: float | None = None
) -> None:
    """Load the deployment and run slot `slot` (`task_started`: when the runner's task began,
    default now)."""
    task_started = time.time() if task_started is None else task_started
    from tidegate.runtime.slot import report_load_failure, run_slot

    header, python, body = pickle.loads(payload)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(installed(python))
            deployment = cloudpickle.loads(body)
        except Exception as e:
            report_load_failure(header, slot, e)
            raise
        startup = SlotStartup(task_started, time.time(), process_start_time())
        run_slot(deployment, slot, host, startup)
