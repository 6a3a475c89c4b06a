"""Helpers of the observability tests: a job observed while it runs, and plain HTTP requests to
the driver's REST server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.jobs import count_job
from tests.support.waiting import wait_until
from tidegate import rest
from tidegate.common.job_client import JobClient

PARALLELISM = 2


def start_observed_job(tmp: Path, name: str, *, n: int = 150_000, rate: float = 5_000) -> JobClient:
    """A keyed running count on Spark (source -> keyed count -> slow map -> FileSink) that
    runs for about n / rate seconds, checkpointing every 300 ms."""
    env = count_job(
        tmp / "out", tmp / "chk", runner="spark", n=n, parallelism=PARALLELISM, rate=rate,
        interval_ms=300, slow_sink_s=0.0001,
    )  # fmt: skip
    return env.execute_async(name)


def observed(client: JobClient, checkpoints: int = 2) -> bool:
    """Whether the job ran `checkpoints` checkpoints and every subtask reported its rates."""
    jm = client.jobmaster
    if jm.stats.completed_checkpoints < checkpoints:
        return False
    vertices = jm.stats.metrics.vertices_json()
    return all(s["rates-known"] and s["read-records"] > 0 for v in vertices for s in v["subtasks"])


def observed_job(tmp: Path, name: str, *, checkpoints: int = 2, n: int = 150_000) -> JobClient:
    """start_observed_job, once it completed `checkpoints` checkpoints and every subtask
    reported its rates (what the observability tests look at)."""
    client = start_observed_job(tmp, name, n=n)
    wait_until(
        lambda: observed(client, checkpoints),
        f"{checkpoints} checkpoint(s) and a metrics sample",
        job=client,
    )
    return client


def rest_url() -> str:
    server = rest.running_server()
    assert server is not None, "the REST server did not start with the first job"
    return server.url


def http(
    url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    """(status, parsed JSON or text, response headers) of one real HTTP request."""
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request) as response:
            status, raw, got = response.status, response.read(), response.headers
    except urllib.error.HTTPError as e:
        status, raw, got = e.code, e.read(), e.headers
    text = raw.decode()
    is_json = got.get("Content-Type", "").startswith("application/json")
    return status, json.loads(text) if is_json else text, got
