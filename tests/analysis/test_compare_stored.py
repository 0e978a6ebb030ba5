"""A side of a comparison over a whole stored profile takes its GPU tables from the profile's
stored dashboard (what ``import`` and ``profile`` keep): only for the whole run of a Profile, equal
to the tables it computes otherwise, and never from a file that is not a usable dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from hyperscope.analysis import ALL, Level, Scope, compare
from hyperscope.analysis._common import connection
from hyperscope.analysis._compare_side import stored_gpu_tables
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis._sweep import sweep_pass
from hyperscope.analysis.breakdown import gpu_time
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.analysis.idle import idle_breakdown
from hyperscope.analysis.slowdown import write_slowed
from hyperscope.analysis.stored import dashboard_path, precompute_dashboard
from hyperscope.store.derived import write_packed
from hyperscope.store.profile import Profile

SPEC = GroundTruthSpec(ranks=3, steps=5, nodes=2, overlapping_kernel=True, open_step=True, gpu_less_rank=True)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Profile, Profile]:
    """Profiles of this test alone: storing a dashboard beside the session's shared ones would
    change which path the other tests take."""
    a = write_profile(tmp_path / "a", SPEC)
    return a, write_slowed(a, tmp_path / "b", {"my_custom_fused_kernel": 20_000})


def _computed(profile: Profile) -> tuple[object, dict[str, int]]:
    with connection(profile) as con:
        ctx = Prepared(con, ALL)
        try:
            sweep_pass(ctx)
            gpu = gpu_time(ctx, ALL, Level.JOB)
            idle = {r.cause: r.idle_ns for r in idle_breakdown(ctx, ALL, Level.JOB).rows}
        finally:
            ctx.close()
    return gpu, idle


def test_stored_tables_equal_the_computed_ones_and_the_comparison_is_unchanged(
    pair: tuple[Profile, Profile],
) -> None:
    a, b = pair
    assert stored_gpu_tables(a, ALL) is None  # nothing stored yet
    before = compare((a, ALL), (b, ALL)).to_dict()
    for p in pair:
        precompute_dashboard(p)
        stored = stored_gpu_tables(p, ALL)
        assert stored is not None
        assert stored == _computed(p)
        assert stored[0].rows and stored[1]  # the generated profile has GPU time and idle gaps
    assert compare((a, ALL), (b, ALL)).to_dict() == before


def test_only_the_whole_run_of_a_profile_reads_them(pair: tuple[Profile, Profile]) -> None:
    """A stored dashboard with one figure changed shows where it is read: the whole run of the
    profile, not a scope (even one that selects every rank) nor a caller's connection."""
    a, b = pair
    true_busy = _busy_a(compare((a, ALL), (b, ALL)).to_dict())
    tables = precompute_dashboard(a)
    tables["gpu_time_job"]["rows"][0]["busy_ns"] += 7
    write_packed(dashboard_path(a), orjson.dumps(tables))
    assert _busy_a(compare((a, ALL), (b, ALL)).to_dict()) == true_busy + 7
    every = Scope(ranks=(0, 1, 2))
    assert _busy_a(compare((a, every), (b, every)).to_dict()) == true_busy
    for scope in (every, Scope(steps=(1, 3)), Scope(start_ns=0, end_ns=1 << 62)):
        assert stored_gpu_tables(a, scope) is None
    with connection(a) as con:
        assert stored_gpu_tables(con, ALL) is None


def _busy_a(result: dict[str, Any]) -> int:
    (row,) = (r for r in result["tables"]["gpu_time"]["rows"] if r["metric"] == "busy")
    return int(row["a"])


def test_a_damaged_or_foreign_stored_dashboard_is_not_used(pair: tuple[Profile, Profile]) -> None:
    a, b = pair
    before = compare((a, ALL), (b, ALL)).to_dict()
    path = dashboard_path(a)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"not a packed result")
    assert stored_gpu_tables(a, ALL) is None
    write_packed(path, b'{"gpu_time_job": {"rows": [{"group": "job"}]}}')  # the wrong shape
    assert stored_gpu_tables(a, ALL) is None
    assert compare((a, ALL), (b, ALL)).to_dict() == before
