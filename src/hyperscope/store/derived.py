"""Results derived from a finished profile and kept beside it, in ``<profile>/derived/``.

A finished profile never changes, so what is slow to compute from it (the whole dashboard, the
timeline's index) is computed once and read back by any later process. Each result is named by a
digest of the source of the code that computed it: a hyperscope whose code changed never reads
an older one's results, it computes and keeps its own. Removing a job removes them with it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Final

DERIVED_DIR: Final = "derived"
#: Profiles with fewer events than this keep no timeline index on disk: built at the first view
#: (about a second) and held in memory, since even compressed it weighs about as much as their
#: events (on the shared traces, 0.85-1.0 times: the stored profile would break its bound of a
#: third of the gzipped JSON; bench/README.md, "Storage"); ``HYPERSCOPE_TIMELINE_STORE_MIN``. Here,
#: not in ``timeline.index``, so an import can tell without importing the timeline (~30 ms).
TIMELINE_STORE_MIN_EVENTS: Final = 1_000_000


def timeline_store_min() -> int:
    """Profiles with fewer events keep no timeline index on disk (``TIMELINE_STORE_MIN_EVENTS``,
    else the variable)."""
    try:
        return int(os.environ.get("HYPERSCOPE_TIMELINE_STORE_MIN", TIMELINE_STORE_MIN_EVENTS))
    except ValueError:
        return TIMELINE_STORE_MIN_EVENTS


@functools.cache
def source_digest(package: Path) -> str:
    """A digest of every module of ``package`` (a directory): what a derived result depends on."""
    digest = hashlib.sha256()
    for source in sorted(package.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


_ZSTD_LEVEL: Final = 15
_MAGIC: Final = b"hs-zstd1"
_MAX_BYTES: Final = 1 << 36


def write_packed(path: Path, data: bytes) -> None:
    """``data`` zstd-compressed, after a mark and its length (8 bytes, little-endian): derived results are
    counted in the profile's size, and their JSON is mostly repeated names and keys (the 8-rank
    DLRM set's dashboard and index metadata: several times its events file, uncompressed)."""
    import pyarrow as pa

    packed = pa.Codec("zstd", _ZSTD_LEVEL).compress(data, asbytes=True)
    path.write_bytes(_MAGIC + len(data).to_bytes(8, "little") + packed)


def read_packed(path: Path) -> bytes:
    """What :func:`write_packed` wrote; ``ValueError`` when the file is not whole."""
    import pyarrow as pa

    raw = path.read_bytes()
    head = len(_MAGIC) + 8
    size = int.from_bytes(raw[len(_MAGIC) : head], "little")
    if len(raw) < head or not raw.startswith(_MAGIC) or size > _MAX_BYTES:
        raise ValueError(f"{path}: not a packed result")
    try:
        out = pa.Codec("zstd").decompress(raw[head:], size, asbytes=True)
    except (pa.ArrowException, MemoryError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return bytes(out)
