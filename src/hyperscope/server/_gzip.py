"""A gzip answer whose long beginning is compressed once and whose short ending varies.

A cached dashboard is ~110 KB of JSON that never changes, followed by a few fields that do (the
scope, ``cached``, the server's ``elapsed_ms``). Compressing the whole answer again for every
request cost 2 ms of the server's one Python core at level 5, most of a cached answer's time
(bench/soak.py). Deflate lets a stream be cut at a byte boundary (a sync flush, which closes the
current block without ending the stream) and continued by another compressor's blocks: the
beginning is compressed once, each ending on its own (it cannot refer back into the beginning,
which costs a few bytes), and the gzip trailer's CRC-32 is carried on from the beginning's. The
result is one ordinary gzip member, as any client decodes it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

#: gzip's fixed header: deflate, no flags, no time stamp (answers are the same whenever made), OS
#: unknown
_HEADER: Final = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
#: the same level as the app's GZipMiddleware
LEVEL: Final = 5


@dataclass(frozen=True, slots=True)
class GzipHead:
    """A gzip stream's first part: the compressed bytes, and the CRC-32 and length of its input."""

    data: bytes
    crc: int
    size: int


def head(prefix: bytes, level: int = LEVEL) -> GzipHead:
    """``prefix`` compressed up to a byte boundary, to be finished by :func:`finish`."""
    deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw: we write the framing
    data = _HEADER + deflate.compress(prefix) + deflate.flush(zlib.Z_SYNC_FLUSH)
    return GzipHead(data, zlib.crc32(prefix), len(prefix))


def finish(start: GzipHead, suffix: bytes, level: int = LEVEL) -> bytes:
    """The whole gzip member of ``prefix + suffix``, ``prefix`` being what ``start`` was made from."""
    deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    tail = deflate.compress(suffix) + deflate.flush(zlib.Z_FINISH)  # the last block, marked final
    trailer = struct.pack("<II", zlib.crc32(suffix, start.crc), (start.size + len(suffix)) & 0xFFFFFFFF)
    return start.data + tail + trailer
