"""compare(a, b): on pairs where B is A with known kernels slowed by known amounts every delta is the
arithmetic of the slowdown; a profile against itself (and equal ranks, equal step ranges) gives
zero everywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.analysis import ALL, Comparison, Scope, compare
from hyperscope.analysis._diffstats import median_diff_interval, normalise_kernel
from hyperscope.analysis.groundtruth import KD, KERNELS, GroundTruthSpec, expected
from hyperscope.analysis.slowdown import write_slowed
from hyperscope.errors import UsageError
from hyperscope.store.profile import Profile

SPEC = GroundTruthSpec(ranks=2, steps=6, kernels_per_step=8)
#: With K = 8, kernels 2 and 5 of each step; no other device op starts while they run.
SLOWED = KERNELS[2][0]
PER_STEP = 2
D = 20_000
RENAMED = ("ampere_sgemm_128x64_tn", "ampere_sgemm_64x64_tn")


@pytest.fixture(scope="module")
def pair(
    ground_truth: Callable[[GroundTruthSpec], Profile], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Profile, Profile]:
    a = ground_truth(SPEC)
    b = write_slowed(a, tmp_path_factory.mktemp("slowed") / "b", {SLOWED: D}, rename=dict([RENAMED]))
    return a, b


@pytest.fixture(scope="module")
def slowed(pair: tuple[Profile, Profile]) -> Comparison:
    a, b = pair
    return compare((a, ALL), (b, ALL), labels=("before", "after"))


def _metrics(c: Comparison, table: str) -> dict[str, tuple[float | None, float | None]]:
    return {r.metric: (r.delta, r.delta_per_step) for r in c.tables[table].rows}


def test_step_time_change_is_the_slowdown_and_beyond_noise(slowed: Comparison) -> None:
    s = slowed.summary

    durs = sorted(d for r in range(SPEC.ranks) for d in expected(SPEC).step_durs_ns[r])

    assert (s.steps_a, s.steps_b) == (12, 12)
    assert s.median_a_ns == (durs[5] + durs[6]) / 2
    assert s.change_ns == PER_STEP * D
    assert s.change_pct == round(100 * PER_STEP * D / s.median_a_ns, 3)
    assert s.beyond_noise is True and s.interval_lo_ns is not None and s.interval_lo_ns > 0
    assert s.top_kernels == (SLOWED,) and s.explained_pct == 100.0
    assert s.line.startswith(
        f"step time +{100 * PER_STEP * D / s.median_a_ns:.1f} % (beyond noise); 100 % of it"
    )
    rows = {r.group: r for r in slowed.tables["steps"].rows}
    assert rows["after"].p50_ns - rows["before"].p50_ns == PER_STEP * D
    bins = slowed.tables["step_histogram"].rows
    assert sum(b.count_a for b in bins) == sum(b.count_b for b in bins) == 12


def test_gpu_time_deltas_are_exact(slowed: Comparison) -> None:
    m = _metrics(slowed, "gpu_time")
    total = PER_STEP * D * SPEC.steps * SPEC.ranks
    for grown in ("span", "busy", "computation"):
        assert m[grown] == (total, PER_STEP * D), grown
    for same in (
        "idle",
        "communication",
        "memory",
        "non-compute",
        "communication under computation",
        "idle: host wait",
        "idle: launch gap",
        "idle: other",
        "overlap (% of communication hidden)",
    ):
        assert m[same][0] == 0, same
        assert m[same][1] in (0, None), same


def test_kernel_deltas_exact_and_sorted_by_what_explains_the_change(slowed: Comparison) -> None:
    rows = slowed.kernels.rows
    top = rows[0]
    n = expected(SPEC).kernel_launches[SLOWED]
    assert (top.name, top.match, top.launches_a, top.launches_b, top.delta_launches) == (
        SLOWED,
        "name",
        n,
        n,
        0,
    )
    assert (top.total_a_ns, top.delta_total_ns) == (n * KD, n * D)
    assert (top.mean_a_ns, top.delta_mean_ns, top.delta_per_step_ns, top.share_pct) == (
        KD,
        D,
        PER_STEP * D,
        100.0,
    )
    for r in rows[1:]:
        assert (r.delta_launches, r.delta_total_ns, r.delta_per_step_ns, r.share_pct) == (0, 0, 0, 0), r
    # a renamed tile size is the same kernel, matched by its normalised name; nothing is only on one side
    renamed = next(r for r in rows if r.match == "normalised")
    assert (renamed.names_a, renamed.names_b) == RENAMED
    assert renamed.name == normalise_kernel(RENAMED[0]) == normalise_kernel(RENAMED[1])
    assert not slowed.only("A") and not slowed.only("B")
    assert {r.match for r in rows} == {"name", "normalised"}


def test_operators_memory_and_collectives(slowed: Comparison) -> None:
    ops = slowed.tables["operators"].rows
    assert [(o.name, o.delta_launches, o.delta_total_ns) for o in ops] == [("aten::op", 0, 0)]
    assert ops[0].launches_a == (SPEC.kernels_per_step + 3) * SPEC.steps * SPEC.ranks
    (coll,) = slowed.tables["collectives"].rows
    assert (coll.collective, coll.launches_a, coll.launches_b) == ("AllReduce", 12, 12)
    assert (coll.total_a_ns, coll.delta_per_step_ns, coll.wait_a_ns, coll.delta_wait_per_step_ns) == (
        expected(SPEC).communication_ns[0] * 2,
        0,
        0,
        0,
    )
    assert [(r.metric, r.a, r.b) for r in slowed.tables["memory"].rows] == [
        ("peak allocated", None, None),
        ("peak reserved", None, None),
    ]
    assert any("no GPU memory events" in n for n in slowed.tables["memory"].notes)


def test_only_in_one_side(pair: tuple[Profile, Profile], tmp_path: Path) -> None:
    a, _ = pair
    b = write_slowed(a, tmp_path / "b", {SLOWED: 0}, rename={SLOWED: "brand_new_kernel"})
    c = compare((a, ALL), (b, ALL))
    (gone,) = c.only("A")
    (new,) = c.only("B")
    assert (gone.name, gone.launches_b, gone.mean_b_ns, gone.delta_total_ns) == (
        SLOWED,
        0,
        None,
        -gone.total_a_ns,
    )
    assert (new.name, new.launches_a, new.mean_a_ns, new.delta_total_ns) == (
        "brand_new_kernel",
        0,
        None,
        new.total_b_ns,
    )
    assert c.summary.change_ns == 0 and c.summary.line.endswith("; no change")


def _all_zero(c: Comparison) -> None:
    assert c.summary.change_ns == 0 and c.summary.beyond_noise in (False, None)
    for name in ("gpu_time", "memory"):
        for r in c.tables[name].rows:
            assert r.delta in (0, None) and r.delta_per_step in (0, None), (name, r)
    for name in ("kernels", "operators"):
        for r in c.tables[name].rows:
            assert r.match == "name" and r.delta_launches == 0 and r.delta_total_ns == 0, (name, r)
            assert r.delta_per_step_ns == 0 and r.delta_mean_ns == 0, (name, r)
    for r in c.tables["collectives"].rows:
        assert r.delta_per_step_ns == 0 and r.delta_wait_per_step_ns == 0


def test_profile_against_itself_ranks_and_step_ranges(pair: tuple[Profile, Profile]) -> None:
    a, _ = pair
    _all_zero(compare((a, ALL), (a, ALL)))
    _all_zero(compare((a, Scope(ranks=(0,))), (a, Scope(ranks=(1,)))))  # ranks differ by a clock skew only
    _all_zero(compare((a, Scope(steps=(0, 2))), (a, Scope(steps=(3, 5)))))  # one cycle of step lengths each


def test_df_index_resolver_against_itself(real_profile: Callable[[str], Profile]) -> None:
    p = real_profile("df_index_resolver")
    c = compare((p, ALL), (p, ALL))
    _all_zero(c)
    assert len(c.kernels) > 10 and len(c.tables["operators"]) > 10
    peak = {r.metric: r for r in c.tables["memory"].rows}["peak allocated"]
    assert peak.a is not None and peak.a > 0 and peak.delta == 0  # profile_memory: allocator events
    assert {r.collective for r in c.tables["collectives"].rows} == {"AllReduce"}


def test_bad_scope_is_a_usage_error(pair: tuple[Profile, Profile]) -> None:
    a, b = pair
    with pytest.raises(UsageError, match="rank 7: not in this profile"):
        compare((a, ALL), (b, Scope(ranks=(7,))))


def test_bootstrap_interval() -> None:
    same = [100, 102, 98, 101, 99, 100]
    assert median_diff_interval(same, same) is not None
    assert not median_diff_interval(same, same).excludes_zero  # type: ignore[union-attr]
    shifted = median_diff_interval(same, [v + 50 for v in same])
    assert shifted is not None and shifted.excludes_zero and shifted.lo_ns > 0
    assert median_diff_interval([1, 2], [1, 2, 3]) is None
    assert median_diff_interval(same, [v + 1 for v in same]) == median_diff_interval(
        same, [v + 1 for v in same]
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("ampere_sgemm_128x64_tn", "ampere_sgemm_64x64_tn"),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x256x64",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "void at::native::vectorized_elementwise_kernel<2, at::native::FillFunctor<c10::Half>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<c10::Half>, "
            "at::detail::Array<char*, 1>)",
        ),
        (
            "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4",
            "cutlass_80_tensorop_s1688gemm_256x128_64x3_nn_align1",
        ),
    ],
)
def test_normalised_names_match(a: str, b: str) -> None:
    assert normalise_kernel(a) == normalise_kernel(b)


def test_normalised_names_keep_what_differs() -> None:
    assert normalise_kernel("ampere_sgemm_128x64_tn") != normalise_kernel("ampere_sgemm_128x64_nn")
    assert (
        normalise_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
        == "ncclKernel_AllReduce_RING_LL_Sum_float"
    )


def test_steps_side_by_side(slowed: Comparison) -> None:
    pairs = slowed.tables["step_pairs"].rows
    assert [p.step_a for p in pairs] == [p.step_b for p in pairs] == list(range(SPEC.steps))
    assert all(p.delta_ns == PER_STEP * D for p in pairs)
    assert [p.dur_a_ns for p in pairs] == [SPEC.step_dur(s) for s in range(SPEC.steps)]


@pytest.mark.parametrize("n", [7, 8, 41])
def test_resampled_medians_have_the_distribution_of_resampling(n: int) -> None:
    """The Beta draw of a resample's median against drawing the resamples themselves."""
    import numpy as np

    from hyperscope.analysis._diffstats import _resampled_medians

    x = np.sort(np.random.default_rng(n).normal(100.0, 10.0, n))
    drawn = _resampled_medians(x, np.random.default_rng(1))
    brute = np.median(x[np.random.default_rng(2).integers(0, n, (20_000, n))], axis=1)
    for q in (0.025, 0.25, 0.5, 0.75, 0.975):
        assert abs(np.quantile(drawn, q) - np.quantile(brute, q)) < 1.0, q
    assert set(np.unique(drawn)) <= set(x) | {(a + b) / 2 for a in x for b in x}
