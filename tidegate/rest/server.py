"""The driver's HTTP server: the REST API (JSON) and the web dashboard (static files).

Security (docs/rest-api.md#security):
- Bound to a loopback address by default. Bound to anything else it requires a bearer token
  (`Authorization: Bearer <token>`) on every API request, and refuses to start without one.
- Requests whose `Host` is not a loopback name are refused while bound to loopback (a web page
  cannot reach the API through DNS rebinding), and so are state-changing requests whose
  `Origin` is another site (cross-site request forgery).
- The dashboard's files need no token (they hold no data); the page sends the token it was
  given in its URL fragment (`#token=...`) with every API request.
"""

from __future__ import annotations

import errno
import hmac
import json
import logging
import socket
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tidegate.rest.routes import Request, RestApi, RestError
from tidegate.runtime.addresses import is_loopback

log = logging.getLogger("tidegate.rest")

STATIC_DIR = Path(__file__).parent / "static"
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'"
    ),
}
MAX_BODY_BYTES = 1 << 20
#: ports tried after the configured one when it is taken (Flink's port range)
PORT_FALLBACKS = 100


class RestSecurityError(ValueError):
    """The server would be reachable from other hosts without a token."""


def parse_ports(spec: str | int) -> list[int]:
    """`rest.port`: "8081" (8081 and the next PORT_FALLBACKS - 1 ports), "8081-8090", a
    comma-separated list of those, or "0" (any free port)."""
    ports: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(p) for p in part.split("-", 1))
                ports.extend(range(low, high + 1))
            elif int(part) == 0:
                ports.append(0)
            else:
                ports.extend(range(int(part), min(int(part) + PORT_FALLBACKS, 65536)))
        except ValueError:
            raise ValueError(
                f"rest.port must be a port, a range like 8081-8090 or 0, got {spec!r}"
            ) from None
    if not ports or any(not 0 <= p <= 65535 for p in ports):
        raise ValueError(f"rest.port must hold ports between 0 and 65535, got {spec!r}")
    return ports


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    rest: RestServer


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


def _bind(host: str, ports: Iterable[int]) -> _HTTPServer:
    cls = _HTTPServer6 if ":" in host else _HTTPServer
    tried = []
    for port in ports:
        try:
            return cls((host.strip("[]"), port), _Handler)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            tried.append(port)
    shown = f"{tried[0]}-{tried[-1]}" if len(tried) > 1 else str(tried[0])
    raise OSError(
        errno.EADDRINUSE,
        f"every port in {shown} on {host} is in use; set rest.port to a free port or range "
        "(0: any free port)",
    )


class RestServer:
    """Serves `api` and the dashboard on `host` at the first free port of `ports`."""

    def __init__(
        self,
        api: RestApi,
        host: str = "127.0.0.1",
        ports: Iterable[int] = (8081,),
        token: str | None = None,
        *,
        token_generated: bool = False,
    ) -> None:
        self.loopback = is_loopback(host)
        if not self.loopback and not token:
            raise RestSecurityError(
                f"the REST API would listen on {host}, reachable from other hosts, without a "
                "token: set rest.token (or bind rest.bind-address to 127.0.0.1)"
            )
        self.api = api
        self.host = host
        self.token = token
        #: `token` was generated for this process (rest/__init__.py), not configured
        self.token_generated = token_generated
        self._httpd = _bind(host, ports)
        self._httpd.rest = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="tidegate-rest", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The URL a client on this host uses (loopback when bound to every interface)."""
        host = self.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard's address for whoever started the driver: with a generated token in
        the URL's fragment (which browsers never send), since nobody else knows it; a
        configured token is not repeated."""
        fragment = f"#token={self.token}" if self.token_generated else ""
        return f"{self.url}/{fragment}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # checks -----------------------------------------------------------------------------------
    def host_allowed(self, host_header: str | None) -> bool:
        if not self.loopback or not host_header:
            return True
        name = urlsplit(f"//{host_header}").hostname or ""
        return is_loopback(name)

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, provided = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            provided.strip().encode(), self.token.encode()
        )


class _Handler(BaseHTTPRequestHandler):
    server_version = "tidegate"
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _serve(self) -> None:
        rest = self.server.rest
        url = urlsplit(self.path)
        path = url.path.removeprefix("/v1") or "/"
        try:
            if not rest.host_allowed(self.headers.get("Host")):
                raise RestError(403, "this server only answers requests for a loopback host")
            origin = self.headers.get("Origin")
            if self.command != "GET" and origin and not _same_origin(origin, self.headers):
                raise RestError(403, f"cross-site request from {origin} refused")
            body = self._read_body()
            if self.command == "GET" and self._serve_static(path):
                return
            if not rest.authorized(self.headers.get("Authorization")):
                raise RestError(401, "missing or wrong bearer token (Authorization: Bearer ...)")
            status, payload = rest.api.handle(
                Request(self.command, path, parse_qs(url.query), body)
            )
        except RestError as e:
            status, payload = e.status, {"errors": [str(e)]}
        except Exception as e:  # a bug: answer, log, and keep serving
            log.exception("REST request %s %s failed", self.command, self.path)
            status, payload = 500, {"errors": [f"internal error: {type(e).__name__}: {e}"]}
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise RestError(413, f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise RestError(400, f"the request body is not JSON: {e}") from None

    def _serve_static(self, path: str) -> bool:
        name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/web/")
        if name == path or "/" in name:  # not a dashboard file
            return False
        file = STATIC_DIR / name
        if not file.is_file():
            return False
        content_type = _CONTENT_TYPES.get(file.suffix, "application/octet-stream")
        self._send(200, file.read_bytes(), content_type)
        return True

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in _SECURITY_HEADERS.items():
            self.send_header(name, value)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="tidegate"')
        self.end_headers()
        self.wfile.write(data)


def _same_origin(origin: str, headers: Any) -> bool:
    return urlsplit(origin).netloc == (headers.get("Host") or "")
