"""Tiles against brute force: every event at full zoom, merged counts and busy time exact, bounded."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from hyperscope.timeline.index import HOST_KINDS, KINDS
from hyperscope.timeline.tile import MAX_EVENTS, boundaries


@dataclass
class Ev:
    id: int
    ts: int
    dur: int
    name: str
    kind: str
    depth: int


def brute_rows(profile: Profile) -> dict[str, list[Ev]]:
    """Every drawable event per row, depth from an explicit stack: independent of the index. An
    event's id is its row number over the part files in name order."""
    con = profile.connect()
    parts = sorted((profile.path / "events").glob("*.parquet"))
    base = {
        str(p): int(sum(pq.ParquetFile(q).metadata.num_rows for q in parts[:i])) for i, p in enumerate(parts)
    }
    got = con.execute(
        "SELECT rank, pid, tid, device, stream, kind, coalesce(name, ''), ts_ns, "
        "greatest(coalesce(dur_ns, 0), 0), "
        f"filename, file_row_number FROM read_parquet({[str(p) for p in parts]}, filename=true, "
        f"file_row_number=true) WHERE ph = 'X' AND ts_ns IS NOT NULL AND kind IN {tuple(KINDS)}"
    ).fetchall()
    rows: dict[str, list[Ev]] = {}
    for rank, pid, tid, device, stream, kind, name, ts, dur, fn, rn in got:
        if kind in HOST_KINDS:
            rid = f"host/{rank}/{pid}/{tid}"
        else:
            dev = device if device is not None else pid
            rid = f"stream/{rank}/{dev}/{stream if stream is not None else tid}"
        rows.setdefault(rid, []).append(Ev(base[fn] + rn, ts, dur, name, kind, 0))
    for evs in rows.values():
        evs.sort(key=lambda e: (e.ts, -e.dur, e.id))
        lanes: list[int] = []  # first fit: the lowest lane whose last event has ended
        for e in evs:
            free = [k for k, end in enumerate(lanes) if end <= e.ts]
            e.depth = free[0] if free else len(lanes)
            if free:
                lanes[e.depth] = e.ts + e.dur
            else:
                lanes.append(e.ts + e.dur)
    return rows


def check_tile(
    index: tl.Index, truth: dict[str, list[Ev]], row_ids: list[str], t0: int, t1: int, width: int
) -> tl.Tile:
    t = tl.tile(index, row_ids, t0, t1, width)
    assert t.bin_span == 1
    thr = (t1 - t0) / width * t.min_px
    edges = [int(x) for x in boundaries(t0, t1, width)]
    for r, rid in enumerate(row_ids):
        evs = truth[rid]
        wide = {e.id: e for e in evs if e.dur >= thr and e.ts < t1 and e.ts + e.dur > t0}
        mine = np.flatnonzero(t.row == r)
        got = {int(t.id[i]): i for i in mine}
        assert set(got) == set(wide), rid
        for eid, e in wide.items():
            i = got[eid]
            mine_ev = (
                int(t.ts[i]),
                int(t.dur[i]),
                t.names[int(t.name[i])],
                KINDS[t.kind[i]],
                int(t.depth[i]),
            )
            assert mine_ev == (e.ts, e.dur, e.name, e.kind, e.depth)
        expect: dict[tuple[int, int], list[int]] = {}
        for e in evs:
            if e.id in wide:
                continue
            first = max(0, bisect.bisect_right(edges, e.ts) - 1)
            last = min(width, bisect.bisect_left(edges, e.ts + e.dur) + 1)
            for k in range(first, last):
                a, b = edges[k], edges[k + 1]
                starts = a <= e.ts < b
                busy = max(0, min(b, e.ts + e.dur) - max(a, e.ts))
                if starts or busy:
                    c = expect.setdefault((e.depth, k), [0, 0])
                    c[0] += int(starts)
                    c[1] += busy
        bins = np.flatnonzero(t.bin_row == r)
        mine_bins = {
            (int(t.bin_depth[i]), int(t.bin_col[i])): [int(t.bin_count[i]), int(t.bin_busy[i])] for i in bins
        }
        assert mine_bins == expect, rid
    return t


def windows(index: tl.Index, rnd: random.Random) -> list[tuple[int, int, int]]:
    ts = np.asarray(index.ts)
    lo = int(ts.min())
    hi = int((ts + np.asarray(index.dur)).max())
    out = [(lo, hi + 1, 800), (lo, hi + 1, 37)]
    for _ in range(6):
        span = rnd.choice([hi - lo, (hi - lo) // 10, 200_000, 20_000, 1_000])
        a = rnd.randrange(lo - span // 4, hi)
        out.append((a, a + max(span, 1), rnd.choice([50, 300, 1000])))
    return out


@pytest.mark.parametrize("which", ["generated", "h200"])
def test_tiles_match_brute_force(which: str, request: pytest.FixtureRequest) -> None:
    profile: Profile = request.getfixturevalue(which)
    index = tl.load(profile)
    truth = brute_rows(profile)
    assert {r.id for r in index.rows} == set(truth)
    assert sum(len(v) for v in truth.values()) == len(index.ts)
    rnd = random.Random(6)
    row_ids = sorted(truth)
    for t0, t1, width in windows(index, rnd):
        pick = rnd.sample(row_ids, 6) if len(row_ids) > 6 else row_ids
        check_tile(index, truth, pick, t0, t1, width)


def test_full_zoom_returns_every_event(generated: Profile) -> None:
    index = tl.load(generated)
    truth = brute_rows(generated)
    rid = next(r for r in sorted(truth) if r.startswith("stream/"))
    evs = truth[rid][:40]
    t0, t1 = evs[0].ts, evs[-1].ts + evs[-1].dur
    shortest = min(e.dur for e in evs if e.dur > 0)
    width = min(8192, -(-(t1 - t0) // shortest) + 1)  # a pixel no wider than the shortest event
    t = check_tile(index, truth, [rid], t0, t1, width)
    assert {e.id for e in evs if e.dur > 0} <= {int(x) for x in t.id}


def test_index_is_stored_and_read_back(generated: Profile) -> None:
    first = tl.load(generated)
    where = tl.index.index_dir(generated)
    assert (where / tl.index.META).is_file() and not list(where.glob("*.npy"))
    again = tl.index._read(where)
    assert again is not None
    assert [r.id for r in again.rows] == [r.id for r in first.rows]
    assert np.array_equal(np.asarray(again.ts), np.asarray(first.ts))
    # the Parquet files of the profile are untouched
    assert not list((generated.path / "events").glob("*.npy"))


def test_payload_bounded_at_any_zoom(tmp_path: Any) -> None:
    from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile

    profile = write_profile(tmp_path / "big", GroundTruthSpec(ranks=2, steps=1500, kernels_per_step=40))
    index = tl.load(profile)
    row_ids = [r.id for r in index.rows]
    ts = np.asarray(index.ts)
    lo, hi = int(ts.min()), int((ts + np.asarray(index.dur)).max())
    for t0, t1 in ((lo, hi), (lo, lo + (hi - lo) // 30), (lo + 5000, lo + 6000)):
        t = tl.tile(index, row_ids, t0, t1, 8192)
        assert len(t.ts) <= MAX_EVENTS + 2 * len(row_ids)
        payload = tl.encode(t)
        assert len(payload) <= 2_000_000
        header, cols = tl.decode(payload)
        assert header["events"] == len(t.ts)
        assert np.array_equal(cols["ts"], t.ts) and np.array_equal(cols["bin_busy"], t.bin_busy)
        # everything in the window is accounted for: as an event, or counted in a bin
        assert t.min_px >= 1


def test_bad_parameters_name_themselves(generated: Profile) -> None:
    from hyperscope.errors import UsageError

    index = tl.load(generated)
    rid = index.rows[0].id
    for args, word in (
        (([rid], 10, 5, 100), "t1_ns"),
        (([rid], 0, 5, 0), "width"),
        ((["nope"], 0, 5, 10), "rows"),
        (([], 0, 5, 10), "rows"),
    ):
        with pytest.raises(UsageError, match=word):
            tl.tile(index, *args)  # type: ignore[arg-type]


def test_columns_take_the_narrowest_type(generated: Profile) -> None:
    """Types chosen from the data and kept in the blocks' directory; durations read from ``cum``."""
    index = tl.load(generated)
    types = {c: getattr(index, c).dtype.str for c in tl.index.COLUMNS}
    assert types == {
        "ts": "<i8", "cum": "<i8", "name": "<u2", "kind": "|i1", "corr": "<i4", "depth": "|u1",
        "src": "<u4", "perm": "<u4", "pts": "<i8", "m_ts": "<i8", "m_name": "<u2", "m_src": "<u4",
    }  # fmt: skip
    n = len(index.ts)
    # compressed on disk: far under the 32 bytes an event of the plain columns
    assert len(index.cum) == n + 1 and len(index.dur) == n and index.nbytes < 8 * n + 1000
    truth = {e.id: e.dur for evs in brute_rows(generated).values() for e in evs}
    dur = np.asarray(index.dur)
    assert {int(i): int(d) for i, d in zip(index.src, dur, strict=True)} == truth
    d = index.dur
    assert int(d[5]) == dur[5] and int(d[-1]) == dur[-1] and np.array_equal(d[3:40], dur[3:40])
    assert np.array_equal(d[[7, 2, 9]], dur[[7, 2, 9]]) and np.array_equal(d[dur > 1000], dur[dur > 1000])
    assert np.array_equal(d[10:2], dur[10:2]) and np.array_equal(d[1:50:7], dur[1:50:7])
    assert np.array_equal(np.asarray(index.ts) + d, np.asarray(index.ts) + dur)
    with pytest.raises(IndexError):
        d[n]


def test_deep_rows_long_events_and_large_ids_widen_their_columns(tmp_path: Any) -> None:
    """300 nested events (depth past uint8), a 10 s event (past uint32 ns), a correlation past
    int32: the columns that need it are wider, and tiles still equal brute force."""
    import pyarrow as pa

    from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
    from hyperscope.schema.events import EVENT_SCHEMA
    from hyperscope.store.profile import write_part

    profile = write_profile(tmp_path / "p", GroundTruthSpec(ranks=1, steps=4, kernels_per_step=4))
    lo = profile.connect().execute("SELECT min(ts_ns) FROM events").fetchall()[0][0]
    rows = [
        {"rank": 0, "node": "node-0", "pid": 1000, "tid": 555, "kind": "cpu_op", "ph": "X",
         "name": f"level {k}", "ts_ns": lo + 10 * k, "dur_ns": 100_000 - 20 * k, "correlation": None}
        for k in range(300)
    ]  # fmt: skip
    rows.append({**rows[0], "name": "long", "ts_ns": lo + 200_000, "dur_ns": 10_000_000_000})
    rows.append({**rows[0], "kind": "runtime", "name": "launch", "ts_ns": lo + 10_200_000_000,
                 "dur_ns": 5, "correlation": 1 << 40})  # fmt: skip
    write_part(pa.Table.from_pylist(rows, schema=EVENT_SCHEMA), profile.path / "events" / "part-deep.parquet")
    index = tl.load(profile)
    assert index.depth.dtype == np.uint16 and index.corr.dtype == np.int64 and index.name.dtype == np.uint16
    info = index.by_id["host/0/1000/555"]
    assert info.depths == 300
    truth = brute_rows(profile)
    assert max(e.depth for e in truth["host/0/1000/555"]) == 299
    hi = lo + 10_200_000_005
    for t0, t1, width in ((lo, hi, 800), (lo, lo + 200_000, 1000), (lo + 5_000_000_000, hi, 300)):
        check_tile(index, truth, ["host/0/1000/555", *sorted(truth)[:3]], t0, t1, width)
    assert tl.links(index, 0, 1 << 40)[0]["name"] == "launch"


def test_indexes_kept_in_memory_are_bounded(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexes built in memory (a store that cannot be written) are dropped least recently used
    first past the memory budget; stored ones, memory-mapped, count nothing against it."""
    from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
    from hyperscope.timeline import index as index_module

    spec = GroundTruthSpec(ranks=2, steps=4, kernels_per_step=5)
    stored, first, second = (write_profile(tmp_path / name, spec) for name in ("stored", "first", "second"))
    kept = tl.load(stored)  # written beside its profile and read back mapped
    assert index_module._mapped(kept)
    monkeypatch.setattr(index_module, "_build_into", lambda *args, **kwargs: None)  # cannot be written
    a = tl.load(first)
    assert not index_module._mapped(a) and tl.index.ready(first)
    monkeypatch.setattr(index_module, "CACHE_MEMORY_BYTES", a.nbytes + a.nbytes // 2)
    b = tl.load(second)
    assert tl.index.ready(second) and not tl.index.ready(first)  # over the budget: the older went
    assert tl.index.ready(stored) and tl.load(stored) is kept  # its pages are the OS's, not counted
    assert np.array_equal(np.asarray(tl.load(first).ts), np.asarray(a.ts))  # built again when asked
    assert b.nbytes > 0
