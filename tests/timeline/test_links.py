"""Launch → kernel links equal the correlation join of the store; rows and steps of the real capture."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from tests.timeline.conftest import H200


def test_links_equal_the_correlation_join(h200: Profile) -> None:
    index = tl.load(h200)
    con = h200.connect()
    join = con.execute(
        "SELECT k.rank, k.correlation, l.name, l.ts_ns, k.name, k.ts_ns FROM events k JOIN events l "
        "ON k.rank = l.rank AND k.correlation = l.correlation AND l.kind IN ('runtime', 'driver') "
        "AND l.ph = 'X' WHERE k.kind IN ('kernel', 'memcpy', 'memset') AND k.ph = 'X' ORDER BY k.ts_ns"
    ).fetchall()
    assert len(join) > 10_000
    for rank, corr, lname, lts, kname, kts in join[:: max(1, len(join) // 300)]:
        got = tl.links(index, rank, corr)
        assert [(e["role"], e["name"], e["ts_ns"]) for e in got] == [
            ("launch", lname, lts),
            ("kernel", kname, kts),
        ]
    drivers = con.execute(
        "SELECT count(*) FROM events k JOIN events l ON k.rank = l.rank AND k.correlation = l.correlation "
        "WHERE k.kind = 'kernel' AND l.kind = 'driver'"
    ).fetchone()
    assert drivers is not None and drivers[0] == 840  # cuLaunchKernel launches are links too
    # all visible arrows of a window are pairs of that same join
    step = tl.steps(index)[20]
    pairs = {(r, c) for r, c, *_ in join}
    flows = tl.flows(index, [r.id for r in index.rows], step["ts_ns"], step["ts_ns"] + step["dur_ns"])
    assert len(flows) > 100 and {(f["rank"], f["correlation"]) for f in flows} <= pairs


def test_event_details_hold_every_field(h200: Profile) -> None:
    index = tl.load(h200)
    con = h200.connect()
    name, ts, grid = con.execute(
        "SELECT name, ts_ns, grid FROM events WHERE kind = 'kernel' ORDER BY ts_ns LIMIT 1 OFFSET 500"
    ).fetchone()  # type: ignore[misc]
    i = next(i for i in range(len(index.ts)) if index.ts[i] == ts and index.names[index.name[i]] == name)
    got = tl.event(h200, index, int(index.src[i]))
    assert got["fields"]["name"] == name and got["fields"]["ts_ns"] == ts and got["fields"]["grid"] == grid
    assert got["row"].startswith("stream/0/0/")
    assert [e["role"] for e in got["links"]] == ["launch"]


def test_row_tree_of_the_capture(h200: Profile) -> None:
    index = tl.load(h200)
    root = tl.tree(index, h200.connect(), "h200").to_json()
    node = root["children"][0]
    assert node["id"] == "node/vm"
    gpu = next(c for c in node["children"] if c["id"].startswith("gpu/"))
    ids = [c["id"] for c in gpu["children"]]
    assert ids[0] == "util/vm/0"
    assert "stream/0/0/7" in ids
    assert sum(i.startswith("host/0/") for i in ids) == 3
    steps = tl.steps(index)
    assert len(steps) == 40 and steps[0]["name"] == "ProfilerStep#0"
    assert all(a["ts_ns"] <= b["ts_ns"] for a, b in itertools.pairwise(steps))


def test_steps_are_one_window_per_name_over_every_rank(generated: Profile) -> None:
    index = tl.load(generated)
    got = {s["name"]: s for s in tl.steps(index)}
    rows = (
        generated.connect()
        .execute(
            "SELECT name, min(ts_ns), max(ts_ns + dur_ns), count(*) FROM events "
            "WHERE kind = 'step' AND ph = 'X' GROUP BY name"
        )
        .fetchall()
    )
    assert len(got) == len(rows) == 30
    for name, lo, hi, n in rows:
        assert (got[name]["ts_ns"], got[name]["ts_ns"] + got[name]["dur_ns"], got[name]["events"]) == (
            lo,
            hi,
            n,
        )
    assert tl.span(index) == tuple(
        generated.connect()
        .execute(
            "SELECT min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) FROM events WHERE ph = 'X' AND kind NOT IN "
            "('flow', 'metadata', 'counter', 'trace', 'memory', 'instant', 'other')"
        )
        .fetchone()  # type: ignore[arg-type]
    )


def test_cpu_tracks_include_perf_counters(tmp_path: Path) -> None:
    """A capture's perf counters are CPU tracks beside utilization; their samples come back as is."""
    import pyarrow as pa

    from hyperscope.schema.events import SAMPLE_SCHEMA
    from hyperscope.store.profile import write_part

    target = tmp_path / "p"
    shutil.copytree(H200, target)
    profile = Profile.open(target)
    index = tl.load(profile)
    lo, _ = tl.span(index)
    ts = [lo + k * 100_000_000 for k in range(5)]
    extra = pa.table(
        {"rank": [0] * 5, "node": ["vm"] * 5, "device": [-1] * 5, "metric": ["perf_cycles"] * 5,
         "ts_ns": ts, "value": [1e9, 2e9, 3e9, 4e9, 5e9]},
        schema=SAMPLE_SCHEMA,
    )  # fmt: skip
    write_part(extra, target / "samples" / "part-perf.parquet")
    con = profile.connect()
    root = tl.tree(index, con, "h200").to_json()
    cpu = next(c for c in root["children"][0]["children"] if c["id"] == "cpuset/vm")
    perf = next(c for c in cpu["children"] if c["id"] == "cpu/vm/perf_cycles/-1")
    assert perf["label"] == "cycles" and perf["unit"] == "per interval"
    rows, got_ts, values = tl.sample_tile(con, ["cpu/vm/perf_cycles/-1"], lo, lo + 450_000_000, 1000)
    assert (
        got_ts.tolist() == ts and values.tolist() == [1e9, 2e9, 3e9, 4e9, 5e9] and set(rows.tolist()) == {0}
    )
