"""Instants as tile marks: one per (row, column) at most, every instant counted in exactly one,
the first one's name and id; ``[memory]`` instants and counters are never marks."""

from __future__ import annotations

import bisect
import importlib
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from hyperscope import timeline as tl
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.store.profile import Profile
from hyperscope.timeline.tile import boundaries
from tests.conftest import SHARED_SKIP, SHARED_TRACES
from tests.timeline.conftest import add_instants

TRACELENS = SHARED_TRACES / "TraceLens" / "h100"


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    spec = GroundTruthSpec(ranks=2, steps=20, kernels_per_step=8, samples=True)
    profile = write_profile(tmp_path_factory.mktemp("marks") / "p", spec)
    add_instants(profile)
    return profile


def brute_instants(profile: Profile) -> dict[str, list[tuple[int, int, str]]]:
    """(ts, id, name) of every instant per row, by (ts, id): independent of the index."""
    parts = sorted((profile.path / "events").glob("*.parquet"))
    base, n = {}, 0
    for p in parts:
        base[str(p)] = n
        n += pq.ParquetFile(p).metadata.num_rows
    got = (
        profile.connect()
        .execute(
            "SELECT rank, pid, tid, device, stream, coalesce(name, ''), ts_ns, filename, file_row_number "
            f"FROM read_parquet({[str(p) for p in parts]}, filename=true, file_row_number=true) "
            "WHERE ph IN ('i', 'I') AND kind NOT IN ('memory', 'counter') AND ts_ns IS NOT NULL"
        )
        .fetchall()
    )
    rows: dict[str, list[tuple[int, int, str]]] = {}
    for rank, pid, tid, device, stream, name, ts, fn, rn in got:
        if device is not None and stream is not None:
            rid = f"stream/{rank}/{device}/{stream}"
        else:
            rid = f"host/{rank}/{pid if pid is not None else -1}/{tid if tid is not None else -1}"
        rows.setdefault(rid, []).append((ts, base[fn] + rn, name))
    for v in rows.values():
        v.sort()
    return rows


def check_marks(
    index: tl.Index,
    truth: dict[str, list[tuple[int, int, str]]],
    row_ids: list[str],
    t0: int,
    t1: int,
    w: int,
) -> tl.Tile:
    t = tl.tile(index, row_ids, t0, t1, w)
    edges = [int(x) for x in boundaries(t0, t1, w)]
    n = len(t.m_row)
    assert len(t.m_ts) == len(t.m_count) == len(t.m_name) == len(t.m_id) == n
    got = {(int(t.m_row[i]), int(np.searchsorted(edges, t.m_ts[i], side="right")) - 1): i for i in range(n)}
    assert len(got) == n  # one mark per (row, column) at most
    want: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for r, rid in enumerate(row_ids):
        for ts, eid, name in truth.get(rid, []):
            if t0 <= ts < t1:
                want.setdefault((r, bisect.bisect_right(edges, ts) - 1), []).append((ts, eid, name))
    assert set(got) == set(want)
    for key, evs in want.items():
        i = got[key]
        assert int(t.m_count[i]) == len(evs)
        assert (int(t.m_ts[i]), int(t.m_id[i]), t.names[int(t.m_name[i])]) == evs[0]
    return t


def test_marks_match_brute_force(marked: Profile) -> None:
    index = tl.load(marked)
    truth = brute_instants(marked)
    assert {"host/0/1000/4242", "stream/0/0/77", "host/0/-1/-1", "host/1/1001/1001"} <= set(truth)
    assert all(r in index.by_id for r in truth)  # rows of instants only exist
    assert sum(len(v) for v in truth.values()) == len(index.m_ts) == 300 + 40 + 50 + 200 + 30 + 2 + 5 + 1
    assert "[memory]" not in {n for v in truth.values() for _, _, n in v}
    lo, hi = tl.span(index)
    row_ids = sorted(r.id for r in index.rows)
    rnd = random.Random(4)
    windows = [(lo, hi + 1, 37), (lo, hi + 1, 800), (lo, hi + 1, 8192)]
    for _ in range(8):
        span = rnd.choice([hi - lo, (hi - lo) // 10, 100_000, 5_000])
        a = rnd.randrange(lo - span // 4, hi)
        windows.append((a, a + span, rnd.choice([50, 300, 1000])))
    for t0, t1, width in windows:
        t = check_marks(index, truth, row_ids, t0, t1, width)
        if (t0, t1) == (lo, hi + 1):  # every instant, counted once
            assert int(t.m_count.sum()) == len(index.m_ts)
    # full zoom on a few instants: each in its own column
    evs = truth["host/0/1000/1000"]
    t0, t1 = evs[10][0], evs[20][0] + 1
    t = check_marks(index, truth, ["host/0/1000/1000"], t0, t1, t1 - t0 if t1 - t0 <= 8192 else 8192)
    assert int(t.m_count.sum()) == len([e for e in evs if t0 <= e[0] < t1])


def test_instants_rows_in_the_tree_and_details(marked: Profile) -> None:
    index = tl.load(marked)
    info = index.by_id["host/0/1000/4242"]
    assert info.stop == info.start and info.depths == 1 and info.m_stop - info.m_start == 50
    leaves = {}

    def walk(row: dict[str, object]) -> None:
        kids = row.get("children")
        if isinstance(kids, list):
            for k in kids:
                walk(k)
        else:
            leaves[str(row["id"])] = row

    walk(tl.tree(index, marked.connect(), "m").to_json())
    for rid in ("host/0/1000/4242", "stream/0/0/77"):
        assert leaves[rid]["type"] == "events" and leaves[rid]["events"] == 0 and leaves[rid]["depths"] == 1
    # an instants-only row asks like any other: no events, no bins, marks
    t = tl.tile(index, ["stream/0/0/77"], *tl.span(index), 500)
    assert len(t.ts) == 0 and len(t.bin_col) == 0 and int(t.m_count.sum()) == 30
    got = tl.event(marked, index, int(t.m_id[0]))
    assert (
        got["row"] == "stream/0/0/77" and got["fields"]["ph"] == "i" and got["fields"]["name"] == "new stream"
    )
    assert tl.event(marked, index, int(t.m_id[0]), "host/0/1000/1000") == got  # a wrong row
    # the encoded tile carries the marks after the samples, and a "marks" count
    header, cols = tl.decode(tl.encode(t))
    assert header["marks"] == len(t.m_ts)
    assert [c["name"] for c in header["columns"]][-5:] == ["m_row", "m_ts", "m_count", "m_name", "m_id"]
    assert [c["dtype"] for c in header["columns"]][-5:] == ["u2", "i8", "u4", "u4", "i8"]
    assert np.array_equal(cols["m_id"], t.m_id) and np.array_equal(cols["m_count"], t.m_count)


def test_no_instants_no_marks(generated: Profile) -> None:
    index = tl.load(generated)
    t = tl.tile(index, [r.id for r in index.rows][:8], *tl.span(index), 900)
    assert len(t.m_row) == 0
    header, cols = tl.decode(tl.encode(t))
    assert header["marks"] == 0 and len(cols["m_ts"]) == 0


def test_kineto_memory_instants_are_no_marks(tmp_path: Path) -> None:
    """A real Kineto trace (TraceLens' H100 Qwen inference): 2,450 [memory] instants, which the
    memory track draws, and two others, which are marks."""
    traces = sorted(TRACELENS.glob("*.json.gz"))
    if not traces:
        pytest.skip(SHARED_SKIP)
    from hyperscope import Store

    with Store(tmp_path / "home") as store:
        report = store.import_traces(traces[:1], "qwen")
        profile = store.profile("qwen", report.profile.id)
    (memory,) = profile.connect().execute("SELECT count(*) FROM events WHERE name = '[memory]'").fetchall()[0]
    assert memory == 2450
    index = tl.load(profile)
    truth = brute_instants(profile)
    assert sorted(n for v in truth.values() for _, _, n in v) == [
        "Iteration Start: PyTorch Profiler",
        "Record Window End",
    ]
    assert len(index.m_ts) == 2
    lo, hi = tl.span(index)
    t = check_marks(index, truth, sorted(truth), lo, hi + 1, 1600)
    assert int(t.m_count.sum()) == 2 and "[memory]" not in t.names


def test_marks_survive_a_read_back(marked: Profile, tmp_path: Path) -> None:
    copy = tmp_path / "p"
    shutil.copytree(marked.path, copy)
    index = tl.index._read(tl.index.index_dir(Profile.open(copy)))
    assert index is not None and len(index.m_ts) == len(tl.load(marked).m_ts)


def test_marks_stay_bounded_where_instants_are_dense(
    marked: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over MAX_MARKS, one mark stands for 2, 4, ... columns; every instant is still counted once,
    under the mark of the first of its merged columns."""
    index = tl.load(marked)
    truth = brute_instants(marked)
    lo, hi = tl.span(index)
    row_ids = sorted(r.id for r in index.rows)
    full = tl.tile(index, row_ids, lo, hi + 1, 8192)
    monkeypatch.setattr(
        importlib.import_module("hyperscope.timeline.tile"), "MAX_MARKS", len(full.m_row) // 3
    )
    t = tl.tile(index, row_ids, lo, hi + 1, 8192)
    assert 0 < len(t.m_row) <= len(full.m_row) // 3
    assert int(t.m_count.sum()) == int(full.m_count.sum()) == len(index.m_ts)
    for r, rid in enumerate(row_ids):  # per row: the first mark is the row's first instant
        mine = np.flatnonzero(t.m_row == r)
        if truth.get(rid):
            first = mine[np.argmin(t.m_ts[mine])]
            assert (int(t.m_ts[first]), int(t.m_id[first])) == truth[rid][0][:2]
            assert int(t.m_count[mine].sum()) == len(truth[rid])


def test_search_finds_instants_by_start(marked: Profile) -> None:
    index = tl.load(marked)
    truth = brute_instants(marked)
    want = sorted(
        (ts, eid, rid)
        for rid, evs in truth.items()
        for ts, eid, name in evs
        if "iteration start" in name.lower()
    )
    total, got = tl.search(index, "ITERATION start")
    assert total == len(want) == 2
    assert [(e["ts_ns"], e["id"], e["row"]) for e in got] == want
    assert {e["kind"] for e in got} == {"instant"}
    ev = tl.event(marked, index, got[0]["id"], got[0]["row"])
    assert ev["fields"]["name"] == "Iteration Start: PyTorch Profiler"
