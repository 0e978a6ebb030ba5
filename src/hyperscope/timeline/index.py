"""The timeline's level-of-detail index: every drawable event of a profile in per-row arrays.

A tile must answer in milliseconds whatever the zoom, and the Parquet store is sorted by
``(rank, pid, tid, kind, ts_ns)``, which mixes the kinds of one thread and knows nothing of nesting.
So once per profile (at import, at the end of a capture, or at first view) the events are read once
and arranged in the columns below. A profile of ``store.derived.TIMELINE_STORE_MIN_EVENTS`` or
more keeps them beside it in ``<profile>/derived/timeline-<digest>/`` as compressed blocks
(``_blocks``: ``<column>.blk`` and ``meta.json.zst``, about 0.1-2 bytes an event against 32 as
plain arrays) that a later process decodes a block at a time, only where its tiles look; a
smaller one is built at its first view and held in memory (about a second; stored, even
compressed, it weighs about as much as its events). The ``.npy`` columns of earlier versions
still read (memory-mapped):

- rows: one per host thread (``host/<rank>/<pid>/<tid>``) and per GPU stream
  (``stream/<rank>/<device>/<stream>``); within a row events are sorted by ``(depth, ts_ns)``, where
  depth is the nesting level (the number of the row's events still open at the event's start);
- ``cum`` (one more entry than events): the summed durations of every earlier event of the index.
  An event's duration is ``cum[i + 1] - cum[i]`` (not stored a second time), and events of one
  depth do not overlap, so the time they cover up to any instant is a difference of two ``cum``
  entries found by binary search: the busy time of a pixel column is exact without visiting its
  events;
- ``perm``: the row's events again (positions relative to the row's start), grouped by duration
  class ``floor(log2(dur))`` and sorted by start within a class, so the events wider than a pixel
  are found by binary search in the classes that can hold them (all of a tile's (row, class)
  searches at once, ``tile._class_ranges``), never by scanning the small ones; ``pts``, the start
  times in that order, so that those searches read one column where they search (compressed, a
  search through ``ts[perm]`` would decode a block of ``ts`` per probe);
- instants (``ph`` ``i``/``I``, not ``[memory]`` or counters): ``m_ts``, ``m_name``, ``m_src`` per
  row, sorted by ``(ts, id)``, for the tiles' marks. A row may hold only instants (no events).

Each column takes the narrowest integer type its values fit (``name`` uint16 below 65,536 names,
``corr`` int32, ``depth`` uint8 up to 255 levels, ``src`` and ``perm`` uint32), kept in the blocks'
directory; ``ts`` and ``cum`` are int64. An event's id (``src``) is its row number in
the profile's part files taken in name order (``offsets`` in ``meta.json`` says where each part
begins): below 2^53, so JSON-safe, and stable for a given index.

The existing Parquet files are never modified. The directory name carries a digest of this
package's code and of the profile's part files, so a newer hyperscope or a capture that flushed
more parts builds its own; a read-only store keeps the index in memory only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope._proc import process_alive
from hyperscope.schema.events import EventKind
from hyperscope.schema.layout import EVENTS_DIR
from hyperscope.store.derived import DERIVED_DIR, read_packed, source_digest, timeline_store_min, write_packed
from hyperscope.store.profile import Profile
from hyperscope.timeline import _blocks
from hyperscope.timeline import overview as _overview
from hyperscope.timeline._durations import Durations as Durations

log = logging.getLogger("hyperscope.timeline")

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[Any]  # an integer column of the narrowest type that holds it
Column = Any  # an index column: ``Ints`` or ``_blocks.BlockColumn`` (read as arrays are)

#: kinds drawn on a host row (the thread that recorded them)
HOST_KINDS: Final = (
    EventKind.STEP,
    EventKind.ANNOTATION,
    EventKind.PYTHON,
    EventKind.CPU_OP,
    EventKind.RUNTIME,
    EventKind.DRIVER,
)
#: kinds drawn on a device row (GPU index, stream)
DEVICE_KINDS: Final = (
    EventKind.KERNEL,
    EventKind.MEMCPY,
    EventKind.MEMSET,
    EventKind.SYNC,
    EventKind.GPU_ANNOTATION,
)
KINDS: Final[tuple[str, ...]] = tuple(str(k) for k in (*HOST_KINDS, *DEVICE_KINDS))
#: instants (ph i or I) of these kinds are not marks: the memory track and counters draw them
NOT_MARKS: Final = (EventKind.MEMORY, EventKind.COUNTER)
#: duration classes: floor(log2(dur_ns)), 0 for 0 and 1 ns
CLASSES: Final = 64
COLUMNS: Final = (
    "ts",
    "cum",
    "name",
    "kind",
    "corr",
    "depth",
    "src",
    "perm",
    "pts",
    "m_ts",
    "m_name",
    "m_src",
)
#: depth is clipped there (the lanes below it may overlap)
MAX_DEPTH: Final = 65535
META: Final = "meta.json.zst"


@dataclass(frozen=True, slots=True)
class RowInfo:
    """One event row: where its events (and instants) lie in the index arrays."""

    id: str
    side: str  # "host" or "device"
    rank: int
    node: str
    a: int  # pid (host) or device (device)
    b: int  # tid (host) or stream (device)
    start: int  # first index of the row in the arrays
    stop: int
    depth_starts: tuple[int, ...]  # index where each depth begins (len = depths + 1, last = stop)
    class_starts: tuple[int, ...]  # index into perm where each class begins (len CLASSES + 1)
    t_min: int  # earliest start and latest end of the row's events and instants
    t_max: int
    m_start: int = 0  # the row's instants: m_ts[m_start:m_stop]
    m_stop: int = 0

    @property
    def depths(self) -> int:
        return len(self.depth_starts) - 1


@dataclass(frozen=True)
class Index:
    """The arrays and rows of one profile's timeline index (see the module docstring)."""

    rows: tuple[RowInfo, ...]
    names: tuple[str, ...]
    parts: tuple[str, ...]  # part file names, in event-id order
    offsets: tuple[int, ...]  # event id of each part's first row (len parts + 1, last = all rows)
    # each column an array (built in memory, or the earlier layout's memory-mapped ``.npy``) or a
    # ``_blocks.BlockColumn`` (stored): both read as arrays are, by index, slice or index array
    ts: Column
    cum: Column  # len(ts) + 1: durations summed over the earlier events of the index
    name: Column
    kind: Column  # int8
    corr: Column  # -1 where the event has no correlation
    depth: Column
    src: Column  # event id: row number over the part files, in name order
    perm: Column  # relative to the row's start
    pts: Column  # ts[start + perm]: the starts in class order, what the tiles' bisections read
    m_ts: Column  # instants
    m_name: Column
    m_src: Column
    #: ``rows.steps`` as a stored index keeps it (None: computed from the columns)
    stored_steps: tuple[dict[str, Any], ...] | None = None
    #: what wide tiles draw, kept with a stored index (``overview``; None: read from the columns)
    overview: _overview.Overview | None = None

    @functools.cached_property
    def by_id(self) -> dict[str, RowInfo]:
        return {r.id: r for r in self.rows}

    @property
    def dur(self) -> Durations:
        return Durations(self.cum)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (what the index takes on disk, but the few of the headers; for
        compressed blocks, their bytes on disk)."""
        return sum(int(getattr(self, c).nbytes) for c in COLUMNS)


#: indexes kept in this process, least recently used first, with the bytes each holds in memory:
#: one read from disk holds its directory only (its decoded blocks are ``_blocks.CACHE``'s, bounded
#: on their own; 0 counted), one built in memory (a small profile, a read-only store) holds all its
#: arrays, ~32 bytes an event. A server looking through
#: many profiles of a read-only store would otherwise keep every one it ever drew.
_CACHE: OrderedDict[Path, tuple[Index, int]] = OrderedDict()
#: at most this many indexes kept, and this many bytes of those built in memory
CACHE_ENTRIES: Final = 32
CACHE_MEMORY_BYTES: Final = 1 << 30
_LOCK = threading.Lock()
_LOCKS: dict[Path, threading.Lock] = {}


def code_digest() -> str:
    """A digest of this package's source: an index built by other code is never read."""
    return source_digest(Path(__file__).parent)


def _parts(profile: Profile) -> list[Path]:
    return sorted((profile.path / EVENTS_DIR).glob("*.parquet"))


def index_dir(profile: Profile) -> Path:
    """Where the index of the profile as it is now lives (parts listed by name and size)."""
    digest = hashlib.sha256(code_digest().encode())
    for part in _parts(profile):
        digest.update(f"{part.name}:{part.stat().st_size};".encode())
    return profile.path / DERIVED_DIR / f"timeline-{digest.hexdigest()[:16]}"


def _lock(where: Path) -> threading.Lock:
    with _LOCK:  # one lock per index: building a large one does not hold up the others
        return _LOCKS.setdefault(where, threading.Lock())


def load(profile: Profile, progress: Callable[[float], None] | None = None) -> Index:
    """The profile's index: from this process's cache, from disk, or built now (and stored);
    ``progress`` hears how far a build has got (0 to 1)."""
    where = index_dir(profile)
    with _lock(where):
        found = _cached(where)
        if found is not None:
            return found
        index = _read(where)
        resident = 0
        if index is None:
            index = _build_and_store(profile, where, progress)
            resident = 0 if _mapped(index) else index.nbytes
        _keep(where, index, resident)
        return index


def _cached(where: Path) -> Index | None:
    with _LOCK:
        found = _CACHE.get(where)
        if found is None:
            return None
        _CACHE.move_to_end(where)
        return found[0]


def _mapped(index: Index) -> bool:
    """Whether the arrays are read from the stored files (``_read``: compressed blocks, decoded
    into the process's bounded block cache, or memory-mapped ``.npy`` of the earlier layout), not
    arrays of their own."""
    return isinstance(index.ts, _blocks.BlockColumn) or isinstance(getattr(index.ts, "base", None), np.memmap)


def _keep(where: Path, index: Index, resident: int) -> None:
    """Keep ``index``; drop the least recently used ones past ``CACHE_ENTRIES`` or, of those built in
    memory, past ``CACHE_MEMORY_BYTES`` (the newest is kept whatever its size: it is in use)."""
    with _LOCK:
        _CACHE[where] = (index, resident)
        _CACHE.move_to_end(where)
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
        older = [w for w, (_, r) in _CACHE.items() if r and w != where]
        while older and sum(r for _, r in _CACHE.values()) > CACHE_MEMORY_BYTES:
            del _CACHE[older.pop(0)]


def ready(profile: Profile) -> bool:
    """Whether ``load`` answers without building (kept in this process, or stored beside it)."""
    return _ready(index_dir(profile))


def _ready(where: Path) -> bool:
    return where in _CACHE or (where / META).is_file() or (where / "meta.json").is_file()


def worth_storing(profile: Profile) -> bool:
    """Whether the profile is large enough for its index to be kept on disk
    (``TIMELINE_STORE_MIN_EVENTS``: a smaller one is built in memory at its first view, in about
    a second)."""
    import pyarrow.parquet as pq

    try:
        events = int(sum(pq.ParquetFile(p).metadata.num_rows for p in _parts(profile)))
    except (OSError, ValueError):
        return True
    return events >= timeline_store_min()


def store(profile: Profile) -> bool:
    """Build the profile's index and keep it beside the profile, unless it is there already or the
    profile is too small to be worth it (what import and the end of a capture do, so that the first
    view of a large profile reads it from disk). False where the store is read-only or the profile
    small: the first view then builds it in memory. Nothing is kept in this process."""
    where = index_dir(profile)
    if not worth_storing(profile):
        return False
    with _lock(where):
        return _ready(where) or _build_into(profile, where) is not None


def _build_into(
    profile: Profile, where: Path, progress: Callable[[float], None] | None = None
) -> Index | None:
    """Build into a staging directory renamed into place (readers see all of it or nothing); None
    when it cannot be written."""
    tmp = where.with_name(f".{where.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    _remove_abandoned(where.parent)
    try:
        where.parent.mkdir(exist_ok=True)  # never the profile's own directory: removed is removed
        tmp.mkdir()
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is kept in memory: %s", where, exc)
        return None
    try:
        build(profile, tmp, progress)
        pack(tmp)
        for old in where.parent.glob("timeline-*"):  # indexes of older code or fewer parts
            if old != where:
                shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, where)
    except OSError as exc:  # a full disk (space is reserved before it is mapped: never SIGBUS)
        log.warning("hyperscope: the timeline index of %s is not stored (built again later): %s", where, exc)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _read(where)


#: Threads that compress the index's columns (``pack``).
PACK_THREADS: Final = 2


def pack(where: Path) -> None:
    """Turn the ``.npy`` columns and ``meta.json`` a build wrote into ``where`` into compressed
    blocks (``<column>.blk``, see ``_blocks``) and ``meta.json.zst`` with their directory. The
    columns are read memory-mapped, a block at a time: memory stays bounded whatever the size."""
    meta = json.loads((where / "meta.json").read_text())
    from hyperscope.timeline.rows import step_windows

    # The columns are compressed on threads of their own (zstd and numpy's copies let the GIL go:
    # the 1 GB trace's pack, 1.17 s on one thread) while this one finds the steps and the overview.
    # Every .npy is opened here first: np.load parses its header with ast.literal_eval, and
    # CPython 3.11 builds ASTs in two threads at once into "SystemError: AST constructor
    # recursion depth mismatch" (seen here in the suite); the pack threads compile nothing.
    mapped = {c: np.load(where / f"{c}.npy", mmap_mode="r") for c in COLUMNS}
    with ThreadPoolExecutor(PACK_THREADS, thread_name_prefix="hyperscope-pack") as pool:
        pending = {c: pool.submit(_blocks.write_column, where / f"{c}.blk", mapped[c], c) for c in COLUMNS}
        rows = tuple(_row_info(r) for r in meta["rows"])
        cols = {c: mapped[c] for c in ("kind", "name", "ts", "cum")}
        meta["steps"] = step_windows(
            rows, cols["kind"], cols["name"], cols["ts"], cols["cum"], tuple(meta["names"])
        )
        meta["overview"] = _overview.write(where, cols["ts"], cols["cum"], rows)
        del cols
        meta["columns"] = {c: done.result() for c, done in pending.items()}
    del mapped
    for c in COLUMNS:
        (where / f"{c}.npy").unlink()
    write_packed(where / META, json.dumps(meta, separators=(",", ":")).encode())
    (where / "meta.json").unlink()


def _remove_abandoned(derived: Path) -> None:
    """Staging directories (``.timeline-<digest>.<pid>-<id>``) of builds whose process is gone (a
    build killed by a signal, or by the machine's end, cannot remove its own)."""
    for entry in derived.glob(".timeline-*.*-*"):
        pid = entry.name.rpartition(".")[2].partition("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _build_and_store(profile: Profile, where: Path, progress: Callable[[float], None] | None) -> Index:
    """Built and stored; in memory where the store is read-only or the profile small."""
    index = _build_into(profile, where, progress) if worth_storing(profile) else None
    return index if index is not None else build(profile, progress=progress)


def _read(where: Path) -> Index | None:
    """The stored index: compressed blocks (``meta.json.zst``), or the ``.npy`` columns earlier
    versions wrote (``meta.json``), memory-mapped; None when there is none or it is not whole."""
    try:
        if (where / META).is_file():
            meta = json.loads(read_packed(where / META))
            arrays: dict[str, Any] = {
                c: _blocks.BlockColumn(where / f"{c}.blk", c, meta["columns"][c]) for c in COLUMNS
            }
        else:
            meta = json.loads((where / "meta.json").read_text())
            # plain arrays over the mapped files: slicing a memmap costs a Python call, hundreds a tile
            arrays = {
                c: np.asarray(np.load(where / f"{c}.npy", mmap_mode="r")) for c in COLUMNS if c != "pts"
            }
        rows = tuple(_row_info(r) for r in meta["rows"])
        names, parts, offsets = tuple(meta["names"]), tuple(meta["parts"]), tuple(meta["offsets"])
        if "pts" not in arrays:  # the .npy layout has no pts: computed (one pass, in memory)
            arrays["pts"] = _starts_by_class(arrays["ts"], arrays["perm"], rows)
        steps = meta.get("steps")
        stored_steps = None if steps is None else tuple(dict(s) for s in steps)
        overview = _overview.read(where, meta.get("overview"))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return Index(
        rows=rows,
        names=names,
        parts=parts,
        offsets=offsets,
        stored_steps=stored_steps,
        overview=overview,
        **arrays,
    )


def _row_info(r: dict[str, Any]) -> RowInfo:
    return RowInfo(
        **{**r, "depth_starts": tuple(r["depth_starts"]), "class_starts": tuple(r["class_starts"])}
    )


def _starts_by_class(ts: Ints, perm: Ints, rows: tuple[RowInfo, ...]) -> I64:
    """``pts`` of an index stored without it: each row's starts taken in ``perm``'s order."""
    out = np.empty(len(perm), dtype=np.int64)
    for r in rows:
        out[r.start : r.stop] = ts[r.start + np.asarray(perm[r.start : r.stop], dtype=np.int64)]
    return out


def span(index: Index) -> tuple[int, int]:
    """Earliest start and latest end of the drawable events (0, 0 when there are none)."""
    if not index.rows:
        return 0, 0
    return min(r.t_min for r in index.rows), max(r.t_max for r in index.rows)


# at the end: the builder reads the types above (and tests replace ``index.build``)
from hyperscope.timeline._build import build as build  # noqa: E402
