"""Device activity and CPU operators through PyTorch's profiler (Kineto, CUPTI on NVIDIA GPUs).

hyperscope drives the profiler below ``torch.profiler.profile``: it enables Kineto, disables it at
each flush, and reads the activities Kineto recorded straight into rows of the event schema. It
skips what makes ``torch.profiler`` heavy on long runs: the tree of ``FunctionEvent`` Python
objects and the Chrome JSON text. The rows are exactly what importing that JSON would give (the
same SQL turns both into typed columns; a test holds them equal). PyTorch releases whose results
cannot be read that way (2.11) go through Kineto's JSON export instead, with the same rows.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY
from hyperscope.store._sql import rows as rows_sql

if TYPE_CHECKING:  # DuckDB is imported where it is used: a TF or JAX capture may need none
    import duckdb

#: Categories whose own correlation id is a CUDA correlation, not a link to a CPU op (Kineto export).
_DEVICE_SIDE: Final = frozenset(
    {
        "gpu_memcpy",
        "gpu_memset",
        "kernel",
        "cuda_runtime",
        "cuda_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)
_FLOW_NAMES: Final = {1: "fwdbwd", 2: "ac2g"}
_NO_RESOURCE: Final = -(2**63)
_SLICE_ROWS: Final = 65_536
#: The CPU op whose args describe an NCCL collective; Kineto copies them onto the kernel it launched.
_COMMS_OP: Final = "record_param_comms"

#: The raw rows every capture backend hands to the importer's SQL (the XPlane reader's too).
RAW_SCHEMA: Final = pa.schema(
    [
        ("ph", pa.string()),
        ("cat", pa.string()),
        ("name", pa.string()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("id", pa.int64()),
        ("bp", pa.string()),
        ("args", pa.string()),
    ]
)

#: Kineto's raw rows in the layout the importer's SQL reads (``raw``): JSON fields, decimal µs.
_AS_RAW: Final = """
CREATE OR REPLACE TEMP TABLE raw AS SELECT
    to_json(ph) AS ph, to_json(cat) AS cat, to_json(name) AS name,
    to_json(pid) AS pid, to_json(tid) AS tid,
    ts_ns::DECIMAL(38, 0) * 0.001::DECIMAL(4, 3) AS ts,
    dur_ns::DECIMAL(38, 0) * 0.001::DECIMAL(4, 3) AS dur,
    to_json(id) AS id, to_json(bp) AS bp, NULL::JSON AS s,
    args::JSON AS args, NULL::JSON AS __extra
FROM kineto_rows
"""


@dataclass(frozen=True, slots=True)
class Activities:
    """What Kineto should record. Empty when there is nothing for it to do (no GPU, no CPU ops)."""

    cpu: bool
    cuda: bool

    @property
    def any(self) -> bool:
        return self.cpu or self.cuda


def wanted_activities(*, cpu_ops: bool, device: bool) -> Activities:
    cuda = False
    if device:
        try:
            import torch

            cuda = bool(torch.cuda.is_available())
        except Exception:
            cuda = False
    return Activities(cpu=cpu_ops, cuda=cuda)


class KinetoSession:
    """Kineto switched on and off around windows of steps; each window's results come back whole."""

    #: a window's results must be read before Kineto starts again: on the training thread
    rows_on_writer = False

    def __init__(
        self,
        activities: Activities,
        *,
        record_shapes: bool = False,
        memory: bool = False,
        python_stacks: bool = False,
    ) -> None:
        from torch._C._profiler import _ExperimentalConfig

        ag = _autograd()
        if not ag.kineto_available():
            raise RuntimeError("this PyTorch build has no Kineto profiler")
        self._activities = set()
        if activities.cpu:
            self._activities.add(ag.ProfilerActivity.CPU)
        if activities.cuda:
            self._activities.add(ag.ProfilerActivity.CUDA)
        self._config = ag.ProfilerConfig(
            ag.ProfilerState.KINETO, record_shapes, memory, python_stacks, False, False, _ExperimentalConfig()
        )
        self.running = False

    def start(self) -> None:
        ag = _autograd()
        with quiet_stderr():
            ag._prepare_profiler(self._config, self._activities)  # every time: Kineto resets at stop
            ag._enable_profiler(self._config, self._activities)
        self.running = True

    def stop(self) -> Any:
        """Kineto's results since ``start``.

        Read them (``kineto_rows``) on this thread before the next ``start``: Kineto's results
        share state with the profiler, and reading them while it runs again crashes the process.
        """
        self.running = False
        with quiet_stderr():
            return _autograd()._disable_profiler()

    def rows(self, result: Any) -> pa.Table:
        return kineto_rows(result)


#: Lines Kineto writes to stderr at every start and stop of the profiler ("USDT:... profiler_start"),
#: whatever its log level: noise in the user's terminal at every flush.
_KINETO_NOISE: Final = (b"USDT:", b"STAGE:")


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Kineto's own lines kept off the terminal while the profiler starts or stops.

    Kineto writes them straight to file descriptor 2, below Python. For the few milliseconds of
    the call, fd 2 points at a temporary file; then it is put back and everything else written
    there meanwhile (by any thread) is passed on unchanged, just later.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as held:
        try:
            os.dup2(held.fileno(), 2)
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().splitlines(keepends=True)
            kept = [line for line in lines if not line.startswith(_KINETO_NOISE)]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))


def _autograd() -> Any:
    """``torch.autograd``, untyped: the profiler's entry points there are private to PyTorch."""
    import importlib

    return importlib.import_module("torch.autograd")


#: Put in place of a name Kineto hands over that is not UTF-8 (seen with PyTorch's Python tracer).
UNDECODABLE: Final = "<name not UTF-8>"


def _name(act: Any) -> str:
    try:
        return str(act.name())
    except UnicodeDecodeError:
        return UNDECODABLE


def _meta(act: Any) -> str:
    try:
        return str(act.metadata_json())
    except UnicodeDecodeError:
        return '"hyperscope": "args not UTF-8, dropped"'


def _trace_rows(result: Any) -> Iterator[list[tuple[Any, ...]]]:
    """(ph, cat, name, pid, tid, ts_ns, dur_ns, id, bp, args) of every activity, as Kineto exports them.

    This loop runs on the training thread (see ``KinetoSession.stop``), once per event: it makes
    each pybind call once and builds no more strings than it must.
    """
    rows: list[tuple[Any, ...]] = []
    add = rows.append
    for act in result.trace_activities():
        if len(rows) >= _SLICE_ROWS:  # Python tuples cost ~10x their Arrow form: convert often
            yield rows
            rows = []
            add = rows.append
        cat = act.type()
        ts = act.timestamp()
        pid = act.device_id()
        rid = act.resource_id()
        tid = 0 if rid == _NO_RESOURCE else abs(rid)
        ext = act.linked_correlation_id() or (0 if cat in _DEVICE_SIDE else act.correlation_id())
        try:
            meta = act.metadata_json()
        except UnicodeDecodeError:
            meta = _meta(act)
        if cat == "kernel":
            launcher = act.linked_activity()
            if launcher is not None and _name(launcher) == _COMMS_OP:
                comms = _meta(launcher)
                meta = f"{meta}, {comms}" if meta and comms else meta or comms
        if ext:
            args: str | None = f'{{"External id": {ext}, {meta}}}' if meta else f'{{"External id": {ext}}}'
        else:
            args = f"{{{meta}}}" if meta else None
        try:
            name = act.name()
        except UnicodeDecodeError:
            name = UNDECODABLE
        dur = act.duration()
        add(("X", cat, name, pid, tid, ts, dur if dur > 0 else 0, None, None, args))
        flow = act.flow_id()
        if flow > 0:
            flow_cat = _FLOW_NAMES.get(act.flow_type(), "ac2g")
            if act.flow_start():
                add(("s", flow_cat, flow_cat, pid, tid, ts, None, flow, None, None))
            else:
                add(("f", flow_cat, flow_cat, pid, tid, ts, None, flow, "e", None))
    yield rows


def _json_rows(result: Any) -> Iterator[pa.Table]:
    """The same rows for PyTorch releases whose results have no ``trace_activities`` (2.11 has
    none): Kineto's own JSON export, read back by the importer's reader.

    Slower than reading the activities (the JSON is written and parsed once per part), but
    complete: ``result.events()`` of those releases lacks the args (grid, block, stream, bytes)
    that kernels and copies need. The JSON's process names, the profiler's own span and its
    instants are what the direct reading does not give, so they are left out here too.
    """
    from hyperscope.store import _sql
    from hyperscope.store._tracefile import TraceFile

    with tempfile.TemporaryDirectory(prefix="hyperscope-kineto-") as tmp:
        trace, events = Path(tmp) / "trace.json", Path(tmp) / "events.json"
        result.save(str(trace))
        import duckdb

        con = duckdb.connect(config={"threads": 1})
        try:
            con.execute("SET enable_progress_bar = false")
            source = TraceFile(trace)
            for chunk in source.chunks():
                events.write_bytes(b"[" + chunk.text + b"]")
                con.execute(_sql.read_raw(str(events)))
                base = source.header.get("baseTimeNanoseconds")  # the JSON's times count from it
                offset = base if isinstance(base, int) else 0
                yield con.sql(_FROM_JSON, params=[offset]).to_arrow_table().cast(_JSON_RAW_SCHEMA)
        finally:
            con.close()


#: Rows of the importer's ``raw`` table (JSON fields) as text, times as exact integer ns.
_FROM_JSON: Final = """
SELECT ph::VARCHAR AS ph, cat::VARCHAR AS cat, name::VARCHAR AS name, pid::VARCHAR AS pid,
       tid::VARCHAR AS tid, (ts * 1000)::BIGINT + $1 AS ts_ns, (dur * 1000)::BIGINT AS dur_ns,
       id::VARCHAR AS id, bp::VARCHAR AS bp, s::VARCHAR AS s, args::VARCHAR AS args,
       __extra::VARCHAR AS extra
FROM raw WHERE (ph ->> '$') NOT IN ('M', 'i') AND (cat ->> '$') IS DISTINCT FROM 'Trace'
"""

_JSON_RAW_SCHEMA: Final = pa.schema(
    [(c, pa.string()) for c in ("ph", "cat", "name", "pid", "tid")]
    + [("ts_ns", pa.int64()), ("dur_ns", pa.int64())]
    + [(c, pa.string()) for c in ("id", "bp", "s", "args", "extra")]
)

#: ``_JSON_RAW_SCHEMA`` rows back in the importer's ``raw`` layout.
_JSON_AS_RAW: Final = """
CREATE OR REPLACE TEMP TABLE raw AS SELECT
    ph::JSON AS ph, cat::JSON AS cat, name::JSON AS name, pid::JSON AS pid, tid::JSON AS tid,
    ts_ns::DECIMAL(38, 0) * 0.001::DECIMAL(4, 3) AS ts,
    dur_ns::DECIMAL(38, 0) * 0.001::DECIMAL(4, 3) AS dur,
    id::JSON AS id, bp::JSON AS bp, s::JSON AS s, args::JSON AS args, extra::JSON AS __extra
FROM kineto_rows
"""


def kineto_rows(result: Any) -> pa.Table:
    """Kineto's activities as a table of raw rows (before typing)."""
    if not hasattr(result, "trace_activities"):
        return pa.concat_tables([_JSON_RAW_SCHEMA.empty_table(), *_json_rows(result)])
    batches = []
    for chunk in _trace_rows(result):
        if chunk:
            columns = zip(*chunk, strict=True)  # one transposition in C, not a loop per value
            arrays = [pa.array(c, type=f.type) for c, f in zip(columns, RAW_SCHEMA, strict=True)]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=RAW_SCHEMA))
    return pa.Table.from_batches(batches, schema=RAW_SCHEMA)


def kineto_table(result: Any, *, rank: int, node: str, con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Kineto's results as rows of the event schema, sorted as the store keeps them."""
    return typed_rows(kineto_rows(result), rank=rank, node=node, con=con)


def typed_rows(raw: pa.Table, *, rank: int, node: str, con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Raw rows (``kineto_rows``) typed by the importer's SQL, a slice at a time (DuckDB's memory
    for JSON grows with its input); safe on any thread."""
    if raw.num_rows == 0:
        return EVENT_SCHEMA.empty_table()
    parts = [
        _typed_slice(raw.slice(start, _SLICE_ROWS), rank=rank, node=node, con=con)
        for start in range(0, raw.num_rows, _SLICE_ROWS)
    ]
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return table.sort_by([(k, "ascending") for k in SORT_KEY]) if len(parts) > 1 else table


def _typed_slice(raw: pa.Table, *, rank: int, node: str, con: duckdb.DuckDBPyConnection) -> pa.Table:
    con.register("kineto_rows", raw)
    try:
        con.execute(_JSON_AS_RAW if raw.schema.equals(_JSON_RAW_SCHEMA) else _AS_RAW)
        names = ", ".join(f.name for f in EVENT_SCHEMA)
        table = con.sql(f"SELECT {names} FROM ({rows_sql(rank, node)}) ORDER BY {', '.join(SORT_KEY)}")
        return table.to_arrow_table().cast(EVENT_SCHEMA)
    finally:
        con.unregister("kineto_rows")
        con.execute("DROP TABLE IF EXISTS raw")
