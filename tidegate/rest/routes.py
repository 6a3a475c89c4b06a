"""The REST API's endpoints (docs/rest-api.md): each is a function of the request that returns
(HTTP status, JSON body) or raises RestError. Paths follow Flink's REST API."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.metrics.checkpoint_stats import details_json
from tidegate.rest import views
from tidegate.rest.operations import OperationKind, Operations
from tidegate.rest.registry import JobRegistry


class RestError(Exception):
    """An error answer: its HTTP status and a message for the `errors` list."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    #: the parsed JSON body (None without one)
    body: Any = None


Handler = Callable[["RestApi", re.Match, Request], tuple[int, Any]]
_ROUTES: list[tuple[str, re.Pattern, Handler]] = []
_JOB = r"/jobs/(?P<job>[0-9A-Za-z_-]+)"


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        _ROUTES.append((method, re.compile(pattern.replace("{job}", _JOB) + "/?"), handler))
        return handler

    return register


class RestApi:
    """Answers requests about the jobs of a registry. Thread-safe."""

    def __init__(self, registry: JobRegistry, refresh_interval_ms: int = 3000) -> None:
        self.registry = registry
        self.refresh_interval_ms = refresh_interval_ms
        self.operations = Operations()

    def handle(self, request: Request) -> tuple[int, Any]:
        allowed = []
        for method, pattern, handler in _ROUTES:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            if method == request.method:
                return handler(self, match, request)
            allowed.append(method)
        if allowed:
            raise RestError(405, f"{request.method} is not allowed on {request.path}")
        raise RestError(404, f"no endpoint {request.path}; see docs/rest-api.md")

    def job(self, match: re.Match) -> Any:
        job_id = match["job"]
        jm = self.registry.get(job_id)
        if jm is None:
            raise RestError(404, f"job {job_id} not found in this driver")
        return jm


# cluster --------------------------------------------------------------------------------------
@route("GET", "/config")
def _config(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    from tidegate import __version__

    return 200, {"refresh-interval": api.refresh_interval_ms, "tidegate-version": __version__}


@route("GET", "/jobs(?:/overview)?")
def _jobs(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    now = views.now_ms()
    return 200, {"jobs": [views.job_overview(jm, now) for jm in api.registry.all()]}


# one job --------------------------------------------------------------------------------------
@route("GET", "{job}")
def _job(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.job_detail(api.job(match), views.now_ms())


@route("PATCH", "{job}")
def _cancel(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm = api.job(match)
    mode = request.query.get("mode", ["cancel"])[-1]
    if mode != "cancel":
        raise RestError(400, f"mode={mode} is not supported: use mode=cancel, or POST .../stop")
    if not jm.status.is_globally_terminal_state():
        jm.cancel()
    return 202, {}


@route("GET", "{job}/plan")
def _plan(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.plan_json(api.job(match))


@route("GET", "{job}/config")
def _job_config(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.config_json(api.job(match))


@route("GET", "{job}/metrics")
def _metrics(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.metrics_json(api.job(match), views.now_ms())


@route("GET", "{job}/vertices/(?P<vertex>[0-9]+)/backpressure")
def _backpressure(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm, vertex_id = api.job(match), int(match["vertex"])
    vertex = next((v for v in jm.stats.metrics.vertices_json() if v["id"] == vertex_id), None)
    if vertex is None:
        raise RestError(404, f"job {jm.job_id} has no vertex {vertex_id}")
    subtasks = [
        {
            "subtask": s["subtask"],
            "backpressure-level": s["backpressure-level"],
            "ratio": s["backpressure-ratio"],
            "idleRatio": s["idle-ratio"],
            "busyRatio": s["busy-ratio"],
        }
        for s in vertex["subtasks"]
    ]
    return 200, {
        "status": "ok",
        "backpressure-level": vertex["metrics"]["backpressure-level"],
        "end-timestamp": jm.stats.metrics.updated_ms,
        "subtasks": subtasks,
    }


@route("GET", "{job}/exceptions")
def _exceptions(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.exceptions_json(api.job(match))


# checkpoints ----------------------------------------------------------------------------------
@route("GET", "{job}/checkpoints")
def _checkpoints(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.checkpoints_json(api.job(match), views.now_ms())


@route("GET", "{job}/checkpoints/config")
def _checkpoint_config(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, views.checkpoint_config_json(api.job(match))


@route("GET", "{job}/checkpoints/details/(?P<cid>[0-9]+)")
def _checkpoint_details(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm, cid = api.job(match), int(match["cid"])
    details = views.checkpoint_details_json(jm, cid, views.now_ms())
    if details is None:
        raise RestError(404, _not_in_history(jm, cid))
    return 200, details


@route("GET", "{job}/checkpoints/details/(?P<cid>[0-9]+)/subtasks/(?P<vertex>[0-9]+)")
def _checkpoint_subtasks(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm, cid, vertex_id = api.job(match), int(match["cid"]), int(match["vertex"])
    stats = jm.stats.checkpoints.checkpoint(cid)
    if stats is None:
        raise RestError(404, _not_in_history(jm, cid))
    names = views.vertex_names(jm)
    if vertex_id not in names:
        raise RestError(404, f"job {jm.job_id} has no vertex {vertex_id}")
    task = details_json(stats, {vertex_id: names[vertex_id]}, views.now_ms())["tasks"]
    return 200, task[str(vertex_id)]


def _not_in_history(jm: Any, cid: int) -> str:
    size = jm.stats.checkpoints.history_size
    return (
        f"checkpoint {cid} of job {jm.job_id} is not in the history of the last {size} "
        "checkpoints (web.checkpoints.history)"
    )


@route("POST", "{job}/checkpoints")
def _trigger_checkpoint(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm = api.job(match)
    future = jm.trigger_checkpoint()
    return 202, {"request-id": api.operations.add(jm.job_id, OperationKind.CHECKPOINT, future)}


@route("GET", "{job}/checkpoints/(?P<request>[0-9a-f]{32})")
def _checkpoint_status(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    return 200, _operation(api, match, OperationKind.CHECKPOINT).to_json()


# savepoints -----------------------------------------------------------------------------------
@route("POST", "{job}/savepoints")
def _trigger_savepoint(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm = api.job(match)
    body = _object(request.body)
    target = _optional(body, "target-directory", str)
    cancel = _optional(body, "cancel-job", bool) or False
    future = jm.trigger_savepoint(target)
    if cancel:  # Flink's cancel-with-savepoint: cancel once the savepoint completed

        def cancel_after(done: Any) -> None:
            if not done.cancelled() and done.exception() is None:
                jm.cancel()

        future.add_done_callback(cancel_after)
    return 202, {"request-id": api.operations.add(jm.job_id, OperationKind.SAVEPOINT, future)}


@route("POST", "{job}/stop")
def _stop(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    jm = api.job(match)
    body = _object(request.body)
    target = _optional(body, "targetDirectory", str)
    drain = _optional(body, "drain", bool) or False
    future = jm.stop_with_savepoint(target, drain=drain)
    return 202, {"request-id": api.operations.add(jm.job_id, OperationKind.STOP, future)}


@route("GET", "{job}/savepoints/(?P<request>[0-9a-f]{32})")
def _savepoint_status(api: RestApi, match: re.Match, request: Request) -> tuple[int, Any]:
    operation = _operation(api, match, OperationKind.SAVEPOINT, OperationKind.STOP)
    return 200, operation.to_json()


def _operation(api: RestApi, match: re.Match, *kinds: OperationKind) -> Any:
    jm = api.job(match)
    operation = api.operations.get(jm.job_id, match["request"])
    if operation is None or operation.kind not in kinds:
        raise RestError(404, f"no {kinds[0].value} request {match['request']} for job {jm.job_id}")
    return operation


def _object(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise RestError(400, "the request body must be a JSON object")
    return body


def _optional(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is not None and not isinstance(value, kind):
        raise RestError(400, f"{key!r} must be a {kind.__name__}, got {value!r}")
    return value
