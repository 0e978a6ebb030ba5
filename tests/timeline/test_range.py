"""A range's statistics (timeline/range.py) against a plain scan of every event of each row: the
bisection finds exactly the events that overlap, their time inside, the busy time of depth 0, and
the same events the stored profile holds."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from hyperscope.errors import UsageError
from hyperscope.store.profile import Profile
from hyperscope.timeline import load
from hyperscope.timeline.index import KINDS
from hyperscope.timeline.range import _chunks, range_stats


def _scan(index, info, t0: int, t1: int) -> tuple[int, int, int, Counter[str], dict[str, int]]:  # type: ignore[no-untyped-def]
    count = inside = busy = 0
    kinds: Counter[str] = Counter()
    names: dict[str, int] = defaultdict(int)
    for i in range(info.start, info.stop):
        s = int(index.ts[i])
        e = s + int(index.dur[i])
        if (e > t0 and s < t1) or (s == e and t0 <= s < t1):
            part = max(0, min(e, t1) - max(s, t0))
            count += 1
            inside += part
            busy += part if int(index.depth[i]) == 0 else 0
            kinds[KINDS[int(index.kind[i])]] += 1
            names[index.names[int(index.name[i])]] += part
    return count, inside, busy, kinds, names


@pytest.mark.parametrize("fractions", [(0.1, 0.35), (0.0, 1.0), (0.5, 0.5001)])
def test_range_equals_a_scan_of_every_event(generated: Profile, fractions: tuple[float, float]) -> None:
    index = load(generated)
    lo = min(r.t_min for r in index.rows)
    hi = max(r.t_max for r in index.rows)
    t0 = lo + int((hi - lo) * fractions[0])
    t1 = lo + int((hi - lo) * fractions[1]) + 1
    rows = [r for r in index.rows if r.stop > r.start]
    got = range_stats(index, [r.id for r in rows], t0, t1)
    assert [r["id"] for r in got["rows"]] == [r.id for r in rows]
    total = 0
    for info, row in zip(rows, got["rows"], strict=True):
        count, inside, busy, kinds, names = _scan(index, info, t0, t1)
        assert (row["count"], row["total_ns"], row["busy_ns"]) == (count, inside, busy), info.id
        assert {k["kind"]: k["count"] for k in row["kinds"]} == dict(kinds)
        assert row["busy_pct"] == pytest.approx(100 * busy / (t1 - t0), abs=1e-3)
        best = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))[:1]
        if best:
            assert (row["top"][0]["name"], row["top"][0]["total_ns"]) == best[0]
        total += count
    assert got["count"] == total and got["t0_ns"] == t0


def test_range_counts_what_the_profile_stores(generated: Profile) -> None:
    index = load(generated)
    kernel_rows = [r.id for r in index.rows if r.side == "device" and r.stop > r.start]
    lo = min(r.t_min for r in index.rows)
    hi = max(r.t_max for r in index.rows)
    t0, t1 = lo + (hi - lo) // 4, lo + (hi - lo) // 2
    got = range_stats(index, kernel_rows, t0, t1)
    con = generated.connect()
    try:
        (want,) = con.execute(
            "SELECT count(*) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset') AND ph = 'X' "
            "AND ts_ns < ? AND ts_ns + dur_ns > ?",
            [t1, t0],
        ).fetchone() or (None,)
    finally:
        con.close()
    assert got["count"] == want and want > 0
    assert np.isclose(sum(k["total_ns"] for k in got["kinds"]), got["total_ns"])


def test_bad_ranges_are_refused(generated: Profile) -> None:
    index = load(generated)
    with pytest.raises(UsageError, match="expected after"):
        range_stats(index, [index.rows[0].id], 10, 10)
    with pytest.raises(UsageError, match="not an event row"):
        range_stats(index, ["nope"], 0, 10)


def test_whole_chunks_give_what_every_event_gives(generated: Profile) -> None:
    """Ranges answered from the kept per-chunk tables (chunks of 3 events, so that every range
    has whole chunks and two partial edges) equal the same ranges read event by event."""
    index = load(generated)
    rows = [r.id for r in index.rows if r.stop > r.start]
    lo = min(r.t_min for r in index.rows)
    hi = max(r.t_max for r in index.rows)
    rng = np.random.default_rng(7)
    edges = [(lo, hi + 1), (lo - 5, hi + 5), *(sorted(rng.integers(lo, hi + 1, 2)) for _ in range(12))]
    whole = 0
    for t0, t1 in edges:
        if t1 <= t0:
            continue
        by_event = range_stats(index, rows, int(t0), int(t1), top=50, chunk=1 << 40)
        assert range_stats(index, rows, int(t0), int(t1), top=50, chunk=3) == by_event
        whole += by_event["count"]
    assert whole > 0
    kept = [t.size for r in rows for t in _chunks(index, index.by_id[r], 3)]
    assert sum(1 for size in kept if size) > len(kept) // 2  # most depths answered from tables
