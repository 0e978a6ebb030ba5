"""A comparison's side on columns (_compare_side, _sweep) gives what the ordinary analyses give:
the GPU pass equal to gpupass's SQL sweep, the steps equal to step_times, kernels and collectives
equal to kernel_summary and collectives, step statistics and histogram equal to steps'. On
generated profiles (with overlapping kernels, a step without an end, a rank without a GPU) and on
real traces where ../shared is present."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from hyperscope.analysis import ALL, Level, Scope
from hyperscope.analysis._common import connection
from hyperscope.analysis._compare_side import (
    histogram_counts,
    kernel_totals,
    slowest_per_step,
    stats_row,
    step_columns,
)
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis._sweep import sweep_pass
from hyperscope.analysis.collectives import collectives
from hyperscope.analysis.gpupass import _compute
from hyperscope.analysis.groundtruth import GroundTruthSpec
from hyperscope.analysis.kernels import kernel_summary
from hyperscope.analysis.steps import histogram, step_time_stats, step_times
from hyperscope.store.profile import Profile

SPECS = (
    GroundTruthSpec(ranks=2, steps=6),
    GroundTruthSpec(ranks=3, steps=5, nodes=2, overlapping_kernel=True, open_step=True, gpu_less_rank=True),
    GroundTruthSpec(ranks=1, steps=4, clock_jump=True),
)
SCOPES = (ALL, Scope(steps=(1, 3)), Scope(ranks=(0,)), Scope(start_ns=0, end_ns=1 << 62))


@contextmanager
def _ctx(profile: Profile, scope: Scope) -> Iterator[Prepared]:
    with connection(profile) as con:
        ctx = Prepared(con, scope, materialize=True)
        try:
            yield ctx
        finally:
            ctx.close()


def _same_side(profile: Profile, scope: Scope) -> None:
    with _ctx(profile, scope) as ctx:
        for width, short in ((None, None), (7_000, 1_000)):
            swept = sweep_pass(ctx, width_ns=width, short_gap_ns=short)
            assert swept == _compute(ctx, swept.width_ns, swept.short_gap_ns), (scope, width)
        cols = step_columns(ctx)
        rows = step_times(ctx, scope)
        assert cols.notes == rows.notes
        assert [(int(r), int(s), int(t), int(d), bool(p)) for r, s, t, d, p in zip(
            cols.rank, cols.step, cols.start, cols.dur, cols.partial, strict=True
        )] == [(r.rank, r.step, r.start_ns, r.dur_ns, r.partial) for r in rows.rows]  # fmt: skip
        stats = step_time_stats(rows, level=Level.JOB).rows
        mine = stats_row("job", cols.complete)
        if not stats:
            assert mine is None
        else:
            assert mine is not None
            assert mine.std_ns == pytest.approx(stats[0].std_ns, rel=1e-12, abs=1e-9)
            assert (mine.steps, mine.mean_ns, mine.min_ns, mine.p50_ns, mine.p99_ns, mine.max_ns) == (
                stats[0].steps,
                stats[0].mean_ns,
                stats[0].min_ns,
                stats[0].p50_ns,
                stats[0].p99_ns,
                stats[0].max_ns,
            )
        durs = [r.dur_ns for r in rows.rows if not r.partial]
        assert [(h, a + b) for h, a, b in histogram_counts(cols.complete, cols.complete[:0], 7)] == [
            (h, h.count) for h in histogram(durs, 7)
        ]
        slowest: dict[int, int] = {}
        for r in rows.rows:
            if not r.partial:
                slowest[r.step] = max(slowest.get(r.step, 0), r.dur_ns)
        steps, longest = slowest_per_step(cols)
        assert list(zip(steps.tolist(), longest.tolist(), strict=True)) == sorted(slowest.items())
        kernels, comm = kernel_totals(ctx)
        summary = kernel_summary(ctx, scope, 1 << 40).rows[:-1]
        assert sorted((k.name, k.kernel_type, k.launches, k.total_ns) for k in kernels) == sorted(
            (k.name, k.kernel_type, k.launches, k.total_ns) for k in summary
        )
        assert comm == collectives(ctx, scope).rows


@pytest.mark.parametrize("spec", SPECS)
def test_generated_sides_equal_the_analyses(
    ground_truth: Callable[[GroundTruthSpec], Profile], spec: GroundTruthSpec
) -> None:
    profile = ground_truth(spec)
    for scope in SCOPES:
        _same_side(profile, scope)


@pytest.mark.parametrize("name", ["dlrm", "amd"])
def test_real_sides_equal_the_analyses(real_profile: Callable[[str], Profile], name: str) -> None:
    profile = real_profile(name)
    for scope in (ALL, Scope(steps=(1, 2)), Scope(ranks=(0,))):
        _same_side(profile, scope)


def test_histogram_of_two_sides_counts_each() -> None:
    a = np.array([1, 5, 9], dtype=np.int64)
    b = np.array([9, 9, 2], dtype=np.int64)
    bins = histogram_counts(a, b, 4)
    assert [(h.lo_ns, h.hi_ns, na, nb) for h, na, nb in bins] == [
        (1, 4, 1, 1),
        (4, 7, 1, 0),
        (7, 10, 1, 2),
        (10, 13, 0, 0),
    ]
    assert [h.count for h, _, _ in bins] == [2, 1, 3, 0]


@pytest.mark.parametrize("far", [0, 1 << 50])
def test_points_sort_by_gpu_time_then_ends_first(far: int) -> None:
    """Both ways of sorting the points (the packed key, and lexsort where a time span or GPU count
    does not fit it) order them by GPU, time, then ends before starts (memory, communication,
    computation ends first)."""
    from hyperscope.analysis._sweep import _UNIT_OF_CODE, _sorted_points

    rng = np.random.default_rng(7)
    n = 500
    g = rng.integers(0, 3, n).astype(np.int64)
    s = rng.integers(0, 50, n).astype(np.int64)
    s[0] += far  # beyond the packed key's 2^47 ns: the lexsort path
    t_end = s + rng.integers(0, 5, n)
    k = rng.integers(0, 3, n).astype(np.int64)
    order, gp, t, d = _sorted_points(g, s, t_end, k)
    code = np.concatenate([3 + k, 2 - k])
    naive = sorted(range(2 * n), key=lambda i: (int(np.r_[g, g][i]), int(np.r_[s, t_end][i]), int(code[i])))
    key = [(int(np.r_[g, g][i]), int(np.r_[s, t_end][i]), int(code[i])) for i in range(2 * n)]
    assert [key[i] for i in order] == [key[i] for i in naive]
    assert gp.tolist() == [key[i][0] for i in naive] and t.tolist() == [key[i][1] for i in naive]
    assert d.tolist() == [int(_UNIT_OF_CODE[key[i][2]]) for i in naive]


def test_dense_keys_keep_equality_and_order() -> None:
    from hyperscope.analysis._sweep import _dense

    have = np.array([5, 1 << 50, 7, 5], dtype=np.int64)
    want = np.array([7, 1 << 50, 3], dtype=np.int64)
    a, b = _dense(have, want, 40)
    assert a.tolist() == [1, 3, 2, 1] and b.tolist() == [2, 3, 0]
    a, b = _dense(np.array([10, 12], dtype=np.int64), np.array([11], dtype=np.int64), 40)
    assert a.tolist() == [0, 2] and b.tolist() == [1]


def test_launch_table_finds_each_pairs_earliest_call() -> None:
    """The table of calls by (rank, correlation): the earliest of repeated ids, none for pairs
    outside the calls' ranks or ids, and no table where the ids are too sparse for one."""
    from hyperscope.analysis._sweep import _NO_CORR, _dense_table

    lr = np.array([0, 0, 0, 2, 2], dtype=np.int64)
    lc = np.array([5, 6, 5, 5, 9], dtype=np.int64)
    lt = np.array([50, 60, 40, 70, 90], dtype=np.int64)
    wr = np.array([0, 0, 2, 1, 2, 0, 3], dtype=np.int64)
    wc = np.array([5, 6, 9, 5, 6, 99, 5], dtype=np.int64)
    got = _dense_table(lr, lc, lt, wr, wc)
    assert got is not None and got.tolist() == [40, 60, 90, _NO_CORR, _NO_CORR, _NO_CORR, _NO_CORR]
    sparse = np.array([0, 1 << 40], dtype=np.int64)
    assert _dense_table(np.zeros(2, np.int64), sparse, lt[:2], wr[:1], wc[:1]) is None
