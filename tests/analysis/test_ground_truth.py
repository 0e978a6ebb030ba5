"""Every analysis against profiles whose answers are known by construction (groundtruth.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hyperscope.analysis import (
    Level,
    Scope,
    annotation_histogram,
    annotation_stats,
    cpu_time,
    cpu_utilization,
    gpu_activity,
    gpu_time,
    gpu_utilization,
    hta,
    idle_breakdown,
    kernel_precision,
    kernel_summary,
    kernel_type_segments,
    latency_outliers,
    launch_latency,
    memory_operations,
    rank_comparison,
    step_time_histogram,
    step_time_stats,
    step_times,
)
from hyperscope.analysis import groundtruth as gt
from hyperscope.store.profile import Profile

Make = Callable[[gt.GroundTruthSpec], Profile]
SPEC = gt.GroundTruthSpec(ranks=3, steps=7, kernels_per_step=6, nodes=2)


def test_gpu_time_is_exact(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    rows = {int(r.group): r for r in gpu_time(ground_truth(SPEC)).rows}
    assert sorted(rows) == want.gpu_ranks
    for rank, row in rows.items():
        assert row.busy_ns == want.busy_ns[rank]
        assert row.idle_ns == want.idle_ns(rank)
        assert row.span_ns == want.span_ns[rank]
        assert row.compute_ns == want.compute_ns[rank]
        assert row.communication_ns == want.communication_ns[rank]
        assert row.memory_ns == want.memory_ns[rank]
        assert row.comm_comp_overlap_ns == want.overlap_ns[rank]
        assert row.overlap_pct == pytest.approx(
            100 * want.overlap_ns[rank] / want.communication_ns[rank], abs=1e-3
        )
        assert row.non_compute_ns == row.busy_ns - row.compute_ns


def test_levels_sum_the_gpus(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    job = gpu_time(ground_truth(SPEC), level=Level.JOB).rows
    assert len(job) == 1 and job[0].gpus == SPEC.ranks
    assert job[0].busy_ns == sum(want.busy_ns.values())
    nodes = {r.group: r for r in gpu_time(ground_truth(SPEC), level=Level.NODE).rows}
    assert sorted(nodes) == ["node-0", "node-1"]
    assert nodes["node-0"].gpus == 2 and nodes["node-1"].gpus == 1  # ranks 0, 2 and rank 1
    assert sum(r.idle_ns for r in nodes.values()) == sum(want.idle_ns(r) for r in want.gpu_ranks)


def test_step_range_cuts_each_rank_to_its_steps(ground_truth: Make) -> None:
    spec = SPEC
    row = {int(r.group): r for r in gpu_time(ground_truth(spec), Scope(steps=(2, 3))).rows}[1]
    assert row.span_ns == spec.step_dur(2) + spec.step_dur(3)  # the window is the steps, edges included
    per_step = gt.expected(gt.GroundTruthSpec(ranks=1, steps=1, kernels_per_step=spec.kernels_per_step))
    assert row.busy_ns == 2 * per_step.busy_ns[0]
    assert row.comm_comp_overlap_ns == 2 * 2 * gt.KD


def test_time_window_clips_intervals(ground_truth: Make) -> None:
    start = SPEC.step_start(0, 0) + gt.LEAD + gt.KD // 2  # halfway into the first kernel of rank 0
    row = {
        int(r.group): r
        for r in gpu_time(ground_truth(SPEC), Scope(ranks=(0,), start_ns=start, end_ns=start + gt.KD)).rows
    }[0]
    # [start, start+KD): the second half of kernel 0, the gap, and KD/2 - GAP of kernel 1
    assert row.span_ns == gt.KD
    assert row.busy_ns == gt.KD - gt.GAP
    assert row.idle_ns == gt.GAP


def test_kernel_type_segments_partition_busy_time(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    seg = {r.kernel_types: r.duration_ns for r in kernel_type_segments(ground_truth(SPEC)).rows}
    assert seg["computation + communication"] == sum(want.overlap_ns.values())
    assert seg["communication"] == sum(want.communication_ns.values()) - sum(want.overlap_ns.values())
    assert seg["memory"] == sum(want.memory_ns.values())
    assert sum(seg.values()) == sum(want.busy_ns.values())


def test_kernels_and_launch_counts(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    table = kernel_summary(ground_truth(SPEC), top_k=2)
    named = {r.name: r for r in table.rows[:-1]}
    assert len(named) == 2
    for name, row in named.items():
        assert row.launches == want.kernel_launches[name]
        assert row.total_ns == want.kernel_total_ns[name]
    assert [r.total_ns for r in table.rows[:-1]] == sorted(want.kernel_total_ns.values(), reverse=True)[:2]
    total = table.rows[-1]
    assert total.launches == sum(want.kernel_launches.values())
    assert total.total_ns == sum(want.kernel_total_ns.values())
    # the shortest and longest launch of any kernel, not 0 / 0
    con = ground_truth(SPEC).connect()
    lo, hi = con.execute("SELECT min(dur_ns), max(dur_ns) FROM events WHERE kind = 'kernel'").fetchone()  # type: ignore[misc]
    assert (total.min_ns, total.max_ns) == (lo, hi) and 0 < lo <= hi


def test_precision_of_generated_kernels(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    rows = {r.precision: r for r in kernel_precision(ground_truth(SPEC)).rows}
    expect: dict[str, int] = {}
    # the fp32 AllReduce is communication, not FP32 work: its own slice, said in a note
    for name, precision in (*gt.KERNELS, (gt.COMM_NAME, "communication")):
        expect[precision] = expect.get(precision, 0) + want.kernel_total_ns[name]
    table = kernel_precision(ground_truth(SPEC))
    assert {p: r.total_ns for p, r in rows.items()} == expect
    assert rows["other"].kernels == 1  # my_custom_fused_kernel: no rule, not guessed
    assert rows["communication"].kernels == 1
    assert any("communication kernel name (NCCL/RCCL) is no compute precision" in n for n in table.notes)
    total = sum(want.kernel_total_ns.values())
    assert rows["FP32"].pct_of_kernel_time == pytest.approx(100 * expect["FP32"] / total, abs=1e-3)


def test_activity_and_memory_operations(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    act = {r.activity: r for r in gpu_activity(ground_truth(SPEC)).rows}
    assert act["memcpy"].count == act["memset"].count == SPEC.ranks * SPEC.steps
    assert act["kernel"].total_ns == sum(want.kernel_total_ns.values())
    mem = {r.kind: r for r in memory_operations(ground_truth(SPEC)).rows}
    assert mem["HtoD"].total_bytes == want.memcpy_bytes
    assert mem["HtoD"].bandwidth_gbps == pytest.approx(gt.MEMCPY_BYTES / gt.MEMCPY_DUR, rel=1e-3)
    assert mem["memset"].total_bytes == want.memset_bytes


def test_launch_latency_is_the_constructed_delay(ground_truth: Make) -> None:
    rows = launch_latency(ground_truth(SPEC), level=Level.RANK).rows
    assert len(rows) == SPEC.ranks
    for row in rows:
        assert row.launches == SPEC.steps * (SPEC.kernels_per_step + 3)
        assert row.p50_ns == row.p99_ns == row.max_ns == gt.LATENCY
    assert all(r.latency_ns == gt.LATENCY for r in latency_outliers(ground_truth(SPEC), top_k=3).rows)


def test_step_times_stats_and_histogram(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    steps = step_times(ground_truth(SPEC))
    assert [r.dur_ns for r in steps.rows if r.rank == 0] == want.step_durs_ns[0]
    assert not any(r.partial or r.repeated for r in steps.rows)
    job = step_time_stats(steps).rows[0]
    durs = sorted(d for r in want.gpu_ranks for d in want.step_durs_ns[r])
    assert job.steps == len(durs) and job.min_ns == durs[0] and job.max_ns == durs[-1]
    assert job.mean_ns == pytest.approx(sum(durs) / len(durs))
    hist = step_time_histogram(steps, bins=3).rows
    # durations are STEP, STEP+EXTRA, STEP+2·EXTRA in turn: three equal-width bins, one value each
    counts = {d: durs.count(d) for d in set(durs)}
    assert [h.count for h in hist] == [counts[d] for d in sorted(counts)]
    only = step_time_stats(ground_truth(SPEC), Scope(steps=(1, 1))).rows[0]
    assert only.steps == SPEC.ranks and only.min_ns == only.max_ns == SPEC.step_dur(1)


def test_annotations(ground_truth: Make) -> None:
    row = annotation_stats(ground_truth(SPEC), name="forward").rows[0]
    assert row.count == SPEC.ranks * SPEC.steps
    assert row.min_ns == gt.FORWARD and row.max_ns == gt.FORWARD + 10_000
    hist = annotation_histogram(ground_truth(SPEC), "forward", bins=2).rows
    assert [h.count for h in hist] == [SPEC.ranks * 4, SPEC.ranks * 3]  # even steps 0,2,4,6 / odd 1,3,5


def test_idle_causes_add_up_to_idle(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    rows = idle_breakdown(ground_truth(SPEC)).rows
    for rank in want.gpu_ranks:
        mine = {r.cause: r for r in rows if r.group == str(rank)}
        assert sum(r.idle_ns for r in mine.values()) == want.idle_ns(rank)
        # gaps between compute kernels (launched before the previous one ended) are launch gaps, but
        # the gap before the last kernel runs under the collective; memcpy→memset is one too
        launch = SPEC.steps * ((SPEC.kernels_per_step - 2) * gt.GAP + gt.MEMSET_GAP)
        assert mine["launch gap"].idle_ns == launch
        # the collective→copy gap and the gaps between steps: the copy was launched after it began
        assert mine["host wait"].idle_ns == want.idle_ns(rank) - launch
        assert mine["host wait"].gaps == SPEC.steps + (SPEC.steps - 1)


def test_cpu_time_and_utilization_without_samples(ground_truth: Make) -> None:
    rows = cpu_time(ground_truth(SPEC)).rows
    assert {r.group for r in rows} == {"0", "1", "2"}
    per_op = 6_000  # each cpu_op; launches sit inside them
    for r in rows:
        # K + 3 launches per step, but the collective is launched at the same instant as kernel K-2
        assert r.active_ns == SPEC.steps * (SPEC.kernels_per_step + 2) * per_op
        assert r.active_ns + r.idle_ns == r.span_ns
    util = cpu_utilization(ground_truth(SPEC), buckets=10)
    assert util.rows and all(r.source == "event coverage" for r in util.rows)
    assert any("no cpu_util_pct samples" in n for n in util.notes)


def test_utilization_from_samples_when_present(ground_truth: Make) -> None:
    spec = gt.GroundTruthSpec(ranks=2, steps=3, samples=True)
    gpu = gpu_utilization(ground_truth(spec), buckets=5)
    assert gpu.rows and all(r.source == "samples" and r.util_pct == gt.GPU_UTIL_PCT for r in gpu.rows)
    cpu = cpu_utilization(ground_truth(spec), buckets=5)
    assert cpu.rows and all(r.source == "cpu_util_pct" and r.util_pct == gt.GPU_UTIL_PCT for r in cpu.rows)


def test_utilization_derived_from_busy_time(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    table = gpu_utilization(ground_truth(SPEC), Scope(ranks=(0,)), bucket_ns=SPEC.step_ns)
    assert all(r.source == "busy time" for r in table.rows)
    busy = sum(r.util_pct / 100 * SPEC.step_ns for r in table.rows)
    assert busy == pytest.approx(want.busy_ns[0], rel=1e-3)  # each bucket's share adds back to busy time


def test_rank_comparison_points_at_the_rank_others_wait_for(ground_truth: Make) -> None:
    rows = rank_comparison(ground_truth(SPEC)).rows
    assert [r.rank for r in rows] == [0, 1, 2] and not any(r.straggler for r in rows)


def test_hta_mode_agrees_with_ours_where_definitions_agree(ground_truth: Make) -> None:
    # One step name per rank would not trigger HTA's filter; several do: include the last step.
    profile = ground_truth(SPEC)
    ours = {int(r.group): r for r in gpu_time(profile).rows}
    theirs = {r.rank: r for r in hta.temporal_breakdown(profile, hta.HtaOptions(include_last_step=True)).rows}
    for rank, row in ours.items():
        assert theirs[rank].idle_us * 1000 == pytest.approx(row.idle_ns)
        assert theirs[rank].compute_us * 1000 == pytest.approx(row.compute_ns)
    overlap = {
        r.rank: r.overlap_pct
        for r in hta.comm_comp_overlap(profile, hta.HtaOptions(include_last_step=True)).rows
    }
    assert all(overlap[r] == pytest.approx(ours[r].overlap_pct, abs=0.01) for r in ours)


@pytest.mark.slow
def test_a_million_events_stay_exact(ground_truth: Make) -> None:
    spec = gt.GroundTruthSpec(ranks=8, steps=1250, kernels_per_step=30)
    want = gt.expected(spec)
    assert want.events >= 1_000_000
    rows = {int(r.group): r for r in gpu_time(ground_truth(spec)).rows}
    assert {r: rows[r].busy_ns for r in rows} == want.busy_ns
    assert {r: rows[r].comm_comp_overlap_ns for r in rows} == want.overlap_ns


def test_dashboard_shares_work_without_changing_answers(ground_truth: Make) -> None:
    """The dashboard reads materialized, shared relations; each table equals the standalone call."""
    from hyperscope.analysis import dashboard

    profile = ground_truth(SPEC)
    for scope in (Scope(), Scope(ranks=(1, 2), steps=(2, 5))):
        tables = dashboard(profile, scope, top_k=15, buckets=50)
        assert tables["gpu_time"] == gpu_time(profile, scope)
        assert tables["gpu_time_job"] == gpu_time(profile, scope, Level.JOB)
        assert tables["kernel_types"] == kernel_type_segments(profile, scope)
        assert tables["idle"] == idle_breakdown(profile, scope)
        assert tables["kernels"] == kernel_summary(profile, scope, 15)
        assert tables["launch_latency"] == launch_latency(profile, scope, Level.RANK)
        assert tables["latency_outliers"] == latency_outliers(profile, scope, 5)
        assert tables["cpu_time"] == cpu_time(profile, scope)
        assert tables["gpu_utilization"] == gpu_utilization(profile, scope, buckets=50)
        assert tables["cpu_utilization"] == cpu_utilization(profile, scope, buckets=50)
        assert tables["ranks"] == rank_comparison(profile, scope)
        assert tables["gpu_time"].rows  # not vacuous


def test_utilization_rolled_up_per_node_and_job(ground_truth: Make) -> None:
    want = gt.expected(SPEC)
    width = SPEC.step_ns
    job = gpu_utilization(ground_truth(SPEC), level=Level.JOB, bucket_ns=width).rows
    assert {r.node for r in job} == {"job"} and all(0 <= r.util_pct <= 100 for r in job)
    # mean over the 3 GPUs per bucket, times the bucket and the GPUs, gives back all busy time
    # (edge buckets that a rank's window cuts short are measured against their inside part)
    total = sum(r.util_pct / 100 * width * len(want.gpu_ranks) for r in job)
    assert total == pytest.approx(sum(want.busy_ns.values()), rel=0.02)
    nodes = {r.node for r in gpu_utilization(ground_truth(SPEC), level=Level.NODE, buckets=4).rows}
    assert nodes == {"node-0", "node-1"}
    sampled = gt.GroundTruthSpec(ranks=2, steps=3, samples=True, nodes=2)
    rows = gpu_utilization(ground_truth(sampled), level=Level.JOB, buckets=5).rows
    assert rows and all(r.util_pct == gt.GPU_UTIL_PCT for r in rows)


def test_launch_latency_log_bins_are_equal_ratio_and_count_every_launch(ground_truth: Make) -> None:
    from itertools import pairwise

    from hyperscope.analysis import launch_latency_histogram
    from hyperscope.analysis.latency import log_edges

    profile = ground_truth(SPEC)
    lats = [
        int(x)
        for (x,) in profile.connect()
        .execute(
            "SELECT d.ts_ns - h.ts_ns FROM events d JOIN events h ON d.rank = h.rank "
            "AND d.correlation = h.correlation AND h.kind IN ('runtime', 'driver') "
            "WHERE d.kind IN ('kernel', 'memcpy', 'memset') AND d.ts_ns >= h.ts_ns"
        )
        .fetchall()
    ]
    got = launch_latency_histogram(profile, bins=20, log=True)
    edges = log_edges(min(lats), max(lats), 20)
    assert [b.lo_ns for b in got.rows] == edges[:-1] and got.rows[-1].hi_ns == max(lats) + 1
    assert [b.count for b in got.rows] == [sum(1 for x in lats if a <= x < b) for a, b in pairwise(edges)]
    assert sum(b.count for b in got.rows) == len(lats)
    assert log_edges(1000, 999_999, 3) == [1000, 10_000, 100_000, 1_000_000]


def test_memory_option_adds_an_allocation_stream_with_a_known_peak(ground_truth: Make) -> None:
    """``memory=True`` adds alloc/free pairs per device op; off (the default) nothing changes."""
    from hyperscope.analysis.memory import peak_memory
    from hyperscope.analysis.memory_view import allocations_at_peak, memory_curve

    spec = gt.GroundTruthSpec(ranks=2, steps=4, kernels_per_step=6, nodes=2, memory=True)
    plain = gt.GroundTruthSpec(ranks=2, steps=4, kernels_per_step=6, nodes=2)
    assert plain.peak_allocated_bytes is None and plain.events_per_rank == 4 * (3 * 9 + 2)
    profile = ground_truth(spec)
    assert profile.meta.events == gt.expected(spec).events == spec.ranks * 4 * (5 * 9 + 2)
    con = profile.connect()
    try:
        assert con.execute("SELECT count(*) FROM events WHERE kind = 'memory'").fetchone() == (2 * 4 * 18,)
        # every step frees what it allocated
        assert con.execute("SELECT sum(alloc_bytes) FROM events WHERE kind = 'memory'").fetchone() == (0,)
    finally:
        con.close()
    peaks = peak_memory(profile).rows
    assert [(p.rank, p.device, p.source) for p in peaks] == [
        (0, 0, "allocator events"),
        (1, 1, "allocator events"),
    ]
    assert {p.peak_allocated_bytes for p in peaks} == {spec.peak_allocated_bytes}
    assert {p.peak_reserved_bytes for p in peaks} == {spec.peak_reserved_bytes}
    assert spec.peak_allocated_bytes == gt.MEM_BASE + 25 * gt.MEM_UNIT  # 9 blocks: 1+2+3+4+5+1+2+3+4 MiB
    curve = memory_curve(profile).rows
    assert max(p.allocated_bytes for p in curve) == spec.peak_allocated_bytes
    allocs = allocations_at_peak(profile).rows
    # at the peak (the last block of step 0) all 9 blocks are alive: the 9 listed, largest first
    for rank in (0, 1):
        mine = [a.bytes for a in allocs if a.rank == rank]
        assert mine == sorted(((i % 5 + 1) * gt.MEM_UNIT for i in range(9)), reverse=True)
    assert ground_truth(plain).meta.events == gt.expected(plain).events
