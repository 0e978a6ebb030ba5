"""The dashboard's memory view on torch.profiler's own trace of the H200 run (tests/data, recorded
with profile_memory): the curve's top is the peak, and the blocks alive at the peak are those a
replay of every allocation and free finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope._samples import H200_TRACE
from hyperscope.analysis import Scope
from hyperscope.analysis.memory import peak_memory
from hyperscope.analysis.memory_view import allocations_at_peak, memory_curve
from hyperscope.store.profile import Profile

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def torch211(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    home = tmp_path_factory.mktemp("memview") / "home"
    trace = H200_TRACE
    with Store(home) as store:
        store.import_traces([trace], "torch211")
        return store.profile("torch211")


def test_the_curve_tops_out_at_the_peak(torch211: Profile) -> None:
    (peak,) = peak_memory(torch211).rows
    for buckets in (1, 7, 200):
        curve = memory_curve(torch211, buckets=buckets).rows
        assert len({r.bucket_start_ns for r in curve}) <= buckets
        assert max(r.allocated_bytes for r in curve) == peak.peak_allocated_bytes
        assert max(r.reserved_bytes or 0 for r in curve) == peak.peak_reserved_bytes
    starts = [r.bucket_start_ns for r in memory_curve(torch211, buckets=50).rows]
    assert starts == sorted(starts)


def test_allocations_alive_at_the_peak_match_a_replay(torch211: Profile) -> None:
    got = allocations_at_peak(torch211, top=10**6).rows
    assert got
    at = got[0].peak_ts_ns
    con = torch211.connect()
    try:
        events = con.execute(
            "SELECT ts_ns, addr, alloc_bytes, total_allocated FROM events WHERE kind = 'memory' "
            "AND device_type = 1 AND total_allocated IS NOT NULL ORDER BY ts_ns"
        ).fetchall()
    finally:
        con.close()
    peak = max(e[3] for e in events)
    assert at == min(e[0] for e in events if e[3] == peak)  # the first moment at the peak
    alive: dict[int, tuple[int, int]] = {}
    for ts, addr, size, _ in events:
        if ts > at:
            break
        if size > 0:
            alive[addr] = (size, ts)
        elif size < 0:
            alive.pop(addr, None)
    want = sorted(((s, t, a) for a, (s, t) in alive.items()), key=lambda x: (-x[0], x[1]))
    assert [(r.bytes, r.allocated_ts_ns, r.addr) for r in got] == want
    assert sum(r.bytes for r in got) <= peak  # (blocks allocated before the trace began are unseen)
    top3 = allocations_at_peak(torch211, top=3).rows
    assert [r.bytes for r in top3] == [w[0] for w in want[:3]]


def test_a_scope_without_memory_events_says_so(torch211: Profile) -> None:
    table = memory_curve(torch211, Scope(steps=(10_000, 10_001)))
    assert not table.rows and table.notes
