"""A minimal PNG decoder for checking screenshots (8-bit RGB or RGBA, not interlaced: what
Chromium writes), so the tests need no imaging library."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from itertools import accumulate

SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    #: bytes per pixel: 3 (RGB) or 4 (RGBA)
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        i = x * self.channels
        r, g, b = self.rows[y][i : i + 3]
        return r, g, b


def decode_png(data: bytes) -> Image:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    pos, idat, header = len(SIGNATURE), [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, color, _compression, _filter, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(
            f"unsupported PNG: depth {depth}, color type {color}, interlace {interlace}"
        )
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous, i = [], bytes(stride), 0
    for _ in range(height):
        kind, line = raw[i], raw[i + 1 : i + 1 + stride]
        i += 1 + stride
        previous = _unfilter(kind, line, previous, channels)
        rows.append(previous)
    return Image(width, height, channels, rows)


def _unfilter(kind: int, line: bytes, up: bytes, bpp: int) -> bytes:
    if kind == 0:
        return bytes(line)
    if kind == 2:
        return bytes((a + b) & 255 for a, b in zip(line, up, strict=True))
    if kind == 1:
        out = bytearray(len(line))
        for c in range(bpp):
            out[c::bpp] = bytes(accumulate(line[c::bpp], lambda a, b: (a + b) & 255))
        return bytes(out)
    out = bytearray(line)
    for x in range(len(line)):
        left = out[x - bpp] if x >= bpp else 0
        above = up[x]
        if kind == 3:
            out[x] = (out[x] + ((left + above) >> 1)) & 255
            continue
        corner = up[x - bpp] if x >= bpp else 0
        p = left + above - corner
        pa, pb, pc = abs(p - left), abs(p - above), abs(p - corner)
        predictor = left if pa <= pb and pa <= pc else above if pb <= pc else corner
        out[x] = (out[x] + predictor) & 255
    return bytes(out)
