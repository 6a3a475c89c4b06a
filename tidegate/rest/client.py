"""A small client of the REST API (for the CLI): JSON over HTTP with the standard library."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from tidegate.runtime.addresses import is_loopback

#: seconds one HTTP exchange may take before the driver counts as unreachable
REQUEST_TIMEOUT_S = 30.0


class RestClientError(Exception):
    """The driver answered with an error (`status` is the HTTP status)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DriverUnreachableError(RestClientError):
    """No answer from the driver (not running any more, wrong address, network)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(0, f"no tidegate driver answers at {url}: {reason}")
        self.url = url


class RestClient:
    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        handlers = []
        if is_loopback(urlsplit(self.url).hostname or ""):
            handlers.append(urllib.request.ProxyHandler({}))  # never via a proxy
        self._opener = urllib.request.build_opener(*handlers)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=REQUEST_TIMEOUT_S) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raise RestClientError(e.code, _error_message(e)) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DriverUnreachableError(self.url, str(reason)) from None
        return json.loads(raw) if raw.strip() else {}

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, {} if body is None else body)

    def patch(self, path: str) -> Any:
        return self.request("PATCH", path)

    def await_operation(self, path: str, poll_s: float = 0.2) -> dict[str, Any]:
        """Poll an asynchronous operation's status until it completed; its `operation`."""
        while True:
            answer = self.get(path)
            if answer.get("status", {}).get("id") == "COMPLETED":
                return answer.get("operation", {})
            time.sleep(poll_s)


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        errors = json.loads(error.read()).get("errors") or []
    except (ValueError, AttributeError, OSError):
        errors = []
    return "; ".join(str(e) for e in errors) or f"HTTP {error.code} {error.reason}"
