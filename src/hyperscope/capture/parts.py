"""The tables a capture writes, one part per flush: the framework's rows typed into the event
schema, the start-up mark, and hyperscope's own steps and annotations (no profiler needed)."""

from __future__ import annotations

import threading
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY, EventKind

__all__ = [
    "STARTUP_CAT", "STARTUP_NAME", "Mark", "marks_table", "one_part", "startup_table", "step_marks",
    "typed_events", "typed_xspace_events",
]  # fmt: skip

#: Rows of annotations and steps: (kind, name, tid, ts_ns, dur_ns, step).
Mark = tuple[str, str, int, int, int, int]
_CAT: Final = "user_annotation"
_STEP: Final = str(EventKind.STEP)
#: The mark where the training began under the launcher (start-up is not step 0).
STARTUP_NAME: Final = "hyperscope: training begins"
STARTUP_CAT: Final = "hyperscope"

_CONNECTIONS = threading.local()


def one_part(tables: list[pa.Table]) -> pa.Table:
    """Tables of the event schema as one, in the order every part is stored in (``SORT_KEY``)."""
    tables = [t for t in tables if t.num_rows]
    if len(tables) == 1:
        return tables[0]
    if not tables:
        return EVENT_SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by([(k, "ascending") for k in SORT_KEY])


def typed_events(raw: pa.Table, rank: int, node: str) -> pa.Table:
    from hyperscope.capture.torch_backend import typed_rows

    con = getattr(_CONNECTIONS, "con", None)
    if con is None:  # one small DuckDB per writer thread, kept for the whole run
        import duckdb

        con = duckdb.connect(config={"threads": 1, "memory_limit": "128MB"})
        con.execute("SET enable_progress_bar = false")
        _CONNECTIONS.con = con
    return typed_rows(raw, rank=rank, node=node, con=con)


def typed_xspace_events(raw: pa.Table, rank: int, node: str) -> pa.Table:
    """TF's and JAX's raw rows (``xplane``) typed: by Arrow where the rows allow it
    (``direct_types``: every row of a CPU capture), by the importer's SQL for the rest; the same
    stored rows either way, with no DuckDB (its CPU and its memory) for a window that needs none."""
    from hyperscope.capture.direct_types import needs_sql, typed_directly

    if raw.num_rows == 0:
        return EVENT_SCHEMA.empty_table()
    mask = needs_sql(raw)
    if not pc.any(mask).as_py():
        return typed_directly(raw, rank=rank, node=node)
    if pc.all(mask).as_py():
        return typed_events(raw, rank, node)
    fast = typed_directly(raw.filter(pc.invert(mask)), rank=rank, node=node)
    return one_part([fast, typed_events(raw.filter(mask), rank, node)])


def step_marks(runs: list[tuple[int, int, int, list[int]]]) -> list[Mark]:
    """Steps recorded as runs of end times (the session's fast path) as marks: a run holds its
    first step's number, that step's start, the thread that marked them and each step's end."""
    out: list[Mark] = []
    for first, start, tid, ends in runs:
        for i, end in enumerate(ends):
            out.append((_STEP, f"ProfilerStep#{first + i}", tid, start, end - start, first + i))
            start = end
    return out


def marks_table(marks: list[Mark], *, rank: int, node: str, pid: int) -> pa.Table:
    """Annotations and steps as rows of the event schema (no Kineto needed)."""
    n = len(marks)
    kinds, names, tids, starts, durs, steps = (list(c) for c in zip(*marks, strict=True))
    columns: dict[str, pa.Array] = {
        "rank": pa.array([rank] * n, pa.int32()),
        "node": pa.array([node] * n, pa.string()),
        "pid": pa.array([pid] * n, pa.int64()),
        "tid": pa.array(tids, pa.int64()),
        "kind": pa.array([str(k) for k in kinds], pa.string()),
        "cat": pa.array([_CAT] * n, pa.string()),
        "ph": pa.array(["X"] * n, pa.string()),
        "name": pa.array(names, pa.string()),
        "ts_ns": pa.array(starts, pa.int64()),
        "dur_ns": pa.array(durs, pa.int64()),
        "args": pa.array([f'{{"step":{s}}}' for s in steps], pa.string()),
    }
    arrays = [columns.get(f.name, pa.nulls(n, f.type)) for f in EVENT_SCHEMA]
    table = pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)
    return table.sort_by([(k, "ascending") for k in SORT_KEY])


def startup_table(at_ns: int, took_ns: int, *, rank: int, node: str, pid: int) -> pa.Table:
    """Start-up as one instant where the training began, holding how long start-up took.

    An instant, not a span: the profile's span, its CPU active share and its step statistics are
    the training's, while the timeline still shows where (and after how long) the training began.
    """
    columns: dict[str, pa.Array] = {
        "rank": pa.array([rank], pa.int32()),
        "node": pa.array([node], pa.string()),
        "pid": pa.array([pid], pa.int64()),
        "tid": pa.array([threading.get_native_id()], pa.int64()),
        "kind": pa.array([str(EventKind.INSTANT)], pa.string()),
        "cat": pa.array([STARTUP_CAT], pa.string()),
        "ph": pa.array(["i"], pa.string()),
        "name": pa.array([STARTUP_NAME], pa.string()),
        "ts_ns": pa.array([at_ns], pa.int64()),
        "args": pa.array([f'{{"startup_ns":{took_ns},"process_start_ns":{at_ns - took_ns}}}'], pa.string()),
    }
    arrays = [columns.get(f.name, pa.nulls(1, f.type)) for f in EVENT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)
