"""Bad input gets a defined answer or a clear error naming the field, never a crash or a silently
wrong number: empty profiles, a rank without GPU events, steps without ends, overlapping kernels on
one stream, clock jumps, and parameters out of range."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.analysis import (
    Level,
    Scope,
    annotation_histogram,
    annotation_stats,
    dashboard,
    gpu_time,
    gpu_utilization,
    kernel_summary,
    launch_latency,
    parse_steps,
    rank_comparison,
    step_time_histogram,
    step_times,
    to_json,
)
from hyperscope.analysis import groundtruth as gt
from hyperscope.analysis.gpu import _bucket_ns
from hyperscope.errors import UsageError
from hyperscope.store.profile import Profile

Make = Callable[[gt.GroundTruthSpec], Profile]


def test_empty_profile_gives_empty_tables_with_notes(ground_truth: Make) -> None:
    empty = ground_truth(gt.GroundTruthSpec(ranks=1, steps=0))
    tables = dashboard(empty)
    assert all(len(t) == 0 for t in tables.values() if t.title != "Ranks compared")
    assert "no GPU kernels in scope" in tables["kernels"].notes
    assert "no ProfilerStep#N marks in scope" in tables["steps"].notes
    to_json(tables)  # serializable as it is


def test_rank_without_gpu_events(ground_truth: Make) -> None:
    spec = gt.GroundTruthSpec(ranks=2, steps=3, gpu_less_rank=True)
    want = gt.expected(spec)
    table = gpu_time(ground_truth(spec))
    assert sorted(int(r.group) for r in table.rows) == want.gpu_ranks
    assert "rank 2 has no GPU events in scope" in table.notes
    only = gpu_time(ground_truth(spec), Scope(ranks=(2,)))
    assert only.rows == () and only.notes
    # its steps still count, and it is not mistaken for a straggler for lacking communication
    assert len([r for r in step_times(ground_truth(spec)).rows if r.rank == 2]) == spec.steps
    assert not any(r.straggler for r in rank_comparison(ground_truth(spec)).rows)


def test_steps_without_an_end_are_counted_not_timed(ground_truth: Make) -> None:
    spec = gt.GroundTruthSpec(ranks=1, steps=4, open_step=True)
    table = step_times(ground_truth(spec))
    assert [r.step for r in table.rows] == [0, 1, 2, 3]
    assert "1 steps have no end (no duration) and are not timed" in table.notes


def test_overlapping_kernels_on_one_stream_add_no_time(ground_truth: Make) -> None:
    plain = gt.GroundTruthSpec(ranks=1, steps=2)
    spec = gt.GroundTruthSpec(ranks=1, steps=2, overlapping_kernel=True)
    want = gt.expected(spec)
    row = gpu_time(ground_truth(spec)).rows[0]
    assert row.busy_ns == want.busy_ns[0] == gt.expected(plain).busy_ns[0]
    top = {r.name: r for r in kernel_summary(ground_truth(spec)).rows}
    assert top[gt.KERNELS[0][0]].launches == want.kernel_launches[gt.KERNELS[0][0]]  # counted as launched


def test_clock_jump_is_reported_and_left_out(ground_truth: Make) -> None:
    spec = gt.GroundTruthSpec(ranks=1, steps=2, clock_jump=True)
    table = launch_latency(ground_truth(spec))
    assert table.rows[0].p99_ns == gt.LATENCY  # the impossible pair does not bend the distribution
    assert any("before their CPU launch" in n for n in table.notes)
    assert gpu_time(ground_truth(spec)).rows[0].busy_ns == gt.expected(spec).busy_ns[0]


def test_errors_name_the_bad_value(ground_truth: Make, tmp_path: Path) -> None:
    profile = ground_truth(gt.GroundTruthSpec(ranks=2, steps=3))
    with pytest.raises(UsageError, match="rank 7: not in this profile"):
        gpu_time(profile, Scope(ranks=(7,)))
    with pytest.raises(UsageError, match="node 'nope'"):
        gpu_time(profile, Scope(nodes=("nope",)))
    with pytest.raises(UsageError, match="steps 5:2"):
        Scope(steps=(5, 2))
    with pytest.raises(UsageError, match="end_ns"):
        Scope(start_ns=10, end_ns=5)
    with pytest.raises(UsageError, match="top_k 0"):
        kernel_summary(profile, top_k=0)
    with pytest.raises(UsageError, match="bins 0"):
        step_time_histogram(profile, bins=0)
    with pytest.raises(UsageError, match=r"annotation 'nope'.*forward"):
        annotation_stats(profile, name="nope")
    with pytest.raises(UsageError, match="annotation 'nope'"):
        annotation_histogram(profile, "nope")
    with pytest.raises(UsageError, match="bucket_ns -1"):
        gpu_utilization(profile, bucket_ns=-1)
    with pytest.raises(UsageError, match="buckets 0"):
        _bucket_ns(100, 0, None)
    with pytest.raises(UsageError, match="level 'gpu'"):
        Level.parse("gpu")
    with pytest.raises(UsageError, match="source: expected a Profile"):
        gpu_time("profile.parquet")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "parsed"), [("3:7", (3, 7)), ("5", (5, 5)), (" 2 : 2 ", (2, 2))])
def test_parse_steps(text: str, parsed: tuple[int, int]) -> None:
    assert parse_steps(text) == parsed


@pytest.mark.parametrize("text", ["", "a:b", "3-7", "7:3", "-1:2", "1:2:3"])
def test_parse_steps_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--steps"):
        parse_steps(text)


def test_a_step_range_no_rank_reached(ground_truth: Make) -> None:
    profile = ground_truth(gt.GroundTruthSpec(ranks=2, steps=3))
    table = gpu_time(profile, Scope(steps=(50, 60)))
    assert table.rows == ()
    assert table.notes == ("ranks 0, 1 have no ProfilerStep in 50:60",)
