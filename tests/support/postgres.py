"""A private PostgreSQL server for the tests: a cluster made by `initdb` in a temporary
directory, started with `postgres` on a free loopback port (prepared transactions and logical
replication enabled, fsync off), waited for until it accepts connections, and stopped by PID.

PostgreSQL refuses to run as root, so under root (CI) the server runs as the `postgres` user
the Debian package creates, with its directory outside pytest's root-only temp tree.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import free_port
from tests.support.servers import log_tail, stop_by_pid

START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
#: the database the tests use (created at start)
DATABASE = "tidegate"
#: enough for every sink subtask of the tests plus transactions a killed job leaves prepared
MAX_PREPARED_TRANSACTIONS = 64


@dataclass
class PostgresServer:
    process: subprocess.Popen
    port: int
    directory: Path
    log: Path

    @property
    def url(self) -> str:
        """A libpq URL of the test database (what psycopg connects to)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def jdbc_url(self) -> str:
        """The same database as a JDBC URL, the form PyFlink's JdbcConnectionOptions take."""
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        # SIGINT is PostgreSQL's fast shutdown (SIGTERM waits for clients to disconnect)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        stop_by_pid(self.process, STOP_GRACE_S)
        shutil.rmtree(self.directory, ignore_errors=True)


def _bin_dir() -> Path:
    """The directory of `initdb` and `postgres`: Debian keeps them off the PATH, in
    /usr/lib/postgresql/<major>/bin; the newest major version there wins."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    if on_path is None:
        raise FileNotFoundError(
            "PostgreSQL is missing: run `bash scripts/setup.sh test` "
            "(or apt-get install postgresql)"
        )
    return Path(on_path).parent


def _run_as() -> str | None:
    """The user the server runs as: `postgres` under root, else the current user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as: "
            "install the server with apt-get install postgresql (it creates the user)"
        ) from None
    return "postgres"


def start_postgres(**overrides: str) -> PostgresServer:
    """initdb + postgres on a free loopback port; returns once the test database exists.
    `overrides`: server settings that replace the defaults below (max_prepared_transactions
    = "0" for a server that cannot prepare transactions)."""
    import psycopg

    bin_dir = _bin_dir()
    user = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="tidegate-postgres-"))
    if user is not None:
        shutil.chown(directory, user)
    data, log = directory / "data", directory / "postgres.log"
    subprocess.run(
        [bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "-N"],
        check=True,
        capture_output=True,
        user=user,
        timeout=60,
    )
    port = free_port()
    settings = {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(directory),
        "max_prepared_transactions": str(MAX_PREPARED_TRANSACTIONS),
        "wal_level": "logical",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        **overrides,
    }
    args = [bin_dir / "postgres", "-D", data, "-p", str(port)]
    for key, value in settings.items():
        args += ["-c", f"{key}={value}"]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, user=user
        )
    server = PostgresServer(process, port, directory, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    admin = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    while True:
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=2) as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            return server
        except psycopg.OperationalError:
            if process.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {process.returncode}:\n{log_tail(log)}"
                ) from None
            if time.monotonic() > deadline:
                server.stop()
                raise TimeoutError(
                    f"postgres did not accept connections on port {port} within "
                    f"{START_TIMEOUT_S:g} s:\n{log_tail(log)}"
                ) from None
            time.sleep(0.1)
