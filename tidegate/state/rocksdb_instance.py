"""One RocksDB instance of the `rocksdb` state backend: where it lives, its memory, its files.

Every keyed operator subtask gets its own instance directory under the local dir::

    <local dir>/tidegate-rocksdb/<job id>/<operator uid>-<subtask>-a<attempt>-<random>/
        db/                 the live database (one column family per state)
        checkpoints/chk-n/  hard-linked copies taken in a snapshot's synchronous phase

The directory is deleted when the backend is disposed. A worker killed with `kill -9` leaves its
directory behind; the next attempt of the same subtask deletes the directories of older attempts
of the same job, operator and subtask.

Memory is bounded per worker process: one LRU block cache (data blocks) and
one write-buffer manager (memtables of every column family of every instance) are shared by all
instances in the process, as Flink shares its managed memory per slot. The write-ahead log is
off: the state is recovered from checkpoints, never from the instance directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass

import rocksdict

from tidegate.state.handles import file_safe
from tidegate.state.rocksdb_buffer import WriteBuffer
from tidegate.state.rocksdb_cache import DEFAULT_MAX_ENTRIES as DEFAULT_VALUE_CACHE_ENTRIES

MIB = 1024 * 1024
DEFAULT_BLOCK_CACHE_SIZE = 64 * MIB
DEFAULT_WRITE_BUFFER_SIZE = 16 * MIB
DEFAULT_WRITE_BUFFER_COUNT = 2
#: the subdirectory of the local dir that holds instance directories
ROOT_NAME = "tidegate-rocksdb"
#: column family of state `name` (the default column family stays unused)
CF_PREFIX = "state:"


@dataclass(frozen=True)
class RocksDBOptions:
    """Memory and placement of RocksDB instances (resolved from the job's configuration)."""

    #: where instance directories are created (None: the system temp dir)
    local_dir: str | None = None
    #: LRU block cache shared by all instances of a worker process, in bytes
    block_cache_size: int = DEFAULT_BLOCK_CACHE_SIZE
    #: size of one memtable, in bytes
    write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE
    #: memtables per column family; size x count also bounds the memtables of the process
    write_buffer_count: int = DEFAULT_WRITE_BUFFER_COUNT
    #: keys whose values each value, reducing or aggregating state keeps as Python objects
    value_cache_entries: int = DEFAULT_VALUE_CACHE_ENTRIES

    def __post_init__(self) -> None:
        for name in (
            "block_cache_size",
            "write_buffer_size",
            "write_buffer_count",
            "value_cache_entries",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"RocksDB option {name} must be a positive integer, got {value!r}")
        if self.write_buffer_count < 2:
            raise ValueError(
                f"RocksDB option write_buffer_count must be at least 2 (one memtable is written "
                f"while another is flushed), got {self.write_buffer_count}"
            )


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}


def parse_memory_size(key: str, text: str) -> int:
    """Bytes of a memory size as Flink writes them: `67108864`, `64mb`, `64 m`, `1gb`, `512kb`."""
    match = _SIZE.match(str(text))
    if match is None:
        raise ValueError(
            f"configuration {key!r} must be a memory size such as 67108864, 64mb or 1gb, "
            f"got {text!r}"
        )
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


# Step 0: memory shared by every instance of this process ------------------------------------
_shared_lock = threading.Lock()
_shared: dict[tuple[int, int], tuple[rocksdict.Cache, rocksdict.WriteBufferManager]] = {}


def _shared_memory(options: RocksDBOptions) -> tuple[rocksdict.Cache, rocksdict.WriteBufferManager]:
    budget = options.write_buffer_size * options.write_buffer_count
    key = (options.block_cache_size, budget)
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = (
                rocksdict.Cache(options.block_cache_size),
                rocksdict.WriteBufferManager(budget, False),
            )
        return shared


def db_options(options: RocksDBOptions) -> rocksdict.Options:
    """RocksDB options (raw bytes keys and values) with the configured memory bounds."""
    cache, write_buffers = _shared_memory(options)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    # Index and filter blocks stay with the open files, outside the cache (about 1.5 bytes per
    # key): in the cache, data blocks evicted them and every read reloaded them (7x slower).
    table.set_cache_index_and_filter_blocks(False)
    table.set_bloom_filter(10, False)
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(options.write_buffer_size)
    # A bloom filter over each memtable's keys (a tenth of its size): a read of a key that is
    # not there (every new key's first access) skips the memtable's search, 3-4x faster.
    opts.set_memtable_prefix_bloom_ratio(0.1)
    opts.set_memtable_whole_key_filtering(True)
    opts.set_max_write_buffer_number(options.write_buffer_count)
    opts.set_write_buffer_manager(write_buffers)
    opts.set_max_open_files(256)
    opts.set_keep_log_file_num(2)
    return opts


def scan_options() -> rocksdict.ReadOptions:
    """For a snapshot's full scan: read ahead, and keep the live state's blocks in the cache."""
    opts = rocksdict.ReadOptions()
    opts.fill_cache(False)
    opts.set_readahead_size(2 * MIB)
    return opts


def write_options() -> rocksdict.WriteOptions:
    opts = rocksdict.WriteOptions()
    opts.disable_wal = True  # the state is recovered from checkpoints, never from the WAL
    return opts


# Step 1: instance directories ----------------------------------------------------------------


def create_instance_dir(
    options: RocksDBOptions, job_id: str, operator_uid: str, subtask: int, attempt: int
) -> str:
    """A fresh, empty instance directory; older attempts' directories of this subtask go."""
    local_dir = options.local_dir or tempfile.gettempdir()
    job_dir = os.path.join(local_dir, ROOT_NAME, file_safe(job_id or "job"))
    stem = f"{file_safe(operator_uid)}-{subtask}-a"
    try:
        path = _make_instance_dir(job_dir, stem, attempt)
        probe = os.path.join(path, ".writable")
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.remove(probe)
    except OSError as e:
        raise OSError(
            f"the rocksdb state backend cannot create its instance directory under "
            f"{local_dir!r} ({e.strerror or e}); set state.backend.rocksdb.localdir to a "
            "writable directory on a local disk with room for the state"
        ) from e
    return path


def _make_instance_dir(job_dir: str, stem: str, attempt: int, tries: int = 5) -> str:
    """A new directory in `job_dir` (made if missing), older attempts' directories deleted.

    The last other instance of the job closing meanwhile takes the then empty job directory
    with it (`RocksDBInstance.close`; a backend's finalizer can run at any allocation, in this
    thread too): then it is all done again.
    """

    def make() -> str:
        os.makedirs(job_dir, exist_ok=True)
        _delete_older_attempts(job_dir, stem, attempt)
        return tempfile.mkdtemp(prefix=f"{stem}{attempt}-", dir=job_dir)

    for _ in range(tries - 1):
        with contextlib.suppress(FileNotFoundError):
            return make()
    return make()


def _delete_older_attempts(job_dir: str, stem: str, attempt: int) -> None:
    """Directories left by killed workers of earlier attempts of the same subtask.

    A directory still in use (by this process, or locked by RocksDB in another one: an old
    attempt still winding down) is left alone; its owner deletes it when it closes.
    """
    for name in os.listdir(job_dir):
        if not name.startswith(stem):
            continue
        number = name[len(stem) :].split("-", 1)[0]
        path = os.path.join(job_dir, name)
        if number.isdigit() and int(number) < attempt and not _in_use(path):
            shutil.rmtree(path, ignore_errors=True)


_open_instances: set[str] = set()


def _in_use(path: str) -> bool:
    if path in _open_instances:
        return True
    try:
        with open(os.path.join(path, "db", "LOCK"), "rb+") as f:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(f, fcntl.LOCK_UN)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


class RocksDBInstance:
    """The live database of one backend: a column family per state, opened lazily."""

    def __init__(self, path: str, options: RocksDBOptions, changelog: bool = False) -> None:
        self.path = path
        self.options = options
        self._opts = db_options(options)
        self._write_opts = write_options()
        self.db = rocksdict.Rdict(os.path.join(path, "db"), self._opts)
        self.db.set_write_options(self._write_opts)
        _open_instances.add(path)
        #: the states' buffered writes; flushed before the database is read as a whole
        self.buffer = WriteBuffer(self.write, self.handle, changelog=changelog)
        #: nothing was ever written (a read of any key finds nothing: the state's reads skip it)
        self.empty = True
        self._checkpoints = 0
        self._restored_cfs: set[str] = set()
        #: the column families handed out by `column_family`: close() closes them first
        self._column_families: list[rocksdict.Rdict] = []
        self.closed = False

    def replace_db(self, source: str) -> None:
        """Replace the (still empty) database by the one in `source` (restored files), which
        is moved into place and opened with its column families."""
        db_path = os.path.join(self.path, "db")
        self.buffer.discard()  # nothing cached describes the restored database
        self.empty = False
        self.db.close()
        shutil.rmtree(db_path)
        os.replace(source, db_path)
        self._restored_cfs = set(rocksdict.Rdict.list_cf(db_path, self._opts))
        self.db = rocksdict.Rdict(
            db_path, self._opts, column_families={n: self._opts for n in self._restored_cfs}
        )
        self.db.set_write_options(self._write_opts)

    def column_family(self, name: str) -> rocksdict.Rdict:
        """The column family of state `name`, created on first use."""
        if CF_PREFIX + name in self._restored_cfs:  # opened from restored files
            cf = self.db.get_column_family(CF_PREFIX + name)
        else:
            cf = self.db.create_column_family(CF_PREFIX + name, self._opts)
        cf.set_write_options(self._write_opts)
        self._column_families.append(cf)
        return cf

    def handle(self, name: str) -> rocksdict.ColumnFamily:
        return self.db.get_column_family_handle(CF_PREFIX + name)

    def write(self, batch: rocksdict.WriteBatch) -> None:
        self.empty = False
        self.db.write(batch, self._write_opts)

    def checkpoint(self, flush: bool = True) -> str:
        """Hard-link the current files into a new directory (after flushing the write buffer,
        unless `flush` is False, and the memtables): a consistent copy of the database, for a
        snapshot (with the write buffer flushed: of the whole state)."""
        if flush:
            self.buffer.flush()
        self._checkpoints += 1
        parent = os.path.join(self.path, "checkpoints")
        os.makedirs(parent, exist_ok=True)
        target = os.path.join(parent, f"chk-{self._checkpoints}")
        rocksdict.Checkpoint(self.db).create_checkpoint(target)
        return target

    def close(self) -> None:
        """Close the database and delete the instance directory."""
        if self.closed:
            return
        self.closed = True
        self.buffer.discard()
        # rocksdict shuts RocksDB down when its last Rdict goes, and every column family handed
        # out is one (states hold theirs until they are garbage): all are closed before the
        # directory is deleted. Else the garbage collector shut RocksDB down later, its flush
        # of the memtables failed in the deleted directory and it waited a second, GIL held.
        column_families, self._column_families = self._column_families, []
        try:
            for cf in column_families:
                with contextlib.suppress(rocksdict.DbClosedError):
                    cf.close()
            with contextlib.suppress(rocksdict.DbClosedError):
                self.db.close()
        finally:
            _open_instances.discard(self.path)
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):  # the job's directory, once its last instance goes
                os.rmdir(os.path.dirname(self.path))


def open_read_only(path: str, options: RocksDBOptions) -> rocksdict.Rdict:
    """Open a checkpoint directory made by `RocksDBInstance.checkpoint`, with all its CFs."""
    opts = db_options(options)
    names = rocksdict.Rdict.list_cf(path, opts)
    return rocksdict.Rdict(
        path,
        opts,
        column_families={name: opts for name in names},
        access_type=rocksdict.AccessType.read_only(False),  # a WAL file there is empty
    )
