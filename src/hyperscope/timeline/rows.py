"""The timeline's row tree and its sample tracks.

job → node → CPU (utilization tracks from ``samples``) and GPUs → per GPU: its utilization track,
a host row per thread of the rank (process) whose kernels ran on that GPU, and a device row per
stream. A rank without device events gets a "CPU process" group for its threads. Ids are built
from what the profile says (rank, pid, tid, device, stream, node, metric), never from positions,
so a link or a test can name a row and find it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import duckdb
import numpy as np
import numpy.typing as npt

from hyperscope.errors import UsageError
from hyperscope.schema.events import SampleMetric
from hyperscope.timeline import tracks as _tracks
from hyperscope.timeline.index import KINDS, Column, Index, RowInfo, span
from hyperscope.timeline.tile import boundaries

#: sample metrics drawn as CPU tracks of a node (in this order)
CPU_METRICS: Final = (
    SampleMetric.CPU_UTIL_PCT,
    SampleMetric.PROCESS_CPU_UTIL_PCT,
    SampleMetric.CPU_CORE_UTIL_PCT,
    *(m for m in SampleMetric if m.value.startswith("perf_")),  # counts per sampling interval
)


@dataclass
class Row:
    """A row of the tree: ``group`` rows only hold others; ``events`` and ``samples`` rows draw."""

    id: str
    label: str
    type: str
    children: list[Row] = field(default_factory=list)
    events: int = 0
    depths: int = 0
    unit: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "label": self.label, "type": self.type}
        if self.type == "events":
            out |= {"events": self.events, "depths": self.depths}
        if self.type == "samples":
            out["unit"] = self.unit
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        return out


def sample_key(row_id: str) -> tuple[str, str, int] | None:
    """(node, metric, device) of a sample row id, None for other ids."""
    if row_id.startswith("util/"):
        node, _, device = row_id[5:].rpartition("/")
        return (node, SampleMetric.GPU_UTIL_PCT.value, int(device)) if device.lstrip("-").isdigit() else None
    if row_id.startswith("cpu/"):
        head, _, device = row_id[4:].rpartition("/")
        node, _, metric = head.rpartition("/")
        if device.lstrip("-").isdigit() and metric in {m.value for m in CPU_METRICS}:
            return node, metric, int(device)
    return None


def is_sample_row(row_id: str) -> bool:
    """Whether a row id names a curve (sample metric, memory or counter track), not event rows."""
    return sample_key(row_id) is not None or _tracks.is_track(row_id)


def tree(index: Index, con: duckdb.DuckDBPyConnection, job: str) -> Row:
    """The whole row tree of a profile (see the module docstring)."""
    have = con.execute(
        "SELECT coalesce(node, ''), metric, device FROM samples WHERE metric IN "
        f"({', '.join(repr(m.value) for m in (*CPU_METRICS, SampleMetric.GPU_UTIL_PCT))}) "
        "GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    samples = {(str(n), str(m), int(d)) for n, m, d in have}
    nodes: dict[str, Row] = {}
    rank_node = {r.rank: r.node for r in index.rows}
    for node in sorted({*rank_node.values(), *(n for n, _, _ in samples)}):
        nodes[node] = Row(f"node/{node}", node or "(unnamed node)", "group")
        cpu = Row(f"cpuset/{node}", "CPU", "group")
        for metric in CPU_METRICS:
            for n, m, d in sorted(samples):
                if n == node and m == metric:
                    perf = m.startswith("perf_")
                    names = {"cpu_util_pct": "host CPU", "process_cpu_util_pct": "process CPU"}
                    label = m.removeprefix("perf_").replace("_", " ") if perf else names.get(m, f"core {d}")
                    unit = "per interval" if perf else "%"
                    cpu.children.append(Row(f"cpu/{node}/{m}/{d}", label, "samples", unit=unit))
        if cpu.children:
            nodes[node].children.append(cpu)
    gpus: dict[tuple[int, int], Row] = {}
    rank_gpu: dict[int, Row] = {}
    for info in index.rows:
        if info.side != "device":
            continue
        key = (info.rank, info.a)
        if key not in gpus:
            gpu = Row(f"gpu/{info.rank}/{info.a}", f"GPU {info.a} · rank {info.rank}", "group")
            if (info.node, SampleMetric.GPU_UTIL_PCT.value, info.a) in samples:
                gpu.children.append(Row(f"util/{info.node}/{info.a}", "utilization", "samples", unit="%"))
            gpus[key] = gpu
            rank_gpu.setdefault(info.rank, gpu)
            nodes[info.node].children.append(gpu)
    procs: dict[int, Row] = {}
    for info in index.rows:
        if info.side != "host":
            continue
        parent = rank_gpu.get(info.rank)
        if parent is None:
            parent = procs.get(info.rank)
            if parent is None:
                parent = procs[info.rank] = Row(
                    f"proc/{info.rank}", f"CPU process · rank {info.rank}", "group"
                )
                nodes[info.node].children.append(parent)
        parent.children.append(
            Row(
                info.id,
                # instants of scope "g"/"p" (Kineto's "Iteration Start", "Record Window End")
                # belong to no thread: the row of thread -1 holds them
                "host · global instants (no thread)" if info.b == -1 else f"host · thread {info.b}",
                "events",
                events=info.stop - info.start,
                depths=info.depths,
            )
        )
    for info in index.rows:
        if info.side == "device":
            gpus[(info.rank, info.a)].children.append(
                Row(info.id, f"stream {info.b}", "events", events=info.stop - info.start, depths=info.depths)
            )
    for track in _tracks.load(index, con).values():
        parent = gpus.get((track.rank, track.device)) or rank_gpu.get(track.rank) or procs.get(track.rank)
        if parent is None:
            node = rank_node.get(track.rank, "")
            if node not in nodes:
                nodes[node] = Row(f"node/{node}", node or "(unnamed node)", "group")
            label = f"CPU process · rank {track.rank}"
            parent = procs[track.rank] = Row(f"proc/{track.rank}", label, "group")
            nodes[node].children.append(parent)
        # after the utilization track, before the thread and stream rows
        at = sum(1 for c in parent.children if c.type == "samples")
        parent.children.insert(at, Row(track.id, track.label, "samples", unit=track.unit))
    return Row("job", job, "group", children=list(nodes.values()))


def extent(index: Index, con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Earliest start and latest end of what the timeline draws: events and instants, and the
    memory and counter tracks (a trace may hold nothing else); (0, 0) when there is nothing."""
    ends = [span(index)] if index.rows else []
    ends += [(int(t.ts_ns[0]), int(t.ts_ns[-1])) for t in _tracks.load(index, con).values() if len(t.ts_ns)]
    if not ends:
        return 0, 0
    return min(a for a, _ in ends), max(b for _, b in ends)


def sample_tile(
    con: duckdb.DuckDBPyConnection,
    row_ids: list[str],
    t0: int,
    t1: int,
    width: int,
    index: Index | None = None,
) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Samples of each row inside the window (plus the one before, where a line starts), one value
    per pixel column where the row has more than one sample per column: the mean, or for memory
    tracks the peak. Memory and counter tracks (``mem/``, ``counter/``) need the profile's
    ``index``, whose life bounds that of the tracks read for it."""
    rows, tss, vals = [], [], []
    edges = boundaries(t0, t1, width)
    known = _tracks.load(index, con) if index is not None and any(map(_tracks.is_track, row_ids)) else {}
    for r, rid in enumerate(row_ids):
        track = known.get(rid)
        key = sample_key(rid)
        if track is not None:
            ts, val = _tracks.window(track, t0, t1)
        elif key is not None:
            ts, val = _samples(con, key, t0, t1)
        else:
            raise UsageError(f"rows: {rid!r} is not a row of this profile (see timeline/rows)")
        if len(ts) > width:
            col = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, width - 1)
            keys, first, counts = np.unique(col, return_index=True, return_counts=True)
            ts = edges[keys]
            peak = track is not None and track.peak
            val = np.maximum.reduceat(val, first) if peak else np.add.reduceat(val, first) / counts
        rows.append(np.full(len(ts), r, np.uint16))
        tss.append(ts)
        vals.append(val)
    if not rows:
        return np.zeros(0, np.uint16), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return np.concatenate(rows), np.concatenate(tss), np.concatenate(vals)


def _samples(
    con: duckdb.DuckDBPyConnection, key: tuple[str, str, int], t0: int, t1: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    node, metric, device = key
    got = con.execute(
        "SELECT ts_ns, value FROM samples WHERE coalesce(node, '') = $n AND metric = $m AND device = $d "
        "AND ts_ns < $t1 AND ts_ns >= coalesce((SELECT max(ts_ns) FROM samples "
        "WHERE coalesce(node, '') = $n "
        "AND metric = $m AND device = $d AND ts_ns < $t0), $t0) ORDER BY ts_ns",
        {"n": node, "m": metric, "d": device, "t0": t0, "t1": t1},
    ).fetchnumpy()
    return np.asarray(got["ts_ns"], dtype=np.int64), np.asarray(got["value"], dtype=np.float64)


def steps(index: Index) -> list[dict[str, Any]]:
    """One entry per step name (``ProfilerStep#N``), by start: the window from its earliest start
    to its latest end over every rank, and how many ranks ran it. A list of thousands of steps
    per rank would be megabytes of JSON; the user zooms to ``step_41``, not to one rank's. A stored
    index keeps the list in its directory (``index.pack``): read from compressed blocks it would
    decode the kind of every host event at the first look, most of the first ``/rows``."""
    if index.stored_steps is not None:
        return [dict(s) for s in index.stored_steps]
    return step_windows(index.rows, index.kind, index.name, index.ts, index.cum, index.names)


def step_windows(
    rows: tuple[RowInfo, ...], kind: Column, name: Column, ts: Column, cum: Column, names: tuple[str, ...]
) -> list[dict[str, Any]]:
    """What :func:`steps` answers, from the index's columns (arrays or stored blocks)."""
    step = KINDS.index("step")
    hosts = [r for r in rows if r.side == "host"]
    where = np.concatenate(
        [np.flatnonzero(np.asarray(kind[r.start : r.stop]) == step) + r.start for r in hosts]
        or [np.zeros(0, np.int64)]
    )
    if len(where) == 0:
        return []
    at = np.asarray(name[where])
    order = np.argsort(at, kind="stable")
    where, at = where[order], at[order]
    keys, first, counts = np.unique(at, return_index=True, return_counts=True)
    start = np.asarray(ts[where], dtype=np.int64)
    end = start + np.asarray(cum[where + 1], dtype=np.int64) - np.asarray(cum[where], dtype=np.int64)
    starts = np.minimum.reduceat(start, first)
    ends = np.maximum.reduceat(end, first)
    out = [
        {"name": names[int(k)], "ts_ns": int(a), "dur_ns": int(b - a), "events": int(c)}
        for k, a, b, c in zip(keys.tolist(), starts.tolist(), ends.tolist(), counts.tolist(), strict=True)
    ]
    out.sort(key=lambda e: (e["ts_ns"], e["name"]))
    return out
