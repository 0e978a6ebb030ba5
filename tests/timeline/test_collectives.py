"""Collectives across ranks on the timeline (timeline/collectives.py): the n-th launch of a
collective matched on every rank, and the last rank to arrive, on hand-made traces whose answer is
known, and on the real 8-rank DLRM set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope import timeline as tl
from hyperscope.analysis.collective_waits import collective_waits
from hyperscope.store.profile import Profile
from hyperscope.timeline.collectives import instance_of, instances, instances_in
from tests.conftest import shared_trace_set

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
#: rank 2 arrives late in the second and fourth all-reduce (by these µs); all end together
LATE = {1: 100.0, 3: 30.0}
ENDS = [1000.0 + 1000 * k for k in range(4)]


def write_collectives(root: Path) -> list[Path]:
    """Three ranks, four all-reduces ending together at 1000 + 1000 k µs (rank 2 late by ``LATE``),
    a send/recv after each, also ending together, rank r starting 10 r µs late (on stream 8 of
    rank 1: collectives are ordered across streams), and a
    plain kernel between them, which is no collective."""
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(3):
        events: list[dict[str, object]] = []
        for k, end in enumerate(ENDS):
            lag = LATE.get(k, 0.0) if r == 2 else 0.0
            kernels = [
                (ALLREDUCE, end - 200 + lag, 200 - lag, 7),
                ("volta_sgemm_128x64_nn", end + 20, 50.0, 7),
                (SENDRECV, end + 100 + 10 * r, 40.0 - 10 * r, 8 if r == 1 else 7),
            ]
            for name, ts, dur, stream in kernels:
                events.append(
                    {"ph": "X", "cat": "kernel", "name": name, "pid": r, "tid": stream, "ts": ts, "dur": dur,
                     "args": {"device": r, "stream": stream, "correlation": len(events) + 1}}
                )  # fmt: skip
        path = root / f"rank{r}.json"
        path.write_text(json.dumps({"distributedInfo": {"rank": r, "world_size": 3}, "traceEvents": events}))
        files.append(path)
    return files


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    root = tmp_path_factory.mktemp("tl-coll")
    with Store(root / "home") as store:
        store.import_traces(write_collectives(root / "traces"), "collectives")
        return store.profile("collectives")


def _id(profile: Profile, rank: int, name: str, n: int) -> int:
    """The event id (the timeline's) of rank's n-th kernel of that name."""
    index = tl.load(profile)
    found = sorted(
        (int(index.ts[i]), int(index.src[i]))
        for info in index.rows
        if info.rank == rank
        for i in range(info.start, info.stop)
        if index.names[int(index.name[i])] == name
    )
    return found[n][1]


def test_each_kernel_finds_its_collective_on_every_rank(known: Profile) -> None:
    index = tl.load(known)
    for n in range(4):
        got = [instance_of(index, _id(known, r, ALLREDUCE, n)) for r in range(3)]
        assert all(g is not None for g in got)
        first = got[0]
        assert first is not None and all(g == first for g in got)
        assert (first["collective"], first["seq"], first["ranks"], first["complete"]) == (
            "AllReduce",
            n,
            3,
            True,
        )
        assert [e["rank"] for e in first["events"]] == [0, 1, 2]
        assert [e["id"] for e in first["events"]] == [_id(known, r, ALLREDUCE, n) for r in range(3)]
        assert {e["row"] for e in first["events"]} == {"stream/0/0/7", "stream/1/1/7", "stream/2/2/7"}
        # rank 2 late: it is last, by LATE; else a tie, which goes to the lowest rank
        late = LATE.get(n)
        assert first["last"]["rank"] == (2 if late else 0)
        assert first["last"]["after_first_ns"] == int((late or 0) * 1000)
        assert first["last"]["id"] == _id(known, first["last"]["rank"], ALLREDUCE, n)
    # send/recv: ordered on each rank across its streams; rank 2 starts 20 µs after rank 0
    sendrecv = instance_of(index, _id(known, 1, SENDRECV, 2))
    assert sendrecv is not None and sendrecv["collective"] == "SendRecv" and sendrecv["seq"] == 2
    assert [e["row"] for e in sendrecv["events"]] == ["stream/0/0/7", "stream/1/1/8", "stream/2/2/7"]
    assert sendrecv["last"] == {"rank": 2, "id": _id(known, 2, SENDRECV, 2), "after_first_ns": 20_000}
    # a compute kernel is no collective; an id beyond the profile is none either
    assert instance_of(index, _id(known, 0, "volta_sgemm_128x64_nn", 0)) is None
    assert instance_of(index, 10**9) is None


def test_last_arrivals_agree_with_the_dashboards_waits(known: Profile) -> None:
    # one clock for all ranks here: the timeline's latest start is the waits' last arrival
    table = instances(tl.load(known))
    lasts: dict[int, int] = {}
    for k in range(len(table.first) - 1):
        if table.collectives[int(table.coll[table.first[k]])] != "AllReduce":
            continue
        pos = table.pos[table.instance_at(k)]
        got = instance_of(tl.load(known), int(tl.load(known).src[pos[0]]))
        assert got is not None
        lasts[got["last"]["rank"]] = lasts.get(got["last"]["rank"], 0) + 1
    con = known.connect()
    waits = collective_waits(con)
    by_kind = {r.rank: r.last_arrivals for r in waits.rows}
    # the waits count every collective (all-reduce and send/recv): send/recv's last is rank 2
    assert lasts == {0: 2, 2: 2} and by_kind == {0: 2, 1: 0, 2: 2 + 4}


def test_window_answers_instances_in_view_with_every_rank(known: Profile) -> None:
    index = tl.load(known)
    t0 = int(index.ts[index.by_id["stream/0/0/7"].start])  # rank 0's first all-reduce
    us = 1000
    # rank 0's row alone, over its second all-reduce and the send/recv after it: each instance
    # with all three ranks (the far ends of the arrows)
    total, got = instances_in(index, ["stream/0/0/7"], t0 + 1000 * us, t0 + 1400 * us)
    assert total == 2
    assert [(g["collective"], g["seq"]) for g in got] == [("AllReduce", 1), ("SendRecv", 1)]
    assert all(len(g["events"]) == 3 for g in got) and got[0]["last"]["rank"] == 2
    # the whole run on every row: 8 instances, earliest first; a limit keeps the first ones
    rows = [r.id for r in index.rows]
    total, got = instances_in(index, rows, t0 - us, t0 + 10_000 * us)
    assert total == 8 and [g["seq"] for g in got] == [0, 0, 1, 1, 2, 2, 3, 3]
    total, first3 = instances_in(index, rows, t0 - us, t0 + 10_000 * us, limit=3)
    assert total == 8 and first3 == got[:3]
    # a window with no collective in it, and rows that are no device rows
    assert instances_in(index, rows, t0 + 230 * us, t0 + 250 * us) == (0, [])
    assert instances_in(index, ["job", "nope"], t0 - us, t0 + 10_000 * us) == (0, [])


@pytest.mark.shared
def test_dlrm_collectives_are_linked_across_8_ranks(tmp_path: Path) -> None:
    files = shared_trace_set("dlrm")
    with Store(tmp_path / "home") as store:
        store.import_traces(files, "dlrm")
        profile = store.profile("dlrm")
    index = tl.load(profile)
    total, got = instances_in(index, [r.id for r in index.rows], -(2**62), 2**62)
    assert total > 0 and {g["collective"] for g in got} <= {"AllReduce", "SendRecv"}
    waits = collective_waits(profile.connect())
    assert total == waits.rows[0].collectives  # the dashboard matched the same instances
    for g in got:
        assert g["ranks"] == 8 and g["complete"] and [e["rank"] for e in g["events"]] == list(range(8))
        assert len({e["row"] for e in g["events"]}) == 8  # one stream of each rank's GPU
        starts = {e["rank"]: int(e["ts_ns"]) for e in g["events"]}
        assert starts[g["last"]["rank"]] == max(starts.values())
        assert g["last"]["after_first_ns"] == max(starts.values()) - min(starts.values())
        # every member finds the same instance from its own id and row
        member = g["events"][3]
        assert instance_of(index, member["id"], member["row"]) == g


def test_the_module_offers_what_its_all_lists() -> None:
    from hyperscope.timeline import collectives

    assert sorted(collectives.__all__) == [
        "Instances",
        "MAX_INSTANCES",
        "instance_of",
        "instances",
        "instances_in",
    ]
    assert all(hasattr(collectives, name) for name in collectives.__all__)
