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
    frames = []
    for n in range(count):
        head = f.read(_FRAME.size)
        if len(head) != _FRAME.size:
            raise CorruptStateError(path, f"truncated (frame {n} of {count} missing)")
        length, crc = _FRAME.unpack(head)
        blob = f.read(length)
        if len(blob) != length:
            raise CorruptStateError(path, f"truncated (frame {n} of {count} is cut short)")
        if zlib.crc32(blob) != crc:
            raise CorruptStateError(path, f"frame {n} of {count} is damaged (checksum mismatch)")
        frames.append(pickle.loads(blob))
    return frames
