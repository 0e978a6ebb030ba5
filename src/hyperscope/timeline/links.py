"""Launch → kernel links and the details of one event.

A launch (a CUDA runtime or driver call on a host row) and the kernel, memcpy or memset it started
on a device row carry the same ``correlation`` within one rank: that pair is the arrow the timeline
draws and the "connections" tab lists. Correlations restart in every process, hence the rank.
"""

from __future__ import annotations

import bisect
import functools
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from hyperscope.errors import UsageError
from hyperscope.schema.layout import EVENTS_DIR
from hyperscope.store.profile import Profile
from hyperscope.timeline.index import KINDS, Index, RowInfo

LAUNCH_KINDS: Final = frozenset(KINDS.index(k) for k in ("runtime", "driver"))
TARGET_KINDS: Final = frozenset(KINDS.index(k) for k in ("kernel", "memcpy", "memset"))
#: arrows answered for one window at most
MAX_FLOWS: Final = 5000


class EventNotFound(Exception):
    """No event of that id in the profile (the API answers 404)."""


def row_of(index: Index, i: int) -> RowInfo:
    starts = _starts(index)
    return index.rows[int(np.searchsorted(starts, i, side="right")) - 1]


def mark_row_of(index: Index, j: int) -> RowInfo:
    """The row of instant ``j`` (of ``m_ts``)."""
    return next(r for r in index.rows if r.m_start <= j < r.m_stop)


def _starts(index: Index) -> npt.NDArray[np.int64]:
    return _starts_cached(id(index), tuple(r.start for r in index.rows))


@functools.lru_cache(maxsize=64)
def _starts_cached(_key: int, starts: tuple[int, ...]) -> npt.NDArray[np.int64]:
    return np.asarray(starts, dtype=np.int64)


def _event(index: Index, i: int, role: str) -> dict[str, Any]:
    info = row_of(index, i)
    return {
        "role": role,
        "row": info.id,
        "id": int(index.src[i]),
        "name": index.names[int(index.name[i])],
        "kind": KINDS[int(index.kind[i])],
        "ts_ns": int(index.ts[i]),
        "dur_ns": int(index.dur[i]),
        "depth": int(index.depth[i]),
        "correlation": int(index.corr[i]),
        "rank": info.rank,
    }


def links(index: Index, rank: int, correlation: int) -> list[dict[str, Any]]:
    """The launch and device events of one (rank, correlation): launches first, then by start."""
    if correlation < 0:
        raise UsageError(f"correlation {correlation}: expected a non-negative integer")
    out = []
    for info in index.rows:
        if info.rank != rank:
            continue
        hit = np.flatnonzero(index.corr[info.start : info.stop] == correlation) + info.start
        for i in hit:
            kind = int(index.kind[i])
            if kind in LAUNCH_KINDS:
                out.append(_event(index, int(i), "launch"))
            elif kind in TARGET_KINDS:
                out.append(_event(index, int(i), "kernel"))
    out.sort(key=lambda e: (e["role"] != "launch", e["ts_ns"]))
    return out


def flows(index: Index, row_ids: list[str], t0: int, t1: int) -> list[dict[str, Any]]:
    """Launch → kernel pairs whose launch or kernel lies in the window on one of ``row_ids``
    (at most ``MAX_FLOWS``, earliest visible end first): the arrows for everything visible.

    The visible ends are found by window first (bounded by what is drawn); their partners are
    then looked up by correlation in the other rows of the same rank, without a Python loop over
    the rank's events.
    """
    infos = [index.by_id[r] for r in row_ids if r in index.by_id]
    both = np.asarray(sorted(LAUNCH_KINDS | TARGET_KINDS), dtype=np.int8)
    visible: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    for info in infos:
        sl = slice(info.start, info.stop)
        ts, dur = index.ts[sl], index.dur[sl]
        sel = (index.corr[sl] >= 0) & np.isin(index.kind[sl], both) & (ts < t1) & (ts + dur >= t0)
        visible.append(np.flatnonzero(sel) + info.start)
    seen = np.concatenate(visible) if visible else np.zeros(0, np.int64)
    seen = seen[np.argsort(index.ts[seen], kind="stable")][: 2 * MAX_FLOWS]
    out: list[dict[str, Any]] = []
    rank_of = {int(i): row_of(index, int(i)).rank for i in seen}
    for rank in sorted(set(rank_of.values())):
        mine = np.asarray([i for i in seen if rank_of[int(i)] == rank], dtype=np.int64)
        wanted = np.unique(index.corr[mine])
        partners: dict[tuple[int, str], int] = {}
        for info in index.rows:
            if info.rank != rank:
                continue
            sl = slice(info.start, info.stop)
            hit = np.flatnonzero(np.isin(index.corr[sl], wanted) & np.isin(index.kind[sl], both)) + info.start
            for k in hit.tolist():
                role = "launch" if int(index.kind[k]) in LAUNCH_KINDS else "kernel"
                partners.setdefault((int(index.corr[k]), role), k)
        for c in wanted.tolist():
            a, b = partners.get((c, "launch")), partners.get((c, "kernel"))
            if a is not None and b is not None:
                out.append(
                    {"rank": rank, "correlation": c, "launch": _end(index, a), "kernel": _end(index, b)}
                )
    out.sort(key=lambda f: min(f["launch"]["ts_ns"], f["kernel"]["ts_ns"]))
    return out[:MAX_FLOWS]


def _end(index: Index, i: int) -> dict[str, Any]:
    return {
        "row": row_of(index, i).id,
        "id": int(index.src[i]),
        "ts_ns": int(index.ts[i]),
        "dur_ns": int(index.dur[i]),
        "depth": int(index.depth[i]),
    }


def event(profile: Profile, index: Index, event_id: int, row_id: str | None = None) -> dict[str, Any]:
    """Every stored field of one event or instant (``args`` merged in), with its row and links.

    ``row_id``, when the caller knows it (a click on a tile, a link), limits the search for the
    event's place in the index to that row: a row's events, not the profile's hundred million.
    """
    total = index.offsets[-1] if index.offsets else 0
    if not 0 <= event_id < total:
        raise EventNotFound(f"event {event_id}: no such event in this profile")
    part = bisect.bisect_right(index.offsets, event_id) - 1
    row = event_id - index.offsets[part]
    path = Path(profile.path) / EVENTS_DIR / index.parts[part]
    f = pq.ParquetFile(path)
    for g in range(f.metadata.num_row_groups):
        n = f.metadata.row_group(g).num_rows
        if row < n:
            record = f.read_row_group(g).slice(row, 1).to_pylist()
            break
        row -= n
    else:
        raise EventNotFound(f"event {event_id}: no such event in this profile")
    fields = {k: v for k, v in record[0].items() if v is not None and k not in ("args", "extra")}
    for extra in ("args", "extra"):
        text = record[0].get(extra)
        if text:
            try:
                fields[extra] = json.loads(text)
            except ValueError:
                fields[extra] = text
    out: dict[str, Any] = {"id": event_id, "fields": fields, "row": None, "links": []}
    info = index.by_id.get(row_id) if row_id is not None else None
    if fields.get("ph") in ("i", "I"):
        j = _find(index.m_src, event_id, (info.m_start, info.m_stop) if info is not None else None)
        if j is not None:
            out["row"] = mark_row_of(index, j).id
            out["depth"] = 0
        return out
    i = _find(index.src, event_id, (info.start, info.stop) if info is not None else None)
    if i is not None:
        out["row"] = row_of(index, i).id
        out["depth"] = int(index.depth[i])
        if int(index.corr[i]) >= 0:
            out["links"] = [
                e for e in links(index, row_of(index, i).rank, int(index.corr[i])) if e["id"] != event_id
            ]
    return out


def _find(ids: npt.NDArray[Any], event_id: int, within: tuple[int, int] | None) -> int | None:
    """Where ``event_id`` is in ``ids``: first within the given slice, else anywhere."""
    if within is not None:
        lo, hi = within
        where = np.flatnonzero(ids[lo:hi] == event_id)
        if len(where):
            return int(where[0]) + lo
    where = np.flatnonzero(np.asarray(ids) == event_id)  # no row, or a wrong one: look everywhere
    return int(where[0]) if len(where) else None


#: matches answered by one search at most
MAX_MATCHES: Final = 1000


def search(
    index: Index, text: str, limit: int = MAX_MATCHES, *, exact: bool = False
) -> tuple[int, list[dict[str, Any]]]:
    """Events whose name holds ``text`` (any case), or with ``exact`` is ``text`` (a table's row:
    its occurrences, not those of longer names holding it): how many in all, and the first
    ``limit`` by start, so the UI can jump from one to the next across the whole profile."""
    if not text:
        raise UsageError("q: expected a non-empty part of an event name")
    needle = text.lower()
    if exact:
        ids = [i for i, n in enumerate(index.names) if n == text]
    else:
        ids = [i for i, n in enumerate(index.names) if needle in n.lower()]
    if not ids:
        return 0, []
    wanted = np.asarray(ids, dtype=np.int64)
    hit = np.flatnonzero(np.isin(index.name, wanted))
    marks = np.flatnonzero(np.isin(index.m_name, wanted))  # instants (drawn as marks) match too
    total = len(hit) + len(marks)
    first = hit[np.argsort(index.ts[hit], kind="stable")[:limit]]
    out = [_event(index, int(i), "match") for i in first]
    if len(marks):
        first_marks = marks[np.argsort(index.m_ts[marks], kind="stable")[:limit]]
        out += [_instant(index, int(j)) for j in first_marks]
        out.sort(key=lambda e: e["ts_ns"])
        del out[limit:]
    return total, out


def _instant(index: Index, j: int) -> dict[str, Any]:
    info = mark_row_of(index, j)
    return {
        "role": "match",
        "row": info.id,
        "id": int(index.m_src[j]),
        "name": index.names[int(index.m_name[j])],
        "kind": "instant",
        "ts_ns": int(index.m_ts[j]),
        "dur_ns": 0,
        "depth": 0,
        "correlation": -1,
        "rank": info.rank,
    }
