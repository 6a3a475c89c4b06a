"""The driver's REST API and web dashboard (docs/rest-api.md, docs/observability.md).

One server per driver process serves every job submitted in it: `register_job` adds a job to
the process's registry, and the first job whose configuration enables the API starts the
server with that configuration (`rest.*` keys) and writes the discovery file the CLI reads
(`rest/discovery.py`). The server runs until the process exits.
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from tidegate.common.configuration import (
    REST_BIND_ADDRESS,
    REST_ENABLED,
    REST_PORT,
    REST_TOKEN,
    WEB_REFRESH_INTERVAL,
    Configuration,
)
from tidegate.rest.discovery import write_discovery_file
from tidegate.rest.registry import JobRegistry
from tidegate.rest.routes import RestApi
from tidegate.rest.server import RestServer, parse_ports
from tidegate.runtime.addresses import LOOPBACK, is_loopback

log = logging.getLogger("tidegate.rest")

_lock = threading.Lock()
_registry = JobRegistry()
_server: RestServer | None = None


def register_job(jm: Any, configuration: dict[str, str]) -> RestServer | None:
    """List `jm` in this process's REST API, starting the server if it is not running and
    `configuration` enables it. Returns the server (None if disabled or it could not start:
    that is logged, and the job runs anyway)."""
    global _server
    conf = Configuration().add_all(configuration)
    enabled = _enabled(conf.get_string(REST_ENABLED, "true"))  # a bad value fails the submit
    _registry.add(jm)
    with _lock:
        if _server is not None or not enabled:
            return _server
        try:
            settings = rest_settings(conf)
            server = RestServer(
                RestApi(_registry, conf.get_integer(WEB_REFRESH_INTERVAL, 3000)),
                settings.host,
                settings.ports,
                settings.token,
                token_generated=settings.token_generated,
            )
            discovery = write_discovery_file(server.url, settings.token)
        except (OSError, ValueError) as e:
            log.warning("the REST API and dashboard did not start: %s", e)
            return None
        _server = server
    needs = ""
    if settings.token_generated:
        needs = ", which holds the bearer token generated for this process"
    elif settings.token is not None:
        needs = f"; the bearer token of {REST_TOKEN} is required"
    log.info("REST API and dashboard at %s/ (discovery file %s%s)", server.url, discovery, needs)
    return server


@dataclass(frozen=True)
class RestSettings:
    """Where the REST server listens and the token it requires (None: none)."""

    host: str
    ports: list[int]
    token: str | None
    #: the token is not the configured `rest.token` but generated for this process
    token_generated: bool


def rest_settings(conf: Configuration) -> RestSettings:
    """The `rest.*` configuration as the server takes it: loopback by default, without a
    token unless `rest.token` sets one; on any other address `rest.token`, else a random token
    generated here (192 bits), since a server reachable from other hosts never runs without
    one. A bad `rest.port` raises ValueError."""
    host = conf.get_string(REST_BIND_ADDRESS, LOOPBACK) or LOOPBACK
    token = conf.get_string(REST_TOKEN) or None
    generated = token is None and not is_loopback(host)
    if generated:
        token = secrets.token_urlsafe(24)
    return RestSettings(host, parse_ports(conf.get_string(REST_PORT, "8081")), token, generated)


def running_server() -> RestServer | None:
    """This process's REST server, if it runs."""
    return _server


def _enabled(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"configuration {REST_ENABLED!r} must be true or false, got {value!r}")
    return lowered == "true"
