"""Profiles for the timeline tests: generated ones written straight to Parquet, and the H200 capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.store.profile import Profile

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "h200_capture" / "profiles" / "13d6a1a68216d320"


@pytest.fixture(autouse=True)
def _overview_of_small_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test profiles' levels hold a few to thousands of events: each keeps an overview."""
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_OVERVIEW_MIN", "2")


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """4 ranks on 2 nodes, nested host events (steps around launches), one kernel inside another."""
    spec = GroundTruthSpec(
        ranks=4, steps=30, kernels_per_step=12, nodes=2, samples=True, overlapping_kernel=True
    )
    return write_profile(tmp_path_factory.mktemp("tl") / "gen", spec)


@pytest.fixture(scope="session")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """The real capture, copied: the index is written beside the profile."""
    target = tmp_path_factory.mktemp("tl-h200") / "p"
    shutil.copytree(H200, target)
    return Profile.open(target)


def add_instants(profile: Profile, seed: int = 3) -> None:
    """A part file of instants beside the profile's events (read as one more part): on threads and
    streams that have events, on a thread and a stream that have none, without a thread (pid and
    tid null), several at one time, and ``[memory]`` instants and counters, which are no marks."""
    import random

    import pyarrow as pa

    from hyperscope.schema.events import EVENT_SCHEMA
    from hyperscope.store.profile import write_part

    con = profile.connect()
    lo, hi = con.execute("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE ph = 'X'").fetchall()[0]
    rnd = random.Random(seed)
    rows: list[dict[str, object]] = []

    def add(n: int, kind: str, ph: str, name: str, **where: object) -> None:
        for _ in range(n):
            ts = rnd.randrange(lo, hi)
            rows.append({"rank": 0, "node": "node-0", "kind": kind, "ph": ph, "name": name, "ts_ns": ts,
                         "cat": "cpu_instant_event" if kind == "memory" else None, **where})  # fmt: skip

    host = {"pid": 1000, "tid": 1000}
    add(300, "instant", "i", "marker", **host)
    add(40, "instant", "I", "other marker", **host)
    add(60, "memory", "i", "[memory]", **host)  # the memory track's, no marks
    add(20, "counter", "C", "queue depth", **host)
    add(50, "instant", "i", "lonely", pid=1000, tid=4242)  # a thread with instants only
    add(200, "instant", "i", "on stream", pid=0, tid=7, device=0, stream=7)
    add(30, "instant", "i", "new stream", pid=0, tid=77, device=0, stream=77)  # a stream without events
    add(2, "instant", "i", "Iteration Start: PyTorch Profiler")  # no pid, no tid
    for r in list(rows[:5]):  # several instants at one time: the first is the lowest id
        rows.append({**r, "name": "same time"})
    rows.append({**rows[0], "rank": 1, "node": "node-0", "pid": 1001, "tid": 1001})
    table = pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)
    write_part(table, profile.path / "events" / "part-zz-instants.parquet")
