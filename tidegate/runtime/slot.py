"""A slot: one worker process (one task of the Spark barrier stage) hosting subtask i of every
vertex. Steps (numbered as in the code):

1. open the data listener and the control connection, register with the driver;
2. receive every slot's data address from the driver (the address exchange);
3. connect output channels and create the subtasks (state is restored here);
4. run every subtask on its own thread and report metrics;
5. end: report success, or the first error with its traceback, to the driver.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.control import ControlClient
from tidegate.runtime.deployment import Deployment
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import (
    CancelSlot,
    RegisterSlot,
    SlotAddresses,
    SlotFailed,
    SlotFinished,
    SlotMetrics,
    SubtaskMetrics,
    TriggerCheckpoint,
)
from tidegate.runtime.network import RecordWriter, SlotNetwork, advertised_address
from tidegate.runtime.task import StreamTask
from tidegate.state.local_recovery import LocalStateStore

ADDRESS_TIMEOUT_S = 120.0
METRICS_INTERVAL_S = 1.0


class SlotCancelledError(Exception):
    pass


def run_slot(deployment: Deployment, slot: int) -> None:
    graph = deployment.graph
    subtasks = graph.subtasks_in_slot(slot)
    gates = {v: InputGate(deployment.queue_capacity) for v, _ in subtasks}
    # Step 1
    network = SlotNetwork(slot, deployment.secret, deployment.bind_host, gates)
    control = ControlClient(deployment.driver_address, deployment.secret)
    addresses: dict[int, tuple[str, int]] = {}
    got_addresses = threading.Event()
    cancelled = threading.Event()

    def on_message(msg: Any) -> None:
        match msg:
            case SlotAddresses(addresses=addrs):
                addresses.update(addrs)
                got_addresses.set()
            case TriggerCheckpoint(options=options):
                # unaligned or with an alignment timeout: every subtask, else the sources
                to_all = options.unaligned or options.aligned_timeout_ms is not None
                for v, _ in subtasks:
                    if to_all or graph.vertices[v].is_source:
                        gates[v].put_control(msg)
            case CancelSlot():
                cancelled.set()
                got_addresses.set()
                for g in gates.values():
                    g.put_control(msg)
                    g.close()
            case _:
                for g in gates.values():
                    g.put_control(msg)

    def on_lost() -> None:  # the driver is gone: nobody can complete a checkpoint any more
        on_message(CancelSlot("lost the connection to the driver"))

    control.start_reader(on_message, on_lost)
    # the interface that reaches the driver is the one peers can reach us on, too
    local_host = control.conn_local_host()
    control.send(
        RegisterSlot(
            deployment.attempt,
            slot,
            os.getpid(),
            socket.gethostname(),
            advertised_address(network.address, local_host),
        )
    )
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidegate-async")
    tasks: list[StreamTask] = []
    try:
        # Step 2
        if not got_addresses.wait(ADDRESS_TIMEOUT_S):
            raise TimeoutError(
                f"slot {slot} got no peer addresses from the driver within {ADDRESS_TIMEOUT_S}s"
            )
        if cancelled.is_set():
            raise SlotCancelledError()
        # Step 3
        storage = CheckpointStorage(
            deployment.checkpoint_base, deployment.job_id, generation=deployment.generation
        )
        local_state = None
        if deployment.local_recovery_dir is not None:
            local_state = LocalStateStore(deployment.local_recovery_dir, deployment.job_id)
        for vertex_id, index in subtasks:
            vertex = graph.vertices[vertex_id]
            writers = {}
            for spec in vertex.operators:
                for edge_id in spec.network_outputs:
                    writers[edge_id] = _record_writer(
                        deployment, network, addresses, edge_id, index
                    )
            tasks.append(
                StreamTask(
                    vertex=vertex,
                    subtask=index,
                    num_channels=len(graph.input_channels(vertex_id, index)),
                    channel_inputs=graph.channel_inputs(vertex_id, index),
                    max_parallelism=graph.max_parallelism,
                    attempt=deployment.attempt,
                    exactly_once=deployment.exactly_once,
                    gate=gates[vertex_id],
                    writers=writers,
                    control=control,
                    storage=storage,
                    executor=executor,
                    restored=deployment.restore.get((vertex_id, index)),
                    is_restored=deployment.restored_checkpoint_id is not None,
                    batch_size=deployment.batch_size,
                    buffer_timeout_s=deployment.buffer_timeout_ms / 1000,
                    local_state=local_state,
                )
            )
        # Step 4
        _run_tasks(tasks, control, deployment, slot, network, cancelled)
        executor.shutdown(wait=True)
        if local_state is not None:
            local_state.remove_job()  # the job finished: no restart needs the copies
        control.send(SlotFinished(deployment.attempt, slot))
    except SlotCancelledError:
        pass
    except BaseException as e:
        # Step 5 (failure): tell the driver, which restarts the job. Once it knows, the slot
        # ends quietly (the driver reports the error to the user once, not every worker);
        # only if the driver cannot be told does the error go to the runner.
        reported = control.send(
            SlotFailed(
                deployment.attempt, slot, _describe(e), "".join(traceback.format_exception(e))
            )
        )
        if not reported or not isinstance(e, Exception):
            raise
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        for g in gates.values():
            g.close()
        network.close()
        control.close()


def report_load_failure(header: tuple, slot: int, error: BaseException) -> None:
    """Tell the driver that this worker could not load the job, with what to do about it."""
    address, secret, attempt = header
    hint = ""
    if isinstance(error, ModuleNotFoundError | AttributeError | ImportError):
        hint = (
            " — the code that defines your functions must be importable on every worker: "
            "define them in the job script, install your package on the executors, or ship it "
            "with spark-submit --py-files"
        )
    control = ControlClient(address, secret)
    try:
        control.send(
            SlotFailed(
                attempt,
                slot,
                f"could not load the job: {_describe(error)}{hint}",
                "".join(traceback.format_exception(error)),
            )
        )
    finally:
        control.close()


def _describe(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(e)).strip()


def _record_writer(deployment, network, addresses, edge_id: int, index: int) -> RecordWriter:
    graph = deployment.graph
    edge = graph.edges[edge_id]
    channels = []
    targets = graph.edge_targets(edge_id, index)
    for target in targets:
        channel = graph.input_channels(edge.target_vertex, target).index((edge_id, index))
        transport = network.transport(target, edge.target_vertex, addresses)
        channels.append((transport, channel))
    route = edge.partitioner.bind(len(targets), graph.max_parallelism)
    route_ts = edge.partitioner.bind_timestamped(len(targets), graph.max_parallelism)
    return RecordWriter(channels, route, deployment.batch_size, route_ts)


def _run_tasks(tasks, control, deployment, slot, network, cancelled) -> None:
    errors: list[BaseException] = []

    def run(task: StreamTask) -> None:
        try:
            task.run()
        except BaseException as e:
            errors.append(e)
            for t in tasks:  # one failed subtask fails the slot: stop the others
                t.gate.put_control(CancelSlot("another subtask of this slot failed"))
                t.gate.close()

    threads = [
        threading.Thread(target=run, args=(t,), name=f"tidegate-task-{t.vertex.name}", daemon=True)
        for t in tasks
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(METRICS_INTERVAL_S / len(threads))
        if network.error is not None and not errors:
            errors.append(network.error)
            for t in tasks:
                t.gate.close()
        now = time.perf_counter()
        metrics = {
            t.subtask_id: SubtaskMetrics(
                t.records_in, t.records_out, t.backpressured_s(now), t.idle_s, *t.restored_files
            )
            for t in tasks
        }
        control.send(SlotMetrics(deployment.attempt, slot, metrics, now))
    if errors:
        raise errors[0]
    if cancelled.is_set():
        raise SlotCancelledError()
