"""A slot: one worker process (one task of the Spark barrier stage) hosting subtask i of every
vertex. Steps (numbered as in the code):

1. open the control connection, then the data listener (on the interface that reaches the
   driver), register with the driver;
2. receive every slot's data address from the driver (the address exchange);
3. prove it sees the driver's storage (checkpoint/shared_storage.py), connect output channels
   and create the subtasks (state is restored here);
4. run every subtask on its own thread and report metrics;
5. end: report success, or the first error with its traceback, to the driver.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidegate.checkpoint.shared_storage import verify_check
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common.record_codec import batch_codec
from tidegate.runtime import faults
from tidegate.runtime.addresses import is_wildcard
from tidegate.runtime.collector import tuned_collector
from tidegate.runtime.control import ControlClient
from tidegate.runtime.deployment import Deployment
from tidegate.runtime.faults import FaultyCheckpointStorage
from tidegate.runtime.frames import TypedEdge
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import (
    CancelSlot,
    RegisterSlot,
    SlotAddresses,
    SlotFailed,
    SlotFinished,
    SlotMetrics,
    SlotStartup,
    SubtaskMetrics,
    TriggerCheckpoint,
)
from tidegate.runtime.network import RecordWriter, SlotNetwork, advertised_address
from tidegate.runtime.output import forward_output
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.switch_interval import switch_interval
from tidegate.runtime.task import StreamTask
from tidegate.runtime.task_environment import TaskEnvironment
from tidegate.state.local_recovery import LocalStateStore, default_local_root

ADDRESS_TIMEOUT_S = 120.0
METRICS_INTERVAL_S = 1.0


class SlotCancelledError(Exception):
    pass


def run_slot(
    deployment: Deployment,
    slot: int,
    host: str | None = None,
    startup: SlotStartup | None = None,
) -> None:
    """Run slot `slot` of the attempt `deployment` describes, until its subtasks end (`host`:
    its executor's host as Spark names it, None: the machine's name; `startup`: when its task
    started and loaded the job, reported to the driver)."""
    subtasks = deployment.graph.subtasks_in_slot(slot)
    gates = {v: InputGate(deployment.queue_capacity) for v, _ in subtasks}
    # Step 1
    control = ControlClient(
        deployment.driver_address, deployment.secret, deployment.heartbeat_timeout_s
    )
    try:
        network = SlotNetwork(
            slot,
            deployment.secret,
            _data_bind(deployment.bind_host, control),
            gates,
            typed_edges(deployment.graph),
            deployment.heartbeat_timeout_s,
        )
    except BaseException:
        control.close()
        raise
    faults.install(
        deployment.faults, slot, deployment.attempt, deployment.restored_checkpoint_id, network
    )
    inbox = _SlotInbox(deployment.graph, subtasks, gates, network.close)
    control.start_reader(inbox.on_message, inbox.on_driver_lost)
    _register(control, deployment, slot, network, host or socket.gethostname(), startup)
    # from now on (the driver takes nothing before the registration) until the end, print()
    # and logging go to the driver
    output = contextlib.ExitStack()
    output.enter_context(forward_output(control, deployment.attempt, slot, deployment.log_level))
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidegate-async")
    try:
        # Step 2
        addresses = inbox.wait_for_addresses(slot)
        # Step 3
        _check_shared_storage(deployment, subtasks, control)
        env = _task_environment(deployment, control, executor)
        tasks = [
            _create_task(deployment, env, network, addresses, gates[vertex_id], vertex_id, index)
            for vertex_id, index in subtasks
        ]
        # Step 4
        tasks_created = time.time()
        faults.subtasks_running()
        with (
            tuned_collector(deployment.gc_threshold),
            switch_interval(deployment.switch_interval_us),
        ):
            _run_tasks(tasks, control, deployment, slot, network, inbox.cancelled, tasks_created)
        executor.shutdown(wait=True)
        if env.local_state is not None:
            env.local_state.remove_job()  # the job finished: no restart needs the copies
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
        output.close()
        control.close()
        faults.uninstall()


class _SlotInbox:
    """Routes the driver's messages to the subtasks' gates (the control connection's reader
    thread calls `on_message`), and holds the address book of the address exchange."""

    def __init__(
        self,
        graph: JobGraph,
        subtasks: list,
        gates: dict[int, InputGate],
        close_network: Callable[[], None],
    ) -> None:
        self.graph, self.subtasks, self.gates = graph, subtasks, gates
        self.close_network = close_network
        self.addresses: dict[int, tuple[str, int]] = {}
        self.got_addresses = threading.Event()
        self.cancelled = threading.Event()

    def on_message(self, msg: Any) -> None:
        faults.on_message(msg)
        match msg:
            case SlotAddresses(addresses=addrs):
                self.addresses.update(addrs)
                self.got_addresses.set()
            case TriggerCheckpoint(options=options):
                # unaligned or with an alignment timeout: every subtask, else the sources
                to_all = options.unaligned or options.aligned_timeout_ms is not None
                for v, _ in self.subtasks:
                    if to_all or self.graph.vertices[v].is_source:
                        self.gates[v].put_control(msg)
            case CancelSlot():
                self.cancelled.set()
                self.got_addresses.set()
                for g in self.gates.values():
                    g.put_control(msg)
                    g.close()
                # the attempt is over: wake subtasks blocked sending to a peer that may be
                # gone (data connections have no send timeout, runtime/connect.py)
                self.close_network()
            case _:
                for g in self.gates.values():
                    g.put_control(msg)

    def on_driver_lost(self) -> None:
        """The driver is gone, or cut off for the heartbeat timeout (runtime/connect.py):
        nobody can complete a checkpoint any more, so the slot ends."""
        self.on_message(CancelSlot("lost the connection to the driver"))

    def wait_for_addresses(self, slot: int) -> dict[int, tuple[str, int]]:
        if not self.got_addresses.wait(ADDRESS_TIMEOUT_S):
            raise TimeoutError(
                f"slot {slot} got no peer addresses from the driver within {ADDRESS_TIMEOUT_S}s"
            )
        if self.cancelled.is_set():
            raise SlotCancelledError()
        return self.addresses


def _data_bind(bind_host: str, control: ControlClient) -> str:
    """Where the slot's data listener binds: `bind_host`, but instead of all interfaces only
    the one that reaches the driver, the address the slot advertises to its peers (_register):
    nothing else of the host needs to accept a connection."""
    return control.conn_local_host() if is_wildcard(bind_host) else bind_host


def _register(
    control: ControlClient,
    deployment: Deployment,
    slot: int,
    network: Any,
    host: str,
    startup: SlotStartup | None,
) -> None:
    # the interface that reaches the driver is the one peers can reach us on, too
    local_host = control.conn_local_host()
    control.send(
        RegisterSlot(
            deployment.attempt,
            slot,
            os.getpid(),
            host,
            advertised_address(network.address, local_host),
            startup,
        )
    )


def _check_shared_storage(
    deployment: Deployment, subtasks: list[tuple[int, int]], control: ControlClient
) -> None:
    """Read the driver's check files of the checkpoint directory and of the sink paths this
    slot's subtasks write to: StorageNotSharedError if one is not the same storage here."""
    hosted = {vertex_id for vertex_id, _ in subtasks}
    host = f"{socket.gethostname()} ({control.conn_local_host()})"
    for check in deployment.storage_checks:
        if check.vertex_id is None or check.vertex_id in hosted:
            verify_check(check, deployment.filesystems, host)


def _task_environment(
    deployment: Deployment, control: ControlClient, executor: ThreadPoolExecutor
) -> TaskEnvironment:
    storage_class = CheckpointStorage if deployment.faults is None else FaultyCheckpointStorage
    storage = storage_class(
        deployment.checkpoint_base,
        deployment.job_id,
        deployment.filesystems,
        generation=deployment.generation,
    )
    local_state = None
    if deployment.local_recovery:
        root = deployment.local_recovery_dir or default_local_root()  # this host's temp dir
        local_state = LocalStateStore(root, deployment.job_id)
    return TaskEnvironment.of(deployment, control, storage, executor, local_state)


def _create_task(
    deployment: Deployment,
    env: TaskEnvironment,
    network: SlotNetwork,
    addresses: dict[int, tuple[str, int]],
    gate: InputGate,
    vertex_id: int,
    index: int,
) -> StreamTask:
    """Subtask `index` of vertex `vertex_id`, its output channels connected (its state is
    restored while it is created)."""
    graph = deployment.graph
    vertex = graph.vertices[vertex_id]
    writers = {
        edge_id: _record_writer(deployment, network, addresses, edge_id, index)
        for spec in vertex.operators
        for edge_id in spec.network_outputs
    }
    return StreamTask(
        env=env,
        vertex=vertex,
        subtask=index,
        gate=gate,
        writers=writers,
        num_channels=len(graph.input_channels(vertex_id, index)),
        channel_inputs=graph.channel_inputs(vertex_id, index),
        restored=deployment.restore.get((vertex_id, index)),
    )


def report_load_failure(header: tuple, slot: int, error: BaseException) -> None:
    """Tell the driver that this worker could not load the job, with what to do about it."""
    address, secret, attempt = header
    hint = ""
    if isinstance(error, ModuleNotFoundError | AttributeError | ImportError):
        hint = (
            " — the code that defines your functions must be importable on every worker: "
            "define them in the job script or a module in its directory (shipped unless "
            "tidegate.python.ship-script-dir is false), ship other modules with "
            "env.add_python_file(path) and packages with env.set_python_requirements(file), "
            "or install them on the executors"
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
    typed = network.typed_edges.get(edge_id)  # computed once per slot
    return RecordWriter(channels, route, deployment.batch_size, route_ts, typed)


def typed_edges(graph: JobGraph) -> dict[int, TypedEdge]:
    """Every edge whose records have a declared type, by edge id, with its codec and the
    operator that declared the type."""
    out = {}
    for edge_id, edge in graph.edges.items():
        codec = batch_codec(edge.type_info)
        if codec is not None:
            source = graph.vertices[edge.source_vertex]
            name = next(op.name for op in source.operators if op.op_id == edge.source_op)
            out[edge_id] = TypedEdge(edge_id, codec, f"operator {name!r} ({source.name})")
    return out


def _run_tasks(tasks, control, deployment, slot, network, cancelled, tasks_created) -> None:
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
        # Flink's task name: its log records name the subtask by it (runtime/output.py)
        threading.Thread(target=run, args=(t,), name=t.name, daemon=True)
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
        control.send(SlotMetrics(deployment.attempt, slot, metrics, now, tasks_created))
    if cancelled.is_set():  # errors then are of the cancellation (closed connections)
        raise SlotCancelledError()
    if errors:
        raise errors[0]
