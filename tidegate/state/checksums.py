"""Checksums of checkpoint artifacts: computed while a file is written, verified on restore.

The algorithm is CRC-32 (zlib's, the polynomial of gzip, zip and PNG): it detects every burst
error up to 32 bits and any other damage (a flipped bit, a truncated or partly overwritten file)
with probability 1 - 2^-32, and runs at several GB/s, so checksumming while writing adds no
second pass over the data. It is not a defence against deliberate tampering (nor is anything
else here: state is pickled, so checkpoints must come from storage you trust).

A checksum is written as `"<algorithm>:<hex digest>"`, e.g. `"crc32:0a1b2c3d"`, so the
algorithm can change in a later format version without ambiguity.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from collections.abc import Callable
from types import TracebackType
from typing import Any, BinaryIO

ALGORITHM = "crc32"
#: bytes read at a time when a file's checksum is verified
READ_CHUNK = 1 << 20


def format_checksum(crc: int) -> str:
    """`crc32:<8 hex digits>` for a CRC-32 value."""
    return f"{ALGORITHM}:{crc & 0xFFFFFFFF:08x}"


def checksum_of(data: bytes) -> str:
    """The checksum of `data`."""
    return format_checksum(zlib.crc32(data))


def is_known_checksum(value: Any) -> bool:
    """Whether `value` is a checksum string this tidegate can verify."""
    if not isinstance(value, str):
        return False
    algorithm, _, digest = value.partition(":")
    return algorithm == ALGORITHM and re.fullmatch("[0-9a-f]{8}", digest) is not None


def read_checksum(f: BinaryIO) -> tuple[int, str]:
    """Read `f` to its end; return (bytes read, checksum)."""
    crc, size = 0, 0
    while chunk := f.read(READ_CHUNK):
        crc = zlib.crc32(chunk, crc)
        size += len(chunk)
    return size, format_checksum(crc)


class ChecksummingWriter:
    """A binary file opened for writing that counts and checksums every byte written to it.

    Use it as a context manager; once closed, `size` and `checksum` describe the file exactly
    as written (no second read) and `handle` is what `_metadata` records for it.
    """

    def __init__(self, raw: BinaryIO, name: str, location: str | None = None) -> None:
        self._raw = raw
        #: the file's name, relative to its checkpoint directory
        self.name = name
        #: where the file is (for error messages; default: `name`)
        self.location = location or name
        self.size = 0
        self._crc = 0
        self._mirror: BinaryIO | None = None
        self._on_mirror_failure: Callable[[], None] | None = None

    def mirror_to(self, mirror: BinaryIO, on_failure: Callable[[], None]) -> None:
        """Write everything to `mirror` too (a task-local copy), best effort: if writing the
        mirror fails, it is dropped and `on_failure` is called; the file itself is unaffected."""
        self._mirror, self._on_mirror_failure = mirror, on_failure

    def _drop_mirror(self) -> None:
        mirror, self._mirror = self._mirror, None
        if mirror is not None:
            with contextlib.suppress(OSError):
                mirror.close()
            if self._on_mirror_failure is not None:
                self._on_mirror_failure()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._raw.write(data)  # binary files write everything or raise
        if self._mirror is not None:
            try:
                self._mirror.write(data)
            except OSError:
                self._drop_mirror()
        self._crc = zlib.crc32(data, self._crc)
        written = memoryview(data).nbytes
        self.size += written
        return written

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self._raw.close()
        if self._mirror is not None:
            try:
                self._mirror.close()
            except OSError:
                self._drop_mirror()

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    def writable(self) -> bool:
        return True

    @property
    def checksum(self) -> str:
        return format_checksum(self._crc)

    def __enter__(self) -> ChecksummingWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, OSError):  # a full disk, a lost mount: say which file
            exc.add_note(f"while writing {self.location}")
        if exc_type is None:
            try:
                self.close()
            except OSError as e:  # the last buffered bytes did not fit
                e.add_note(f"while writing {self.location}")
                raise
            return
        self._drop_mirror()  # an incomplete file must not survive as a local copy
        # Closing would publish the incomplete file; on object stores (s3fs) `discard` aborts
        # the multipart upload instead, so neither the object nor its uploaded parts remain.
        # Elsewhere the partial file stays an orphan that no handle references.
        discard = getattr(self._raw, "discard", None)
        if callable(discard) and not self._raw.closed:
            try:
                discard()
            except Exception:  # not discardable (a local file): close it, the orphan stays
                self._raw.close()
            else:
                # a discarded file cannot be closed (that would upload), and must not be by
                # its finalizer either
                with contextlib.suppress(AttributeError):
                    self._raw.closed = True  # type: ignore[misc]
        else:
            self._raw.close()
