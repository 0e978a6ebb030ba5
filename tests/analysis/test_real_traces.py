"""Our own (default) definitions on every real trace: the dashboard runs, its tables agree with
each other, and where our definition coincides with HTA's the numbers are HTA's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hyperscope.analysis import (
    Level,
    Scope,
    dashboard,
    gpu_time,
    gpu_utilization,
    hta,
    idle_breakdown,
    kernel_summary,
    launch_latency,
    step_times,
    to_json,
)
from hyperscope.store.profile import Profile
from tests.conftest import TRACE_SETS

pytestmark = pytest.mark.shared


@pytest.mark.parametrize("name", sorted(TRACE_SETS))
def test_dashboard_is_consistent(name: str, real_profile: Callable[[str], Profile]) -> None:
    tables = dashboard(real_profile(name))
    to_json(tables)
    for row in tables["gpu_time"].rows:
        assert row.busy_ns + row.idle_ns == row.span_ns
        assert row.compute_ns <= row.busy_ns and row.comm_comp_overlap_ns <= row.communication_ns
    job = tables["gpu_time_job"].rows[0]
    assert job.busy_ns == sum(r.busy_ns for r in tables["gpu_time"].rows)
    assert sum(r.duration_ns for r in tables["kernel_types"].rows) == job.busy_ns
    con = real_profile(name).connect()
    kernels, kernel_ns = con.sql("SELECT count(*), sum(dur_ns) FROM events WHERE kind = 'kernel'").fetchall()[
        0
    ]
    total = tables["kernels"].rows[-1]
    assert (total.launches, total.total_ns) == (kernels, kernel_ns)
    assert sum(r.total_ns for r in tables["precision"].rows) == kernel_ns
    idle = {}
    for r in tables["idle"].rows:
        idle[r.group] = idle.get(r.group, 0) + r.idle_ns
    for row in tables["gpu_time"].rows:  # one GPU per rank in these traces
        assert idle.get(row.group, 0) == row.idle_ns
    # the dashboard's shared relations and standalone calls agree (sync rows, as on alexnet, included)
    assert tables["idle"] == idle_breakdown(real_profile(name))
    assert tables["gpu_utilization"] == gpu_utilization(real_profile(name), buckets=50)
    assert tables["launch_latency"] == launch_latency(real_profile(name), level=Level.RANK)


def test_dlrm_default_equals_hta(real_profile: Callable[[str], Profile]) -> None:
    # no cuda_sync rows and one step name: our definitions and HTA's select the same events
    profile = real_profile("dlrm")
    ours = {int(r.group): r for r in gpu_time(profile).rows}
    theirs = {r.rank: r for r in hta.temporal_breakdown(profile).rows}
    for rank, row in ours.items():
        assert row.idle_ns == theirs[rank].idle_us * 1000
        assert row.compute_ns == theirs[rank].compute_us * 1000
        assert row.non_compute_ns == theirs[rank].non_compute_us * 1000


def test_alexnet_sync_rows_are_idle_for_us_busy_for_hta(real_profile: Callable[[str], Profile]) -> None:
    profile = real_profile("alexnet")
    ours = gpu_time(profile).rows[0]
    theirs = hta.temporal_breakdown(profile).rows[0]
    # HTA's span runs to the end of a Context Sync 76 ms after the last kernel; ours ends at the kernel
    assert ours.span_ns < theirs.kernel_us * 1000
    con = profile.connect()
    last_op, last_sync = con.sql(
        "SELECT max(ts_ns + dur_ns) FILTER (WHERE kind IN ('kernel', 'memcpy', 'memset')), "
        "max(ts_ns + dur_ns) FILTER (WHERE kind = 'sync') FROM events"
    ).fetchall()[0]
    assert last_sync > last_op
    assert ours.compute_ns < theirs.compute_us * 1000 + 1  # "Stream Wait Event" is compute for HTA


def test_amd_partial_last_step(real_profile: Callable[[str], Profile]) -> None:
    table = step_times(real_profile("amd"))
    last = max(table.rows, key=lambda r: r.start_ns)
    assert last.partial and not any(r.partial for r in table.rows if r is not last)
    # ProfilerStep#1 also appears as a gpu_user_annotation: a projection of the step, not a repeat
    assert [r.step for r in table.rows] == [1, 2] and not any(r.repeated for r in table.rows)
    assert any("is partial" in n for n in table.notes)


def test_step_range_on_a_real_trace(real_profile: Callable[[str], Profile]) -> None:
    profile = real_profile("df_index_resolver")
    whole = gpu_time(profile).rows[0]
    two = gpu_time(profile, Scope(steps=(3, 4))).rows[0]
    steps = {r.step: r for r in step_times(profile).rows}
    assert two.span_ns == steps[4].start_ns + steps[4].dur_ns - steps[3].start_ns
    assert two.busy_ns < whole.busy_ns
    assert (
        kernel_summary(profile, Scope(steps=(3, 4))).rows[-1].launches
        < kernel_summary(profile).rows[-1].launches
    )


def test_dlrm_ranks_levels(real_profile: Callable[[str], Profile]) -> None:
    profile = real_profile("dlrm")
    ranks = gpu_time(profile, level=Level.RANK).rows
    node = gpu_time(profile, level=Level.NODE).rows
    assert len(ranks) == 8 and sum(r.gpus for r in node) == 8
    assert sum(r.busy_ns for r in node) == sum(r.busy_ns for r in ranks)


@pytest.mark.parametrize("name", ["dlrm", "ns_resolution"])
def test_latency_histogram_is_brute_force(name: str, real_profile: Callable[[str], Profile]) -> None:
    """Binned in SQL, equal to binning every launch → kernel pair by hand."""
    from hyperscope.analysis import launch_latency_histogram
    from hyperscope.analysis.steps import histogram

    profile = real_profile(name)
    con = profile.connect()
    pairs = con.sql(
        "SELECT d.ts_ns - h.ts_ns FROM events d JOIN events h ON d.rank = h.rank "
        "AND d.correlation = h.correlation AND h.kind IN ('runtime', 'driver') "
        "WHERE d.kind IN ('kernel', 'memcpy', 'memset') AND d.ts_ns >= h.ts_ns"
    ).fetchall()
    want = histogram([int(p[0]) for p in pairs], 20)
    got = launch_latency_histogram(profile, bins=20)
    assert sum(b.count for b in got.rows) == len(pairs) > 100
    assert got.rows == want
    assert dashboard(profile)["latency_histogram"] == got


def test_legacy_categories_meet_hta(real_profile: Callable[[str], Profile], hta_reference_text: str) -> None:
    # PyTorch 1.8-era categories (Kernel, Runtime, Operator, Memcpy, Memset): device work with
    # device rows, and our default definitions meet HTA's (no sync rows, no steps on this trace)
    from hyperscope.timeline.index import load
    from tests.analysis.hta_reference import parse

    profile = real_profile("resnet50_legacy")
    ref = parse(hta_reference_text)["resnet50_legacy_default"].temporal
    assert ref is not None and len(ref) == 1
    ours = gpu_time(profile).rows[0]
    assert ours.span_ns == ref[0]["kernel"] * 1000
    assert ours.idle_ns == ref[0]["idle"] * 1000
    assert ours.compute_ns == ref[0]["compute"] * 1000
    assert ours.non_compute_ns == ref[0]["non_compute"] * 1000
    kinds = dict(profile.connect().sql("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
    assert kinds["kernel"] > 0 and kinds["memcpy"] > 0 and kinds["memset"] > 0 and kinds["runtime"] > 0
    assert kinds["cpu_op"] > 0 and "other" not in kinds
    device_rows = [r for r in load(profile).rows if r.side == "device"]
    assert device_rows and {r.a for r in device_rows} == {0}
