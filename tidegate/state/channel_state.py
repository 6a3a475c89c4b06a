"""On-disk format of one subtask's channel state: the in-flight frames an unaligned checkpoint
persisted (runtime/inflight.py), replayed into the same input channels on restore.

Layout (integers little-endian)::

    header   b"TGCS" | u16 format version | u16 reserved (0) | u32 frame count
    frames   per frame: u32 length | u32 crc32 | pickled (channel index, [records])

Frames are stored in arrival order, which is channel order within each channel.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any, BinaryIO

from tidegate.state.snapshot_format import CorruptStateError

MAGIC = b"TGCS"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHHI")
_FRAME = struct.Struct("<II")


def write_channel_state(f: BinaryIO, frames: list[bytes]) -> int:
    """Write pickled frames; returns the bytes written."""
    f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(frames)))
    size = _HEADER.size
    for blob in frames:
        f.write(_FRAME.pack(len(blob), zlib.crc32(blob)))
        f.write(blob)
        size += _FRAME.size + len(blob)
    return size


def read_channel_state(f: BinaryIO, path: str) -> list[tuple[int, list[Any]]]:
    """The (channel, records) frames of a channel-state file, in order."""
    header = f.read(_HEADER.size)
    if len(header) != _HEADER.size or header[:4] != MAGIC:
        raise CorruptStateError(path, "not a tidegate channel-state file")
    _magic, version, _reserved, count = _HEADER.unpack(header)
    if version != FORMAT_VERSION:
        raise CorruptStateError(
            path,
            f"channel-state format version {version}, but this tidegate reads {FORMAT_VERSION}",
            "use the tidegate version that wrote it",
        )
    position = f.tell()
    size = f.seek(0, 2)
    f.seek(position)
    frames = []
    for n in range(count):
        head = f.read(_FRAME.size)
        if len(head) != _FRAME.size:
            raise CorruptStateError(path, f"truncated (frame {n} of {count} missing)")
        position += _FRAME.size
        length, crc = _FRAME.unpack(head)
        if length > size - position:  # checked before reading: a damaged length is huge
            raise CorruptStateError(path, f"truncated (frame {n} of {count} is cut short)")
        blob = f.read(length)
        position += length
        if zlib.crc32(blob) != crc:
            raise CorruptStateError(path, f"frame {n} of {count} is damaged (checksum mismatch)")
        frames.append(_frame(blob, path, n))
    if position != size:
        raise CorruptStateError(path, f"{size - position} bytes follow its {count} frames")
    return frames


def _frame(blob: bytes, path: str, n: int) -> tuple[int, list[Any]]:
    """Frame `n` (its checksum matched): (channel index, records)."""
    try:
        frame = pickle.loads(blob)
    except Exception as e:
        raise CorruptStateError(
            path,
            f"frame {n} cannot be unpickled ({type(e).__name__}: {e})",
            "restore with the job code (and tidegate version) that wrote the checkpoint",
        ) from e
    if type(frame) is not tuple or len(frame) != 2 or type(frame[0]) is not int:
        raise CorruptStateError(path, f"frame {n} is not (channel, records)")
    return frame
