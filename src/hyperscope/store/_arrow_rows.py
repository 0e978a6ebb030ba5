"""Rows of the event schema made by Arrow compute, from columns that are typed already.

The compiled reader (``_creader``) gives a chunk's events as typed columns; what the stored row
adds to them (rank, node, kind, memcpy_kind) is a handful of vectorised rules. Running them as
SQL over the columns and inserting the result into DuckDB was the larger part of an import
(df_index_resolver: 0.43 s of 1.6 s); here they take 0.05 s. A capture's rows (TF, JAX:
``capture/direct_types``) take the same rules, so both store what ``_sql.kind_case`` and
``_sql._memcpy_kind`` would: ``tests/store/test_creader.py`` holds the rows equal event for
event, on hand-made events of every kind and on every chunk of the shared traces.

No DuckDB here: a capture writes its parts without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Final, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import (
    ARG_COLUMNS,
    CATEGORY_KINDS,
    EVENT_SCHEMA,
    MEMCPY_KINDS,
    EventKind,
    categories_of,
)

#: Per rank: rows, the first non-metadata time and the last end (ns, before any clock offset).
Figures = dict[int, tuple[int, int | None, int | None]]

_Column: TypeAlias = pa.Array | pa.ChunkedArray
_FLOW_PHASES: Final = ("s", "t", "f")


def kinds(ph: _Column, cat: _Column, name: _Column) -> pa.ChunkedArray:
    """``_sql.kind_case``, its rules in its order (the first that holds wins).

    The rules pick among small integer codes, and the kinds' names are taken once at the end:
    choosing among strings rule by rule built a new string column per rule (12.3 ms of a 20 MB
    chunk's 25.5 ms of typing)."""
    names, code, cats, values = _kind_codes()

    def when(cond: _Column, kind: EventKind, otherwise: _Column) -> _Column:
        out: _Column = pc.if_else(pc.fill_null(cond, False), code[kind], otherwise)
        return out

    kind = pc.if_else(pc.is_in(ph, pa.array(["i", "I"])), code[EventKind.INSTANT], code[EventKind.OTHER])
    kind = pc.coalesce(pc.take(values, pc.index_in(cat, value_set=cats)), kind)
    gpu = pa.array(list(categories_of(EventKind.GPU_ANNOTATION)))
    step = pc.and_(
        pc.starts_with(name, "ProfilerStep#"), pc.invert(pc.is_in(pc.fill_null(cat, ""), value_set=gpu))
    )
    kind = when(step, EventKind.STEP, kind)
    kind = when(pc.equal(name, "[memory]"), EventKind.MEMORY, kind)
    kind = when(pc.equal(ph, "C"), EventKind.COUNTER, kind)
    kind = when(pc.is_in(ph, pa.array(_FLOW_PHASES)), EventKind.FLOW, kind)
    kind = when(pc.equal(ph, "M"), EventKind.METADATA, kind)
    return _chunked(pc.take(names, kind))


@cache
def _kind_codes() -> tuple[pa.Array, dict[EventKind, pa.Scalar], pa.Array, pa.Array]:
    """Every kind's name, its code (an index into the names), and the categories with their
    kinds' codes."""
    kinds = list(EventKind)
    code = {k: pa.scalar(i, pa.int8()) for i, k in enumerate(kinds)}
    values = pa.array([code[k].as_py() for k in CATEGORY_KINDS.values()], pa.int8())
    return pa.array([str(k) for k in kinds]), code, pa.array(list(CATEGORY_KINDS)), values


def memcpy_kinds(cat: _Column, name: _Column) -> pa.ChunkedArray:
    """``memcpy_kind``: the first of ``MEMCPY_KINDS`` in a copy's name (RE2, as the SQL's), looked
    for in the copies' names alone (over every name: 11.1 ms of a 20 MB chunk's 25.5 ms)."""
    copies = pc.fill_null(pc.is_in(cat, pa.array(list(categories_of(EventKind.MEMCPY)))), False)
    none = pa.nulls(len(name), pa.string())
    if not pc.any(copies).as_py():
        return pa.chunked_array([none])
    copies = _whole(copies)
    named = pc.filter(_whole(name), copies)
    found = pc.struct_field(pc.extract_regex(named, f"(?P<k>{'|'.join(MEMCPY_KINDS)})"), [0])
    return _chunked(pc.replace_with_mask(none, copies, found))


def _whole(column: _Column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def from_reader_columns(columns: pa.Table, *, rank: int, node: str) -> pa.Table:
    """The compiled reader's columns (``_creader.COLUMNS``) as rows of the event schema: the rows
    DuckDB's path (``_sql.rows``) stores for the same events, in the same order."""
    n = columns.num_rows
    ph, cat, name = columns["ph_s"], columns["cat_s"], columns["name_s"]
    out: dict[str, _Column] = {
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), n),
        "node": pa.repeat(pa.scalar(node, pa.string()), n),
        "pid": columns["pid_i"],
        "tid": columns["tid_i"],
        "kind": kinds(ph, cat, name),
        "cat": cat,
        "ph": ph,
        "name": name,
        "ts_ns": columns["ts_ns"],
        "dur_ns": columns["dur_ns"],
        "flow_id": columns["id_i"],
        "memcpy_kind": memcpy_kinds(cat, name),
        "args": columns["args"],
        "extra": columns["extra"],
    }
    for i, c in enumerate(ARG_COLUMNS, start=1):
        out[c.name] = columns[f"v{i}"]
    return pa.Table.from_arrays([_chunked(out[f.name]) for f in EVENT_SCHEMA], schema=EVENT_SCHEMA)


def figures(table: pa.Table) -> Figures:
    """Per rank of ``table`` (rows of the event schema): its rows, first non-metadata time and
    last end, as ``Importer.figures`` gives them."""
    if table.num_rows == 0:
        return {}
    ts, dur = table["ts_ns"], table["dur_ns"]
    try:
        end = pc.add_checked(ts, pc.fill_null(dur, 0))
    except pa.ArrowInvalid:  # beyond int64: the clock check names the file (Python ints hold it)
        end = pc.add(ts.cast(pa.decimal128(20, 0)), pc.fill_null(dur, 0).cast(pa.decimal128(20, 0)))
    timed = pc.if_else(pc.equal(table["ph"], "M"), pa.scalar(None, pa.int64()), ts)
    keys = pa.table({"rank": table["rank"], "low": timed, "end": end})
    grouped = keys.group_by("rank").aggregate([([], "count_all"), ("low", "min"), ("end", "max")])
    out: Figures = {}
    for rank, count, low, high in zip(
        grouped["rank"].to_pylist(),
        grouped["count_all"].to_pylist(),
        grouped["low_min"].to_pylist(),
        grouped["end_max"].to_pylist(),
        strict=True,
    ):
        out[int(rank)] = (int(count), low, None if high is None else int(high))
    return out


def merge_figures(into: Figures, more: Figures) -> None:
    """Add ``more`` (figures of other rows) to ``into``, rank by rank."""
    for rank, (count, low, end) in more.items():
        had = into.get(rank)
        if had is None:
            into[rank] = (count, low, end)
            continue
        lows = [v for v in (had[1], low) if v is not None]
        ends = [v for v in (had[2], end) if v is not None]
        into[rank] = (had[0] + count, min(lows) if lows else None, max(ends) if ends else None)


@contextmanager
def system_allocator() -> Iterator[None]:
    """pyarrow's default memory pool set to the system allocator while an import runs.

    Its default, mimalloc, hands each large allocation of an import fresh pages from the OS:
    joining df_index_resolver's rows into contiguous columns took 0.21 s with it, 0.045 s with
    glibc's malloc; taking them in sorted order 0.23 s against 0.048 s; writing the events file
    0.21 s against 0.16 s (2 cores, pyarrow 26). Buffers remember the pool they came from, so
    switching back is safe for what other threads allocated meanwhile."""
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library is another (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed() -> None:
    """Hand memory freed by pyarrow back to the OS.

    glibc keeps what a large ``free`` returned for later allocations (its mmap threshold rises
    to the largest block freed), so each spill's sorted copy of ~130 MB stayed in the process:
    a 300 MB trace's import peaked at 0.95 GB, 0.71 GB with a trim after each spill, for no
    measurable time. (A fixed low threshold instead, ``MALLOC_MMAP_THRESHOLD_=256K``: 0.48 GB,
    but the import 40 % slower, every large buffer zeroed by the kernel.)"""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _chunked(a: _Column) -> pa.ChunkedArray:
    return a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a])
