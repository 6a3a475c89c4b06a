"""JSON views of a JobMaster for the REST API (field names follow Flink's REST API where it has
the same thing). Pure functions of the JobMaster's current state; see docs/rest-api.md."""

from __future__ import annotations

import time
from typing import Any

from tidegate.common.configuration import redacted
from tidegate.common.job_status import JobStatus
from tidegate.metrics.checkpoint_stats import details_json
from tidegate.runtime.plan import JobGraph


def now_ms() -> int:
    return int(time.time() * 1000)


def job_overview(jm: Any, now: int) -> dict[str, Any]:
    """One line of `/jobs`: id, name, status and times (end-time -1 while it runs)."""
    timestamps = jm.stats.timeline.status_timestamps
    start = timestamps.get(JobStatus.INITIALIZING.value, now)
    end = timestamps.get(jm.status.value, now) if jm.status.is_globally_terminal_state() else -1
    return {
        "jid": jm.job_id,
        "name": jm.spec.job_name,
        "state": jm.status.value,
        "start-time": start,
        "end-time": end,
        "duration": (end if end >= 0 else now) - start,
        "last-modification": max(timestamps.values(), default=start),
        "runner": jm.spec.runner,
        "parallelism": jm.spec.graph.num_slots,
        "attempt": jm.attempt,
        "restarts": jm.stats.restarts,
    }


def job_detail(jm: Any, now: int) -> dict[str, Any]:
    """`/jobs/:id`: the overview, status timestamps, vertices with their metrics, the latest
    checkpoint, the error that ended the latest attempt, and each attempt's start-up."""
    stats = jm.stats
    counts = stats.checkpoints.counts
    error = jm.error
    return {
        **job_overview(jm, now),
        "now": now,
        "isStoppable": jm.status is JobStatus.RUNNING,
        "timestamps": dict(stats.timeline.status_timestamps),
        "vertices": stats.metrics.vertices_json(),
        "checkpoints": {
            "counts": counts.to_json(),
            "last-checkpoint-age": last_checkpoint_age_ms(jm, now),
        },
        "error": None if error is None else str(error),
        "startup": stats.startup.to_json(),
    }


def last_checkpoint_age_ms(jm: Any, now: int) -> int | None:
    """Milliseconds since the latest checkpoint or savepoint completed (None: none yet)."""
    latest = jm.stats.checkpoints.latest_completed
    return None if latest is None else max(now - latest.completed_ms, 0)


def ship_strategy(partitioner: Any) -> str:
    """Flink's name of an edge's partitioning: FORWARD, HASH, REBALANCE, SHUFFLE, BROADCAST."""
    name = type(partitioner).__name__.removesuffix("Partitioner")
    return "HASH" if name == "KeyGroupStream" else name.upper()


def plan_json(jm: Any) -> dict[str, Any]:
    """`/jobs/:id/plan`: vertices (operator chains), their operators, inputs and edges."""
    graph: JobGraph = jm.spec.graph
    nodes = []
    for vertex in graph.vertices.values():
        inputs = [
            {
                "num": n,
                "id": graph.edges[e].source_vertex,
                "edge": e,
                "ship_strategy": ship_strategy(graph.edges[e].partitioner),
                "exchange": "pipelined_bounded",
            }
            for n, e in enumerate(vertex.input_edges)
        ]
        nodes.append(
            {
                "id": vertex.vertex_id,
                "parallelism": vertex.parallelism,
                "operator": vertex.operators[0].name,
                "description": vertex.name,
                "is_source": vertex.is_source,
                "operators": [
                    {"id": op.op_id, "uid": op.uid, "name": op.name} for op in vertex.operators
                ],
                "inputs": inputs,
            }
        )
    edges = [
        {
            "id": edge.edge_id,
            "source": edge.source_vertex,
            "target": edge.target_vertex,
            "ship_strategy": ship_strategy(edge.partitioner),
        }
        for edge in graph.edges.values()
    ]
    return {
        "plan": {
            "jid": jm.job_id,
            "name": jm.spec.job_name,
            "type": "STREAMING",
            "max-parallelism": graph.max_parallelism,
            "nodes": nodes,
            "edges": edges,
        }
    }


def vertex_names(jm: Any) -> dict[int, tuple[str, int]]:
    return {v.vertex_id: (v.name, v.parallelism) for v in jm.spec.graph.vertices.values()}


def checkpoints_json(jm: Any, now: int) -> dict[str, Any]:
    """`/jobs/:id/checkpoints`: counts, summary, latest and history."""
    return jm.stats.checkpoints.to_json(now)


def checkpoint_details_json(jm: Any, checkpoint_id: int, now: int) -> dict[str, Any] | None:
    """`/jobs/:id/checkpoints/details/:cid`, or None if it is not in the history."""
    stats = jm.stats.checkpoints.checkpoint(checkpoint_id)
    return None if stats is None else details_json(stats, vertex_names(jm), now)


def checkpoint_config_json(jm: Any) -> dict[str, Any]:
    """`/jobs/:id/checkpoints/config` (Flink's shape)."""
    s = jm.spec.checkpoint
    retention = s.retention.value
    backend = jm.spec.state_backend
    return {
        "mode": "exactly_once" if s.exactly_once else "at_least_once",
        "interval": s.interval_ms if s.interval_ms is not None else -1,
        "timeout": s.timeout_ms,
        "min_pause": s.min_pause_ms,
        "max_concurrent": s.max_concurrent,
        "externalization": {
            "enabled": retention != "NO_EXTERNALIZED_CHECKPOINTS",
            "delete_on_cancellation": retention != "RETAIN_ON_CANCELLATION",
        },
        "state_backend": type(backend).__name__ if backend is not None else "HashMapStateBackend",
        "checkpoint_storage": "FileSystemCheckpointStorage",
        "checkpoint_storage_path": s.storage,
        "unaligned_checkpoints": s.unaligned,
        "aligned_checkpoint_timeout": s.aligned_timeout_ms,
        "tolerable_failed_checkpoints": s.tolerable_failures,
        "retained_checkpoints": s.max_retained,
    }


def config_json(jm: Any) -> dict[str, Any]:
    """`/jobs/:id/config`: the job's execution settings and configuration keys (the values of
    secrets hidden)."""
    spec, graph = jm.spec, jm.spec.graph
    strategy = spec.restart_strategy
    return {
        "jid": jm.job_id,
        "name": spec.job_name,
        "execution-config": {
            "execution-mode": "PIPELINED",
            "job-parallelism": graph.num_slots,
            "max-parallelism": graph.max_parallelism,
            "restart-strategy": strategy.describe() if hasattr(strategy, "describe") else None,
            "runner": spec.runner,
            "spark-master": spec.spark_master,
            "batch-size": spec.batch_size,
            "buffer-timeout": spec.buffer_timeout_ms,
            "queue-capacity": spec.queue_capacity,
            "restore-path": spec.restore_path,
            "user-config": redacted(spec.configuration),
        },
    }


def metrics_json(jm: Any, now: int) -> dict[str, Any]:
    """`/jobs/:id/metrics`: job totals and per-vertex and per-subtask metrics."""
    metrics = jm.stats.metrics
    return {
        "jid": jm.job_id,
        "timestamp": now,
        "updated": metrics.updated_ms,
        "attempt": jm.attempt,
        "records-read": metrics.records_read,
        "records-in": metrics.records_in,
        "records-per-second": round(metrics.records_per_s, 1),
        "last-checkpoint-age": last_checkpoint_age_ms(jm, now),
        "vertices": metrics.vertices_json(),
    }


def exceptions_json(jm: Any) -> dict[str, Any]:
    """`/jobs/:id/exceptions`: the failure history (newest first), restarts and restores."""
    stats = jm.stats
    return {
        **stats.timeline.to_json(),
        "restarts": stats.restarts,
        "restores": [r.to_json() for r in reversed(stats.checkpoints.restores())],
    }
