"""`Configuration`: string key/value settings (PyFlink's shape), plus tidegate's own keys."""

from __future__ import annotations

from typing import Any

#: keys tidegate reads; documented in docs/configuration.md
RUNNER = "execution.runner"  # "spark" (default) | "local"
RUNTIME_MODE = "execution.runtime-mode"  # STREAMING (default) | BATCH | AUTOMATIC
PYTHON_FILES = "python.files"  # comma-separated files and directories shipped to the workers
PYTHON_REQUIREMENTS = "python.requirements"  # FILE or FILE#CACHE_DIR, installed on the workers
PYTHON_ARCHIVES = "python.archives"  # comma-separated ARCHIVE or ARCHIVE#TARGET_DIR
SHIP_SCRIPT_DIR = "tidegate.python.ship-script-dir"  # ship the job script's directory (true)
SPARK_MASTER = "spark.master"  # default local[N]
#: the driver JVM of a session tidegate starts maps a class-data-sharing archive ("true")
CLASS_ARCHIVE = "tidegate.spark.class-archive"
BIND_HOST = "tidegate.network.bind-host"  # default: by the master (deploy/network_plan.py)
#: the driver's address as workers dial it (default: the driver host's name resolved)
ADVERTISED_HOST = "tidegate.network.advertised-host"
BATCH_SIZE = "tidegate.network.batch-size"  # records per frame, default 512
BUFFER_TIMEOUT_MS = "execution.buffer-timeout"  # flush partly filled frames after this, default 10
QUEUE_CAPACITY = "tidegate.network.queue-capacity"  # frames buffered per input gate, default 64
#: container allocations between young collections of Python's cyclic GC in slot processes,
#: default 50000 (Python's: 700); 0 keeps Python's settings (runtime/collector.py)
GC_THRESHOLD = "tidegate.python.gc-threshold"
#: the GIL switch interval of slot processes, microseconds, default 500 (Python's: 5000); 0
#: keeps Python's (runtime/switch_interval.py)
SWITCH_INTERVAL_US = "tidegate.python.switch-interval-us"
HEARTBEAT_TIMEOUT_MS = "heartbeat.timeout"  # a silent slot fails the attempt, default 50000
#: "true": a restore skips damaged checkpoints and falls back to an older one (default false)
RESTORE_FALLBACK = "execution.checkpointing.restore-fallback"
#: a fixed job id (default: a new random one per run); the job directory is named after it
JOB_ID = "pipeline.job-id"
#: observability (docs/rest-api.md): checkpoints kept in the statistics' history, default 10
CHECKPOINTS_HISTORY = "web.checkpoints.history"
#: the driver's REST API and dashboard: on/off ("true"), address (127.0.0.1), port or range
#: ("8081": the first free of 8081..8180; "0": any), bearer token (required off loopback)
REST_ENABLED = "rest.enabled"
REST_BIND_ADDRESS = "rest.bind-address"
REST_PORT = "rest.port"
REST_TOKEN = "rest.token"
#: how often the dashboard polls, in ms (default 3000)
WEB_REFRESH_INTERVAL = "web.refresh-interval"
#: restore the job from this checkpoint or savepoint (Flink 2's key; Flink 1's key also works)
STATE_RECOVERY_PATH = "execution.state-recovery.path"
SAVEPOINT_PATH = "execution.savepoint.path"
#: drop state of operators the job does not have instead of failing the restore (Flink 2's key,
#: then Flink 1's); "true" or "false"
IGNORE_UNCLAIMED_STATE = "execution.state-recovery.ignore-unclaimed-state"
SAVEPOINT_IGNORE_UNCLAIMED_STATE = "execution.savepoint.ignore-unclaimed-state"
#: who owns the restored snapshot: NO_CLAIM (default) or CLAIM (Flink 2's key, then Flink 1's)
CLAIM_MODE = "execution.state-recovery.claim-mode"
SAVEPOINT_RESTORE_MODE = "execution.savepoint-restore-mode"
#: default directory for savepoints (Flink 2's key, then Flink 1's)
SAVEPOINT_DIR = "execution.checkpointing.savepoint-dir"
STATE_SAVEPOINTS_DIR = "state.savepoints.dir"
#: task-local recovery: keep a copy of each subtask's latest checkpoint on the worker's disk and
#: restore from it when intact ("true"/"false", default false), and where (Flink's keys)
LOCAL_RECOVERY = "state.backend.local-recovery"
LOCAL_RECOVERY_DIRS = "taskmanager.state.local.root-dirs"
#: the state backend when the job does not set one: "hashmap" (default) or "rocksdb"
STATE_BACKEND_TYPE = "state.backend.type"
#: rocksdb backend: where instance directories live (default: the system temp dir)
ROCKSDB_LOCALDIR = "state.backend.rocksdb.localdir"
#: rocksdb backend memory per worker process: block cache (default 64mb), one memtable's size
#: (16mb) and memtables per column family (2; size x count also bounds all memtables)
ROCKSDB_BLOCK_CACHE_SIZE = "state.backend.rocksdb.block-cache-size"
ROCKSDB_WRITEBUFFER_SIZE = "state.backend.rocksdb.writebuffer.size"
ROCKSDB_WRITEBUFFER_COUNT = "state.backend.rocksdb.writebuffer.count"
#: rocksdb backend: keys per value, reducing or aggregating state whose values stay in memory
#: as Python objects (default 1048576; tidegate's own key)
ROCKSDB_VALUE_CACHE_ENTRIES = "state.backend.rocksdb.value-cache.entries"
#: rocksdb backend: incremental checkpoints ("true"/"false", default false; Flink's key)
STATE_BACKEND_INCREMENTAL = "state.backend.incremental"
STATE_BACKEND_CHANGELOG = "state.backend.changelog.enabled"  # rocksdb: changelog checkpoints
#: filesystem options (common/filesystems.py): Flink's S3 keys, mapped to s3fs's options, and
#: `fs.<protocol>.<option>`, passed as fsspec storage option `<option>` for that protocol
S3_ENDPOINT = "s3.endpoint"
S3_ACCESS_KEY = "s3.access-key"
S3_SECRET_KEY = "s3.secret-key"
S3_PATH_STYLE_ACCESS = "s3.path.style.access"
FS_OPTION_PREFIX = "fs."
#: how often sources (and assign_timestamps_and_watermarks) ask their watermark generator for a
#: periodic watermark: milliseconds ("200") or a duration ("200 ms", "1 s"); 0 disables
#: periodic watermarks. Default 200 ms (Flink's key and default)

#: keys (and storage options) holding one of these are secrets: never shown (Flink's rule)
_SENSITIVE = ("password", "secret", "token", "key", "credential", "connection_string")
#: what is shown instead of a secret's value
HIDDEN = "******"

_DURATION_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "min": 60_000, "h": 3_600_000}


class Configuration:
    def __init__(self, other: Configuration | None = None) -> None:
        self._data: dict[str, str] = dict(other._data) if other else {}

    def set_string(self, key: str, value: str) -> Configuration:
        self._data[key] = str(value)
        return self

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        return self._data.get(key, default_value)

    def set_integer(self, key: str, value: int) -> Configuration:
        return self.set_string(key, str(int(value)))

    def get_integer(self, key: str, default_value: int) -> int:
        value = self._data.get(key)
        if value is None:
            return default_value
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"configuration {key!r} must be an integer, got {value!r}") from None

    def get_boolean(self, key: str, default_value: bool) -> bool:
        value = self._data.get(key)
        if value is None:
            return default_value
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"configuration {key!r} must be true or false, got {value!r}")
        return lowered == "true"

    def set_boolean(self, key: str, value: bool) -> Configuration:
        return self.set_string(key, "true" if value else "false")

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    def add_all(self, other: Configuration | dict[str, Any]) -> Configuration:
        items = other.to_dict() if isinstance(other, Configuration) else other
        for k, v in items.items():
            self.set_string(k, v)
        return self

    def get_duration_ms(self, key: str, default_value: int) -> int:
        """A duration in milliseconds: a number of ms ("200") or with a unit ("200 ms", "10 s",
        "1 min"), as Flink writes durations."""
        value = self._data.get(key)
        if value is None:
            return default_value
        text = value.strip().lower()
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
        unit = text[len(number) :].strip() or "ms"
        if unit not in _DURATION_UNITS or not number.isdigit():
            raise ValueError(
                f"configuration {key!r} must be milliseconds or a duration such as '200 ms', "
                f"'10 s' or '1 min', got {value!r}"
            )
        return int(number) * _DURATION_UNITS[unit]

    def __repr__(self) -> str:
        return f"Configuration({redacted(self._data)!r})"


def is_sensitive(key: str) -> bool:
    """Whether the value of configuration key (or storage option) `key` is a secret."""
    lowered = key.lower()
    return any(word in lowered for word in _SENSITIVE)


def redacted(entries: dict[str, str]) -> dict[str, str]:
    """`entries` with the values of sensitive keys replaced by HIDDEN, for showing."""
    return {k: HIDDEN if is_sensitive(k) else v for k, v in entries.items()}
