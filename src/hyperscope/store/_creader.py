"""A compiled reader that turns a chunk of Kineto events into typed columns (Arrow), without SQL
per event and without a Python object per event.

DuckDB's transform of a chunk (``_sql.rows``) is most of the import's time: it parses every event's
``args`` once per typed column. ``_kineto_reader.c`` reads each event once and writes the columns
straight into Arrow buffers; ``_arrow_rows.from_reader_columns`` then adds rank, node, kind and
memcpy_kind over those columns with Arrow compute.

The C file ships in the package and is compiled on first use with the system's C compiler into the
user's cache (named by the source's hash, so an upgrade compiles afresh; written under a temporary
name and renamed, so concurrent imports never load half a file). Where there is no compiler, or it
fails, or ``HYPERSCOPE_IMPORT_READER=sql`` is set, every chunk takes the DuckDB path as before.

The reader accepts only what it can turn into exactly the rows of the DuckDB path; on anything else
(an unknown key, a string pid, a time with an exponent, ...) it gives the chunk back (``None``) and
the DuckDB path reads it, with its checks and its errors. It never decides whether an event is valid.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from hyperscope.schema.events import ARG_COLUMNS

SOURCE: Final = Path(__file__).with_name("_kineto_reader.c")
#: Compiled into the same library: the count of complete values the reader's cuts are checked by,
#: and the timeline's first-fit lanes (``pack_lanes``).
SOURCES: Final = (
    SOURCE,
    Path(__file__).with_name("_json_values.c"),
    Path(__file__).parents[1] / "timeline" / "_lanes.c",
)
#: Included by ``SOURCE`` (JSON strings and numbers as the reader reads and writes them).
HEADERS: Final = (Path(__file__).with_name("_json_text.h"), Path(__file__).with_name("_json_plain.h"))
#: ``sql`` turns the compiled reader off (the DuckDB path reads every chunk); anything else, or
#: unset, uses it where it can be built.
ENV: Final = "HYPERSCOPE_IMPORT_READER"

_T_INT, _T_DOUBLE, _T_STR, _T_LIST = 0, 1, 2, 3
_ARG_TYPES: Final = {
    pa.int64(): _T_INT,
    pa.float64(): _T_DOUBLE,
    pa.string(): _T_STR,
    pa.list_(pa.int64()): _T_LIST,
}
#: The columns the C reader fills, in its order (``C_PH`` ... ``C_EXTRA``, then the typed args).
FIXED: Final = (
    ("ph_s", _T_STR),
    ("cat_s", _T_STR),
    ("name_s", _T_STR),
    ("pid_i", _T_INT),
    ("tid_i", _T_INT),
    ("ts_ns", _T_INT),
    ("dur_ns", _T_INT),
    ("id_i", _T_INT),
    ("args", _T_STR),
    ("extra", _T_STR),
)
COLUMNS: Final = FIXED + tuple((f"v{i}", _ARG_TYPES[c.type]) for i, c in enumerate(ARG_COLUMNS, start=1))
_ARROW: Final = {
    _T_INT: pa.int64(),
    _T_DOUBLE: pa.float64(),
    _T_STR: pa.string(),
    _T_LIST: pa.list_(pa.int64()),
}


class _Column(ctypes.Structure):
    _fields_ = (
        ("type", ctypes.c_int32),
        ("keylen", ctypes.c_int32),
        ("key", ctypes.c_char_p),
        ("values", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
        ("valid", ctypes.c_void_p),
        ("cap", ctypes.c_int64),
        ("used", ctypes.c_int64),
    )


_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hyperscope"


def build(out_dir: Path | None = None) -> Path | None:
    """The compiled reader (compiled now if these sources' build is not cached); None without a
    working C compiler."""
    try:
        digest = hashlib.sha256(b"".join(s.read_bytes() for s in (*SOURCES, *HEADERS))).hexdigest()[:16]
    except OSError:  # a package missing its C files: the DuckDB path, as without a compiler
        return None
    target = (out_dir or cache_dir()) / f"kineto_reader-{digest}.so"
    if target.is_file():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
        os.close(fd)
        done = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", tmp, *map(str, SOURCES)],
            capture_output=True,
            timeout=120,
        )
        if done.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            return None
        os.replace(tmp, target)  # atomic: another import loads the old file or the whole new one
    except (OSError, subprocess.SubprocessError):
        return None
    return target


def _library() -> ctypes.CDLL | None:
    with _lock:
        if "lib" not in _loaded:
            path = build()
            lib = None
            if path is not None:
                try:
                    lib = ctypes.CDLL(str(path))  # CDLL releases the GIL during each call
                    lib.hs_read_events.restype = ctypes.c_int64
                    lib.hs_count_values.restype = ctypes.c_int64
                    lib.hs_count_values.argtypes = (
                        ctypes.c_char_p,
                        ctypes.c_int64,
                        ctypes.POINTER(ctypes.c_int64),
                    )
                    lib.hs_pack_lanes.restype = ctypes.c_int64
                    lib.hs_pack_lanes.argtypes = (ctypes.c_void_p,) * 2 + (ctypes.c_int64, ctypes.c_void_p)
                    lib.hs_read_events.argtypes = (
                        ctypes.c_char_p,
                        ctypes.c_int64,
                        ctypes.c_int64,
                        ctypes.POINTER(_Column),
                        ctypes.c_int,
                    )
                except OSError:
                    lib = None
            _loaded["lib"] = lib
        return _loaded["lib"]


def available() -> bool:
    """Whether chunks go to the compiled reader first (see ``ENV``)."""
    return os.environ.get(ENV, "").lower() != "sql" and _library() is not None


def count_values(text: bytes) -> tuple[int, int] | None:
    """How many complete JSON values ``text`` holds (as inside an array) and the longest one's
    bytes; None when the compiled code is not sure (``_json_values.c``: then msgspec decides) or
    is not available."""
    lib = _library() if available() else None
    if lib is None:
        return None
    largest = ctypes.c_int64(0)
    got = lib.hs_count_values(text, len(text), ctypes.byref(largest))
    return None if got < 0 else (int(got), int(largest.value))


def pack_lanes(ts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Each event's first-fit lane (``timeline/_lanes.c``), events in order of (start, longer
    first); None where the library is not available (the caller's loop in Python then)."""
    lib = _library()
    if lib is None:
        return None
    ts = np.ascontiguousarray(ts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    out = np.empty(len(ts), dtype=np.int64)
    if lib.hs_pack_lanes(ts.ctypes.data, ends.ctypes.data, len(ts), out.ctypes.data) < 0:
        raise MemoryError(f"packing {len(ts):,} events into lanes")
    return out


def read_columns(text: bytes, count: int) -> pa.Table | None:
    """The ``count`` events of ``text`` as columns named as in ``COLUMNS``; None when the reader
    cannot answer for this chunk (the DuckDB path must read it) or is not available."""
    lib = _library()
    if lib is None or count <= 0:
        return None
    size = len(text)
    arrays = (_Column * len(COLUMNS))()
    keys: list[bytes] = []
    # each column's buffers, kept alive by its Arrow array alone: a column let go frees its memory
    owned: list[list[np.ndarray[Any, Any]]] = []
    nbits = (count + 7) // 8
    for i, (name, kind) in enumerate(COLUMNS):
        col = arrays[i]
        col.type = kind
        if i >= len(FIXED):
            key = ARG_COLUMNS[i - len(FIXED)].key.encode()
            keys.append(key)
            col.key, col.keylen = key, len(key)
        valid = np.zeros(nbits, np.uint8)
        col.valid = valid.ctypes.data
        mine: list[np.ndarray[Any, Any]] = [valid]
        if kind in (_T_INT, _T_DOUBLE):
            values = np.zeros(count, np.int64)
            col.values = values.ctypes.data
            mine.append(values)
        else:
            offsets = np.zeros(count + 1, np.int32)
            col.offsets = offsets.ctypes.data
            mine.append(offsets)
            if kind == _T_STR:
                cap = 2 * size + 4096 if name == "args" else size + 16
                data = np.empty(cap, np.uint8)
                col.data, col.cap = data.ctypes.data, cap
            else:
                cap = size // 2 + 16
                data = np.empty(cap, np.int64)
                col.values, col.cap = data.ctypes.data, cap
            mine.append(data)
        owned.append(mine)
    got = lib.hs_read_events(text, size, count, arrays, len(COLUMNS))
    if got != count:
        return None
    out = [_to_arrow(kind, count, arrays[i], owned[i]) for i, (_, kind) in enumerate(COLUMNS)]
    return pa.table(out, names=[name for name, _ in COLUMNS])


def _to_arrow(kind: int, count: int, col: _Column, keep: list[np.ndarray[Any, Any]]) -> pa.Array:
    valid = pa.foreign_buffer(col.valid, (count + 7) // 8, base=keep)
    if kind in (_T_INT, _T_DOUBLE):
        values = pa.foreign_buffer(col.values, 8 * count, base=keep)
        return pa.Array.from_buffers(_ARROW[kind], count, [valid, values])
    offsets = pa.foreign_buffer(col.offsets, 4 * (count + 1), base=keep)
    if kind == _T_STR:
        data = pa.foreign_buffer(col.data, max(col.used, 1), base=keep)
        return pa.Array.from_buffers(pa.string(), count, [valid, offsets, data])
    child = pa.Array.from_buffers(
        pa.int64(), col.used, [None, pa.foreign_buffer(col.values, 8 * col.used, base=keep)]
    )
    return pa.Array.from_buffers(_ARROW[_T_LIST], count, [valid, offsets], children=[child])
