"""Collectives across ranks on hand-made traces whose answer is known (a late rank, a rank whose
clock runs ahead), and on the 8-rank DLRM traces: matched instances, waits, last arrivals."""

from __future__ import annotations

import json
from pathlib import Path

from hyperscope import Store
from hyperscope.analysis import Scope
from hyperscope.analysis.collective_waits import collective_waits
from tests.conftest import shared_trace_set

NAME = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def _trace(path: Path, rank: int, kernels: list[tuple[float, float]]) -> Path:
    events = [
        {"ph": "X", "cat": "kernel", "name": NAME, "pid": rank, "tid": 7, "ts": ts, "dur": dur,
         "args": {"device": rank, "stream": 7, "correlation": i + 1}}
        for i, (ts, dur) in enumerate(kernels)
    ]  # fmt: skip
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 3}, "traceEvents": events}))
    return path


def test_waits_offsets_and_last_arrivals_are_exact(tmp_path: Path) -> None:
    # 4 all-reduces ending together at 1000 + 1000 k µs; rank 2 arrives 100 µs after the others
    # in the second, 30 µs after in the fourth; rank 1's clock reads 50 µs ahead throughout
    ends = [1000.0 + 1000 * k for k in range(4)]
    starts = {0: [e - 200 for e in ends], 1: [e - 200 for e in ends], 2: [e - 200 for e in ends]}
    starts[2][1] += 100
    starts[2][3] += 30
    files = [
        _trace(
            tmp_path / f"rank{r}.json",
            r,
            [(s + (50 if r == 1 else 0), e - s) for s, e in zip(starts[r], ends, strict=True)],
        )
        for r in range(3)
    ]
    with Store(tmp_path / "home") as store:
        store.import_traces(files, "waits")
        profile = store.profile("waits")
    table = collective_waits(profile)
    got = {r.rank: r for r in table.rows}
    assert got[1].clock_offset_ns == 50_000 and got[0].clock_offset_ns == got[2].clock_offset_ns == 0
    assert [got[r].collectives for r in range(3)] == [4, 4, 4]
    assert got[0].wait_ns == got[1].wait_ns == 130_000 and got[2].wait_ns == 0
    assert got[0].max_wait_ns == 100_000
    # instances 1 and 3: all equal, the tie goes to the lowest rank; 2 and 4: rank 2
    assert [got[r].last_arrivals for r in range(3)] == [2, 0, 2]
    # a scope of two ranks compares those two only
    pair = {r.rank: r for r in collective_waits(profile, Scope(ranks=(0, 2))).rows}
    assert set(pair) == {0, 2} and pair[0].wait_ns == 130_000


def test_no_collectives_says_so(tmp_path: Path) -> None:
    files = [_trace(tmp_path / "rank0.json", 0, [(100.0, 10.0)])]
    with Store(tmp_path / "home") as store:
        store.import_traces(files, "one")
        table = collective_waits(store.profile("one"))
    assert not table.rows and "two or more ranks" in table.notes[-1]


def test_dlrm_collectives_match_on_every_rank(tmp_path: Path) -> None:
    files = shared_trace_set("dlrm")
    with Store(tmp_path / "home") as store:
        store.import_traces(files, "dlrm")
        table = collective_waits(store.profile("dlrm"))
    assert [r.rank for r in table.rows] == list(range(8))
    n = table.rows[0].collectives
    assert n > 0 and all(r.collectives == n for r in table.rows)
    assert sum(r.last_arrivals for r in table.rows) == n
    assert all(r.wait_ns >= 0 and abs(r.clock_offset_ns) < 1_000_000 for r in table.rows)  # one host
    assert min(r.wait_ns for r in table.rows) < max(r.wait_ns for r in table.rows)
