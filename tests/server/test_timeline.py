"""The timeline endpoints: rows, binary tiles equal to the engine's, details, links, errors, token."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from hyperscope import timeline as tl
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.store.profile import Profile
from tests.server.conftest import Home, local

BASE = "/api/profiles/{}/timeline"


def get_rows(client: TestClient, profile_id: str, **kwargs: Any) -> Any:
    """GET /rows as the UI does: while the index is being built (202, ``building``), ask again."""
    deadline = time.monotonic() + 120
    while True:
        r = client.get(BASE.format(profile_id) + "/rows", **kwargs)
        if r.status_code != 202 or time.monotonic() > deadline:
            return r
        assert r.json()["building"] is True and r.headers["retry-after"] == "1"
        time.sleep(0.05)


def _leaves(row: dict[str, Any]) -> list[dict[str, Any]]:
    kids = row.get("children", [])
    return [row] if not kids else [leaf for k in kids for leaf in _leaves(k)]


def test_rows_then_tile_equal_the_engine(client: TestClient, home: Home) -> None:
    got = get_rows(client, home.h200)
    assert got.status_code == 200
    body = got.json()
    assert isinstance(body["start_ns"], str) and int(body["end_ns"]) > int(body["start_ns"])
    assert len(body["steps"]) == 40 and isinstance(body["steps"][0]["ts_ns"], str)
    leaves = _leaves(body["root"])
    ids = [leaf["id"] for leaf in leaves]
    assert "stream/0/0/7" in ids and "util/vm/0" in ids
    step = body["steps"][10]
    t0 = int(step["ts_ns"])
    t1 = t0 + step["dur_ns"]
    rows = [i for i in ids if i.startswith(("stream/", "host/", "util/"))]
    r = client.get(
        BASE.format(home.h200) + "/tile",
        params={"rows": ",".join(rows), "t0_ns": t0, "t1_ns": t1, "width": 900},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.hyperscope.tile"
    header, cols = tl.decode(r.content)
    profile = Profile.open(profile_dir(home.path, home.h200))
    event_rows = [i for i in rows if not i.startswith("util/")]
    want = tl.tile(tl.load(profile), event_rows, t0, t1, 900)
    assert header["rows"] == [*event_rows, "util/vm/0"]
    assert np.array_equal(cols["id"], want.id) and np.array_equal(cols["bin_busy"], want.bin_busy)
    assert header["samples"] > 0 and set(cols["s_row"].tolist()) == {len(event_rows)}
    # a kernel's details and its launch
    kernel = next(i for i in range(header["events"]) if header["kinds"][cols["kind"][i]] == "kernel")
    ev = client.get(BASE.format(home.h200) + "/event", params={"id": int(cols["id"][kernel])}).json()
    assert ev["fields"]["kind"] == "kernel" and ev["links"][0]["role"] == "launch"
    assert isinstance(ev["fields"]["ts_ns"], str)
    links = client.get(
        BASE.format(home.h200) + "/links", params={"rank": 0, "correlation": int(cols["corr"][kernel])}
    ).json()
    assert [e["role"] for e in links["events"]] == ["launch", "kernel"]
    flows = client.get(
        BASE.format(home.h200) + "/flows", params={"rows": ",".join(rows), "t0_ns": t0, "t1_ns": t1}
    )
    assert flows.status_code == 200 and len(flows.json()["flows"]) > 10


def test_tile_of_a_generated_profile_is_bounded(client: TestClient, home: Home) -> None:
    body = get_rows(client, home.big).json()
    rows = [leaf["id"] for leaf in _leaves(body["root"]) if leaf["type"] == "events"]
    r = client.get(
        BASE.format(home.big) + "/tile",
        params={"rows": ",".join(rows), "t0_ns": body["start_ns"], "t1_ns": body["end_ns"], "width": 8192},
    )
    assert r.status_code == 200 and len(r.content) <= 2_000_000
    header, _ = tl.decode(r.content)
    assert header["events"] + header["bins"] > 0
    # compressed by the tile's worker (the client asked for gzip), and the same tile when not asked
    assert r.headers["content-encoding"] == "gzip" and r.headers["vary"] == "Accept-Encoding"
    assert int(r.headers["content-length"]) < len(r.content) / 2
    plain = client.get(r.url, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == r.content


def test_a_snapped_tile_is_the_engines_tile_of_the_window_it_names(client: TestClient, home: Home) -> None:
    """``snap=1``: the header names the window answered (covering the one asked, on the overview's
    cells where the index keeps them) and the tile is the engine's tile of that window."""
    body = get_rows(client, home.big).json()
    rows = [leaf["id"] for leaf in _leaves(body["root"]) if leaf["type"] == "events"]
    t0, t1 = int(body["start_ns"]) + 777, int(body["end_ns"])
    index = tl.load(Profile.open(profile_dir(home.path, home.big)))
    snapped = 0
    for width in (3, 40, 700):
        params = {"rows": ",".join(rows), "t0_ns": t0, "t1_ns": t1, "width": width, "snap": 1}
        header, cols = tl.decode(client.get(BASE.format(home.big) + "/tile", params=params).content)
        a, b, w = int(header["t0_ns"]), int(header["t1_ns"]), header["width"]
        assert (a, b, w) == tl.snap(index, t0, t1, width) and a <= t0 and b >= t1
        snapped += (a, b, w) != (t0, t1, width)
        want = tl.tile(index, rows, a, b, w)
        assert np.array_equal(cols["id"], want.id) and np.array_equal(cols["bin_busy"], want.bin_busy)
    assert snapped >= 1 and index.overview is not None
    plain, _ = tl.decode(client.get(BASE.format(home.big) + "/tile", params={**params, "snap": 0}).content)
    assert (int(plain["t0_ns"]), int(plain["t1_ns"]), plain["width"]) == (t0, t1, 700)


@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({"rows": "stream/0/0/7", "t0_ns": 10, "t1_ns": 5, "width": 100}, "t1_ns"),
        ({"rows": "stream/0/0/7", "t0_ns": 0, "t1_ns": 5, "width": 0}, "width"),
        ({"rows": "stream/0/0/7", "t0_ns": 0, "t1_ns": 5, "width": 99999}, "width"),
        ({"rows": "nope/1", "t0_ns": 0, "t1_ns": 5, "width": 10}, "rows"),
        ({"rows": "", "t0_ns": 0, "t1_ns": 5, "width": 10}, "rows"),
        ({"rows": "stream/0/0/7", "t0_ns": "soon", "t1_ns": 5, "width": 10}, "t0_ns"),
        ({"t0_ns": 0, "t1_ns": 5, "width": 10}, "rows"),
    ],
)
def test_bad_tile_parameters_are_400(
    client: TestClient, home: Home, params: dict[str, Any], word: str
) -> None:
    r = client.get(BASE.format(home.h200) + "/tile", params=params)
    assert r.status_code == 400, r.text
    assert word in r.json()["detail"]


def test_unknown_ids_are_404(client: TestClient, home: Home) -> None:
    assert client.get(BASE.format("0123456789abcdef") + "/rows").status_code == 404
    r = client.get(BASE.format(home.h200) + "/event", params={"id": 1 << 50})
    assert r.status_code == 404 and "no such event" in r.json()["detail"]
    assert client.get(BASE.format(home.h200) + "/event", params={"id": -1}).status_code == 400
    assert (
        client.get(BASE.format(home.h200) + "/links", params={"rank": 0, "correlation": -3}).status_code
        == 400
    )


def test_timeline_needs_the_token(home: Home, tmp_path: Path) -> None:
    app = create_app(home.path, token="s3cret", static_dir=tmp_path / "none")
    with local(app) as c:
        path = BASE.format(home.h200) + "/rows"
        assert c.get(path).status_code == 401
        assert get_rows(c, home.h200, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_search_finds_every_match_by_start(client: TestClient, home: Home) -> None:
    r = client.get(BASE.format(home.h200) + "/search", params={"q": "ELEMENTWISE", "limit": 50}).json()
    profile = Profile.open(profile_dir(home.path, home.h200))
    (want,) = (
        profile.connect()
        .execute(
            "SELECT count(*) FROM events WHERE ph = 'X' AND kind = 'kernel' AND name ILIKE '%elementwise%'"
        )
        .fetchone()
    )  # type: ignore[misc]
    assert r["total"] == want and len(r["matches"]) == 50
    starts = [int(m["ts_ns"]) for m in r["matches"]]
    assert starts == sorted(starts) and all("elementwise" in m["name"].lower() for m in r["matches"])
    assert client.get(BASE.format(home.h200) + "/search", params={"q": ""}).status_code == 400


def test_event_with_its_row_or_a_wrong_one(client: TestClient, home: Home) -> None:
    base = BASE.format(home.h200) + "/event"
    profile = Profile.open(profile_dir(home.path, home.h200))
    index = tl.load(profile)
    info = index.by_id["stream/0/0/7"]
    eid = int(index.src[info.start + 10])
    plain = client.get(base, params={"id": eid}).json()
    assert client.get(base, params={"id": eid, "row": "stream/0/0/7"}).json() == plain
    assert client.get(base, params={"id": eid, "row": "host/0/1493/1493"}).json() == plain
    assert plain["row"] == "stream/0/0/7"


def test_tile_marks_of_an_imported_trace(tmp_path: Path) -> None:
    """A Kineto trace with instants, imported as a user would: the binary tile carries one mark per
    (row, column) after the sample columns, their names in the shared list, ids that /event
    resolves; ``[memory]`` instants are no marks."""
    import json

    from hyperscope import Store
    from hyperscope.store.synth import SynthSpec, write_rank

    trace = tmp_path / "rank0.pt.trace.json"
    write_rank(trace, SynthSpec(ranks=1, steps=4, ops_per_step=8), 0)
    doc = json.loads(trace.read_text())
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    lo, hi = min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)
    for k in range(10):  # on the host thread, two at each time
        ts = lo + (hi - lo) * (k // 2) / 6
        doc["traceEvents"].append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": f"mark {k}",
                                   "pid": 1000, "tid": 1000, "ts": ts})  # fmt: skip
    doc["traceEvents"] += [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1000, "tid": 1000,
         "ts": lo + 5, "args": {"Bytes": 512, "Total Allocated": 512, "Device Type": 1, "Device Id": 0}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": lo},
    ]  # fmt: skip
    trace.write_text(json.dumps(doc))
    home = tmp_path / "home"
    with Store(home) as store:
        pid = store.import_traces([trace], "marks").profile.id
    app = create_app(home, static_dir=tmp_path / "none")
    with local(app) as c:
        body = get_rows(c, pid).json()
        leaves = {leaf["id"]: leaf for leaf in _leaves(body["root"])}
        assert leaves["host/0/-1/-1"]["events"] == 0 and leaves["host/0/-1/-1"]["depths"] == 1
        rows = ["host/0/1000/1000", "host/0/-1/-1", "stream/0/0/7"]
        r = c.get(
            BASE.format(pid) + "/tile",
            params={"rows": ",".join(rows), "t0_ns": body["start_ns"], "t1_ns": int(body["end_ns"]) + 1,
                    "width": 600},
        )  # fmt: skip
        assert r.status_code == 200
        header, cols = tl.decode(r.content)
        names = [c["name"] for c in header["columns"]]
        assert names[-8:] == ["s_row", "s_ts", "s_val", "m_row", "m_ts", "m_count", "m_name", "m_id"]
        assert header["marks"] == len(cols["m_ts"]) == 6
        got = [header["names"][int(n)] for n in cols["m_name"]]
        marks = sorted(
            (header["rows"][int(r)], int(n), name)
            for r, n, name in zip(cols["m_row"], cols["m_count"], got, strict=True)
        )
        assert marks[0] == ("host/0/-1/-1", 1, "Iteration Start: PyTorch Profiler")
        # two at each time: the mark names the one of the lower id, either of the pair
        host = marks[1:]
        assert [(r, n) for r, n, _ in host] == [("host/0/1000/1000", 2)] * 5
        assert [int(name.split()[1]) // 2 for _, _, name in host] == [0, 1, 2, 3, 4]
        assert header["events"] > 0 and "[memory]" not in header["names"]
        first = int(cols["m_id"][list(cols["m_row"]).index(0)])
        ev = c.get(BASE.format(pid) + "/event", params={"id": first, "row": "host/0/1000/1000"}).json()
        assert ev["row"] == "host/0/1000/1000" and ev["fields"]["name"] == got[list(cols["m_row"]).index(0)]
        assert ev["fields"]["ph"] == "i" and isinstance(ev["fields"]["ts_ns"], str)


def test_rows_are_the_same_json_compressed_or_not_and_cached_after_the_first(
    client: TestClient, home: Home
) -> None:
    """``/rows`` is encoded and compressed once per profile (server/timeline.py ``RowsBody``):
    the gzip answer and the plain one decode to the same body, ``cached`` set from the second."""
    first = get_rows(client, home.h200)
    plain = get_rows(client, home.h200, headers={"Accept-Encoding": "identity"})
    zipped = get_rows(client, home.h200, headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in plain.headers and zipped.headers["content-encoding"] == "gzip"
    assert first.json()["cached"] is False
    assert plain.json() == zipped.json() == {**first.json(), "cached": True}


def test_rows_answer_202_with_progress_while_the_index_is_built(tmp_path: Path) -> None:
    """A profile that was not imported through the CLI (no index beside it): the first /rows
    starts the build in the background and says how far it is; the index is then kept."""
    from hyperscope.analysis.groundtruth import GroundTruthSpec
    from hyperscope.store.store import Store
    from tests.server.conftest import add_generated

    home = tmp_path / "home"
    with Store(home) as store:
        pid = add_generated(store, "fresh", GroundTruthSpec(ranks=4, steps=200, kernels_per_step=12))
    profile = Profile.open(profile_dir(home, pid))
    assert not tl.index.ready(profile)
    with local(create_app(home, static_dir=tmp_path / "none")) as c:
        first = c.get(BASE.format(pid) + "/rows")
        assert first.status_code == 202, first.text
        body = first.json()
        assert body["building"] is True and 0 <= body["progress"] <= 1
        assert "hyperscope import" in body["detail"] and first.headers["retry-after"] == "1"
        seen = []
        while (r := c.get(BASE.format(pid) + "/rows")).status_code == 202:
            seen.append(r.json()["progress"])
            time.sleep(0.02)
        assert r.status_code == 200 and r.json()["root"]["children"]
        assert seen == sorted(seen) and all(0 <= x <= 1 for x in seen)
    assert tl.index.ready(profile) and (tl.index.index_dir(profile) / tl.index.META).is_file()


def test_rows_build_the_range_tables_that_range_then_answers_from(client: TestClient, home: Home) -> None:
    """``/rows`` starts building the range statistics' per-chunk tables in the background (every
    depth of every row; this profile's are too short to be cut, tests/timeline/test_range cuts
    them); a whole-run ``/range`` afterwards equals an event-by-event scan."""
    from hyperscope.timeline import range as tl_range

    body = get_rows(client, home.big).json()
    rows = [leaf["id"] for leaf in _leaves(body["root"]) if leaf["type"] == "events"]
    index = tl.load(Profile.open(profile_dir(home.path, home.big)))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # built once PREPARE_DELAY_S has passed, then a pass over it
        kept = tl_range._TABLES.get(id(index))
        if kept is not None and all((r, tl_range.CHUNK) in kept[1] for r in rows):
            break
        time.sleep(0.1)
    kept = tl_range._TABLES[id(index)][1]
    assert all(len(kept[(r, tl_range.CHUNK)]) == index.by_id[r].depths for r in rows)
    t0, t1 = int(body["start_ns"]), int(body["end_ns"]) + 1
    r = client.get(
        BASE.format(home.big) + "/range", params={"rows": ",".join(rows), "t0_ns": t0, "t1_ns": t1}
    )
    assert r.status_code == 200
    want = tl_range.range_stats(index, rows, t0, t1, chunk=1 << 40)
    got = r.json()
    assert {k: v for k, v in got.items() if k not in ("t0_ns", "t1_ns")} == {
        k: v for k, v in want.items() if k not in ("t0_ns", "t1_ns")
    }
    assert got["count"] == sum(index.by_id[r].stop - index.by_id[r].start for r in rows)
