"""The options of the JDBC sinks, with PyFlink's builders: where the database is
(`JdbcConnectionOptions`), how records are batched and retried (`JdbcExecutionOptions`), and
how the exactly-once sink commits (`JdbcExactlyOnceOptions`).

Only PostgreSQL is supported: the URL is a JDBC one (`jdbc:postgresql://host:port/db?user=u`)
or a libpq one (`postgresql://host:port/db`); `libpq_conninfo` turns either into what psycopg
connects with. JDBC URL parameters with a libpq equivalent are translated (PgJDBC's names);
any other is refused by name rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = [
    "JdbcConnectionOptions",
    "JdbcExactlyOnceOptions",
    "JdbcExecutionOptions",
    "libpq_conninfo",
]

#: the driver class PgJDBC registers; the only one accepted by `with_driver_name`
POSTGRES_DRIVER = "org.postgresql.Driver"
#: how long connecting may take when the URL does not say (seconds)
DEFAULT_CONNECT_TIMEOUT_S = 10
#: PgJDBC URL parameter -> libpq keyword (values kept)
_JDBC_PARAMETERS = {
    "user": "user",
    "password": "password",
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "connectTimeout": "connect_timeout",
    "ApplicationName": "application_name",
    "options": "options",
}


def libpq_conninfo(url: str, user: str | None = None, password: str | None = None) -> str:
    """A libpq connection string for `url` (`jdbc:postgresql://...` or `postgresql://...`),
    with the user name and password given apart (they win over the URL's)."""
    from psycopg.conninfo import make_conninfo

    if url.startswith("jdbc:"):
        url = url[len("jdbc:") :]
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(
            f"unsupported database URL {_redacted(url)!r}: tidegate's JDBC sinks write to "
            "PostgreSQL only, at jdbc:postgresql://host:port/database (or postgresql://...)"
        )
    params: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "ssl":
            if value.lower() in ("", "true"):
                params.setdefault("sslmode", "require")
            continue
        if key == "currentSchema":
            params["options"] = f"-c search_path={value}"
            continue
        if key not in _JDBC_PARAMETERS:
            known = ", ".join(sorted([*_JDBC_PARAMETERS, "ssl", "currentSchema"]))
            raise ValueError(
                f"the JDBC URL parameter {key!r} is not supported by tidegate's PostgreSQL "
                f"sinks (known: {known}); remove it, or give a libpq URL postgresql://... with "
                "libpq's parameters instead"
            )
        params[_JDBC_PARAMETERS[key]] = value
    if user is not None:
        params["user"] = user
    if password is not None:
        params["password"] = password
    params.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return make_conninfo(base, **params)


def _redacted(url: str) -> str:
    """`url` without a password in it (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True)
class JdbcConnectionOptions:
    """Where the sink's database is. Build with `JdbcConnectionOptionsBuilder()`."""

    url: str
    driver_name: str | None = None
    user_name: str | None = None
    password: str | None = None

    def get_db_url(self) -> str:
        return self.url

    def get_driver_name(self) -> str | None:
        return self.driver_name

    def get_user_name(self) -> str | None:
        return self.user_name

    def get_password(self) -> str | None:
        return self.password

    def conninfo(self) -> str:
        """What psycopg connects with."""
        return libpq_conninfo(self.url, self.user_name, self.password)

    def describe(self) -> str:
        """The URL and user, without the password (for messages)."""
        user = f" as user {self.user_name!r}" if self.user_name else ""
        return f"{_redacted(self.url)}{user}"

    def __repr__(self) -> str:
        return f"JdbcConnectionOptions({self.describe()})"

    class JdbcConnectionOptionsBuilder:
        def __init__(self) -> None:
            self._url: str | None = None
            self._driver: str | None = None
            self._user: str | None = None
            self._password: str | None = None

        def with_url(self, url: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._url = url
            return self

        def with_driver_name(
            self, driver_name: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            """PgJDBC's `org.postgresql.Driver` (psycopg is used in its place), or nothing."""
            if driver_name != POSTGRES_DRIVER:
                raise ValueError(
                    f"unsupported JDBC driver {driver_name!r}: tidegate's JDBC sinks write to "
                    f"PostgreSQL only (driver {POSTGRES_DRIVER!r}, or leave it out)"
                )
            self._driver = driver_name
            return self

        def with_user_name(
            self, user_name: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._user = user_name
            return self

        def with_password(
            self, password: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._password = password
            return self

        def build(self) -> JdbcConnectionOptions:
            if not self._url:
                raise ValueError(
                    "JdbcConnectionOptions need a URL: with_url('jdbc:postgresql://host:port/db')"
                )
            options = JdbcConnectionOptions(self._url, self._driver, self._user, self._password)
            options.conninfo()  # a bad URL fails here, on the driver, not on every host
            return options


@dataclass(frozen=True, slots=True)
class JdbcExecutionOptions:
    """How a sink batches its statements: a batch is executed when it holds `batch_size`
    records, when `batch_interval_ms` passed since the last one (0: no timed flush), and at
    each checkpoint; a batch failing by a lost connection (or a serialization failure or
    deadlock) is retried up to `max_retries` times, each after a longer pause."""

    batch_size: int = 5000
    batch_interval_ms: int = 0
    max_retries: int = 3

    def get_batch_size(self) -> int:
        return self.batch_size

    def get_batch_interval_ms(self) -> int:
        return self.batch_interval_ms

    def get_max_retries(self) -> int:
        return self.max_retries

    @staticmethod
    def defaults() -> JdbcExecutionOptions:
        return JdbcExecutionOptions()

    @staticmethod
    def builder() -> JdbcExecutionOptions.Builder:
        return JdbcExecutionOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._options = JdbcExecutionOptions()

        def with_batch_size(self, size: int) -> JdbcExecutionOptions.Builder:
            self._options = replace(self._options, batch_size=size)
            return self

        def with_batch_interval_ms(self, interval_ms: int) -> JdbcExecutionOptions.Builder:
            self._options = replace(self._options, batch_interval_ms=interval_ms)
            return self

        def with_max_retries(self, max_retries: int) -> JdbcExecutionOptions.Builder:
            self._options = replace(self._options, max_retries=max_retries)
            return self

        def build(self) -> JdbcExecutionOptions:
            o = self._options
            if o.batch_size < 1:
                raise ValueError(f"with_batch_size needs a size >= 1, got {o.batch_size}")
            if o.batch_interval_ms < 0:
                raise ValueError(
                    f"with_batch_interval_ms needs >= 0 (0: none), got {o.batch_interval_ms}"
                )
            if o.max_retries < 0:
                raise ValueError(f"with_max_retries needs >= 0, got {o.max_retries}")
            return o


@dataclass(frozen=True, slots=True)
class JdbcExactlyOnceOptions:
    """How the exactly-once sink commits: `COMMIT PREPARED` is tried up to
    `max_commit_attempts` times when the connection is lost; a writer's statement waits at
    most `lock_timeout_ms` for a row lock (tidegate's own option, see exactly_once.py)."""

    max_commit_attempts: int = 3
    lock_timeout_ms: int = 30_000

    def get_max_commit_attempts(self) -> int:
        return self.max_commit_attempts

    @staticmethod
    def defaults() -> JdbcExactlyOnceOptions:
        return JdbcExactlyOnceOptions()

    @staticmethod
    def builder() -> JdbcExactlyOnceOptions.Builder:
        return JdbcExactlyOnceOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._options = JdbcExactlyOnceOptions()

        def with_max_commit_attempts(self, attempts: int) -> JdbcExactlyOnceOptions.Builder:
            self._options = replace(self._options, max_commit_attempts=attempts)
            return self

        def with_lock_timeout_ms(self, timeout_ms: int) -> JdbcExactlyOnceOptions.Builder:
            self._options = replace(self._options, lock_timeout_ms=timeout_ms)
            return self

        def build(self) -> JdbcExactlyOnceOptions:
            o = self._options
            if o.max_commit_attempts < 1:
                raise ValueError(
                    f"with_max_commit_attempts needs >= 1, got {o.max_commit_attempts}"
                )
            if o.lock_timeout_ms < 1:
                raise ValueError(f"with_lock_timeout_ms needs >= 1 ms, got {o.lock_timeout_ms}")
            return o
