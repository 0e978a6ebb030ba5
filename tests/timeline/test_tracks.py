"""Memory and counter tracks: read from a Chrome trace through the real importer, placed in the row
tree beside their rank's rows, and answered in tiles like sample rows (the peak where denser)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from hyperscope import timeline as tl
from hyperscope.analysis._common import connection
from hyperscope.server import create_app
from hyperscope.store.profile import Profile
from hyperscope.store.store import Store
from hyperscope.timeline import tracks
from tests.conftest import SHARED_SKIP, SHARED_TRACES
from tests.server.test_timeline import get_rows

SHARED_H100 = SHARED_TRACES / "TraceLens" / "h100"
T0_US = 1_700_000_000_000_000  # epoch microseconds, as Kineto writes them


def _trace() -> dict[str, Any]:
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": T0_US, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
         "ts": T0_US + 10, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": T0_US + 20, "dur": 30,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
    ]  # fmt: skip
    total = 0
    for i, size in enumerate([1024, 4096, -1024, 2048, -4096]):  # CUDA allocations and frees
        total += size
        ev.append({
            "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7,
            "ts": T0_US + 5 + i * 10,
            "args": {"Total Reserved": 1 << 20, "Total Allocated": total, "Bytes": size, "Addr": 4096 * i,
                     "Device Id": 0, "Device Type": 1},
        })  # fmt: skip
    ev.append({
        "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7,
        "ts": T0_US + 60, "args": {"Total Allocated": 64, "Bytes": 64, "Addr": 8, "Device Id": -1,
                                   "Device Type": 0},
    })  # fmt: skip
    for i in range(4):
        ev.append({"ph": "C", "name": "queue/depth", "pid": 7, "tid": 7, "ts": T0_US + i * 15,
                   "args": {"pending": i, "done": 10 - i, "note": "text is not drawn"}})  # fmt: skip
    return {"traceEvents": ev, "distributedInfo": {"rank": 0}}


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    root = tmp_path_factory.mktemp("tracks")
    trace = root / "rank0.json"
    trace.write_text(json.dumps(_trace()))
    store = Store(root / "home")
    ref = store.import_traces([trace], "tracks").profile
    return store.profile("tracks", ref.id)


def test_memory_and_counters_become_tracks(profile: Profile) -> None:
    index = tl.load(profile)
    with connection(profile) as con:
        got = tracks.read(con)
        root = tl.tree(index, con, "tracks")
    assert sorted(got) == [
        "counter/0/7/queue%2Fdepth/done",
        "counter/0/7/queue%2Fdepth/pending",
        "mem/0/0/-1/allocated",
        "mem/0/1/0/allocated",
        "mem/0/1/0/reserved",
    ]
    cuda = got["mem/0/1/0/allocated"]
    assert cuda.unit == "bytes" and cuda.label == "device 0 memory allocated"
    assert cuda.value.tolist() == [1024, 5120, 4096, 6144, 2048]
    assert np.diff(cuda.ts_ns).tolist() == [10_000] * 4
    assert got["mem/0/1/0/reserved"].value.tolist() == [1 << 20] * 5
    assert got["mem/0/0/-1/allocated"].label == "CPU memory allocated"  # no reserved total: no track
    assert got["counter/0/7/queue%2Fdepth/pending"].value.tolist() == [0, 1, 2, 3]
    assert got["counter/0/7/queue%2Fdepth/done"].label == "queue/depth · done"

    def find(row: tl.Row, rid: str) -> list[str]:
        if row.id == rid:
            return [row.id]
        for c in row.children:
            path = find(c, rid)
            if path:
                return [row.id, *path]
        return []

    gpu = find(root, "mem/0/1/0/allocated")
    assert gpu[-2] == "gpu/0/0", gpu  # the CUDA memory of GPU 0 sits in that GPU's group
    group = next(c for n in root.children for c in n.children if c.id == "gpu/0/0")
    kinds = [c.type for c in group.children]
    assert kinds.index("events") > max(i for i, k in enumerate(kinds) if k == "samples")
    assert find(root, "counter/0/7/queue%2Fdepth/pending")[-2] == "gpu/0/0"  # the rank's group


def test_tiles_of_tracks_carry_the_curve_and_its_peaks(profile: Profile) -> None:
    index = tl.load(profile)
    rid = "mem/0/1/0/allocated"
    t = int(index.rows[0].t_min)
    t_first = T0_US * 1000 + 5_000
    with connection(profile) as con:
        assert tl.rows.is_sample_row(rid) and tl.rows.is_sample_row("util/n/0")
        assert not tl.rows.is_sample_row(index.rows[0].id)
        # wide: every sample, and the one before the window where the curve enters it
        rows, ts, val = tl.sample_tile(con, [rid], t_first + 15_000, t_first + 100_000, 1000, index=index)
        assert ts.tolist() == [t_first + 10_000 * k for k in range(1, 5)]
        assert val.tolist() == [5120, 4096, 6144, 2048]
        assert set(rows.tolist()) == {0}
        # two pixel columns: each column keeps its peak, not the mean
        rows, ts, val = tl.sample_tile(con, [rid], t_first, t_first + 50_000, 2, index=index)
        assert val.tolist() == [5120, 6144]
        with pytest.raises(Exception, match="not a row of this profile"):
            tl.sample_tile(con, ["mem/9/1/0/allocated"], t, t + 1, 10, index=index)


def test_the_server_lists_and_tiles_tracks(profile: Profile, tmp_path: Path) -> None:
    home = profile.path.parents[1]
    with TestClient(create_app(home, static_dir=tmp_path / "none"), base_url="http://127.0.0.1:8321") as c:
        base = f"/api/profiles/{profile.meta.profile_id}/timeline"
        body = get_rows(c, profile.meta.profile_id).json()
        text = json.dumps(body["root"])
        assert '"id": "mem/0/1/0/allocated"' in text and '"unit": "bytes"' in text
        t0 = T0_US * 1000
        rows = "host/0/7/7,mem/0/1/0/allocated,counter/0/7/queue%2Fdepth/pending"
        r = c.get(base + "/tile", params={"rows": rows, "t0_ns": t0, "t1_ns": t0 + 100_000, "width": 500})
        assert r.status_code == 200, r.text
        header, cols = tl.decode(r.content)
    assert header["rows"] == rows.split(",")
    mem = cols["s_row"] == 1
    assert cols["s_val"][mem].tolist() == [1024, 5120, 4096, 6144, 2048]
    assert cols["s_val"][cols["s_row"] == 2].tolist() == [0, 1, 2, 3]


@pytest.mark.shared
def test_real_kineto_memory_events_become_a_track(tmp_path: Path) -> None:
    files = sorted(SHARED_H100.glob("*.json.gz"))
    if not files:
        pytest.skip(SHARED_SKIP)
    store = Store(tmp_path / "home")
    profile = store.profile("h100", store.import_traces(files[:1], "h100").profile.id)
    index = tl.load(profile)
    with connection(profile) as con:
        got = tracks.read(con)
        n_memory = con.execute("SELECT count(*) FROM events WHERE kind = 'memory'").fetchall()[0][0]
        peak = con.execute("SELECT max(total_allocated) FROM events WHERE kind = 'memory'").fetchall()[0][0]
        root = tl.tree(index, con, "h100")
    mem = [t for t in got.values() if t.id.startswith("mem/") and t.id.endswith("/allocated")]
    assert n_memory > 1000 and sum(len(t.ts_ns) for t in mem) == n_memory
    assert max(float(t.value.max()) for t in mem) == peak
    ids = json.dumps(root.to_json())
    assert all(t.id in ids for t in got.values())


def test_a_trace_of_memory_events_only_has_their_extent(tmp_path: Path) -> None:
    """Nothing but allocator events: the timeline's window is theirs, not (0, 0)."""
    events = [e for e in _trace()["traceEvents"] if e["name"] == "[memory]"]
    trace = tmp_path / "mem.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    store = Store(tmp_path / "home")
    profile = store.profile("mem", store.import_traces([trace], "mem").profile.id)
    index = tl.load(profile)
    assert not index.rows
    with connection(profile) as con:
        lo, hi = tl.rows.extent(index, con)
    assert (lo, hi) == (T0_US * 1000 + 5_000, T0_US * 1000 + 60_000)
    app = create_app(tmp_path / "home", static_dir=tmp_path / "none")
    with TestClient(app, base_url="http://127.0.0.1:8") as c:
        body = get_rows(c, profile.meta.profile_id).json()
    assert (int(body["start_ns"]), int(body["end_ns"])) == (lo, hi)
