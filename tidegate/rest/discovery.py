"""Discovery files: how the CLI finds the drivers running on this machine.

A driver whose REST server runs writes `<TIDEGATE_HOME>/rest/<pid>.json` (default home
`~/.tidegate`; directory mode 0700, file mode 0600) with its URL and, if it requires one, its
bearer token, and removes the file when the process exits. Files of processes that no longer
exist are stale: readers skip and delete them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


def tidegate_home() -> Path:
    """`$TIDEGATE_HOME`, else `~/.tidegate`."""
    configured = os.environ.get("TIDEGATE_HOME")
    return Path(configured) if configured else Path.home() / ".tidegate"


def discovery_dir() -> Path:
    return tidegate_home() / "rest"


@dataclass(frozen=True)
class DriverInfo:
    """A running driver's REST server, as its discovery file describes it."""

    pid: int
    url: str
    token: str | None
    started_ms: int
    path: Path


def write_discovery_file(url: str, token: str | None) -> Path:
    """Write this process's discovery file (atomically, mode 0600) and remove it at exit."""
    directory = discovery_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{os.getpid()}.json"
    temporary = directory / f".{os.getpid()}.json.tmp"
    content = {"pid": os.getpid(), "url": url, "token": token, "started": int(time.time() * 1000)}
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(content, f)
    os.replace(temporary, path)
    atexit.register(remove_discovery_file, path)
    return path


def remove_discovery_file(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def running_drivers() -> list[DriverInfo]:
    """The drivers whose discovery files name a live process, oldest first; stale files are
    deleted, unreadable ones skipped."""
    directory = discovery_dir()
    if not directory.is_dir():
        return []
    drivers = []
    for path in directory.glob("*.json"):
        try:
            content = json.loads(path.read_text())
            info = DriverInfo(
                int(content["pid"]),
                str(content["url"]),
                content.get("token"),
                int(content.get("started", 0)),
                path,
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(info.pid):
            drivers.append(info)
        else:
            remove_discovery_file(path)
    return sorted(drivers, key=lambda d: d.started_ms)
