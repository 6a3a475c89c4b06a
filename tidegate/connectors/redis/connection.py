"""How connectors reach a Redis server: a URL (`redis://[user:password@]host:port/db`,
`rediss://` for TLS, `unix:///path.sock`) and timeouts, opened on the host that runs the
reader, writer or committer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RedisConnection:
    """`url` as redis-py's `Redis.from_url` takes it. `socket_timeout_s` bounds every
    command (a blocking read waits at most its own block time on top of it)."""

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout_s: float = 10.0
    connect_timeout_s: float = 5.0

    def open(self) -> Any:
        """A redis-py client (bytes in and out, no decoding)."""
        try:
            import redis
        except ImportError:
            raise ImportError(
                "the Redis connectors need the redis package: pip install 'tidegate[redis]'"
            ) from None
        return redis.Redis.from_url(
            self.url,
            socket_timeout=self.socket_timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            decode_responses=False,
            protocol=2,  # the readers parse RESP2 replies
        )
