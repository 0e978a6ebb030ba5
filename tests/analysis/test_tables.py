"""The Tables page's tables on the real H200 capture and on hand-made call trees: every name,
self time that leaves out the operators called, and the kernel launch parameters recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from hyperscope import Store
from hyperscope._samples import H200_TRACE
from hyperscope.analysis import annotation_stats, kernel_summary
from hyperscope.analysis.tables import annotation_table, kernel_table, operator_table, self_times
from hyperscope.store.profile import Profile

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    home = tmp_path_factory.mktemp("tables") / "home"
    shutil.copytree(REPO / "tests" / "data" / "h200_capture", home)
    with Store(home) as store:
        return store.profile("h200-transformer")


@pytest.fixture(scope="module")
def torch211(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """torch.profiler's own trace of the H200 run (tests/data): nested operators, record_shapes."""
    home = tmp_path_factory.mktemp("tables-torch") / "home"
    trace = H200_TRACE
    with Store(home) as store:
        store.import_traces([trace], "torch211")
        return store.profile("torch211")


def test_self_time_leaves_out_direct_children_only() -> None:
    # thread 1: a [0, 100) holds b [10, 40) which holds c [20, 30), and d [50, 60); thread 2: e
    thread = np.array([1, 1, 1, 1, 2])
    ts = np.array([0, 10, 20, 50, 0])
    end = np.array([100, 40, 30, 60, 10])
    assert self_times(thread, ts, end).tolist() == [100 - 30 - 10, 30 - 10, 10, 10, 10]
    # a child running past its parent's end counts only up to it; a sibling after it is no child
    assert self_times(np.array([1, 1, 1]), np.array([0, 5, 20]), np.array([10, 15, 30])).tolist() == [
        5,
        10,
        10,
    ]


def test_kernel_table_has_every_kernel_with_launch_parameters(h200: Profile) -> None:
    table = kernel_table(h200)
    top = kernel_summary(h200, top_k=10**6).rows[:-1]  # without the "(all N kernels)" row
    assert [r.name for r in table.rows] == [r.name for r in top]
    assert [(r.launches, r.total_ns, r.min_ns, r.max_ns) for r in table.rows] == [
        (r.launches, r.total_ns, r.min_ns, r.max_ns) for r in top
    ]
    assert all(r.min_ns <= r.p50_ns <= r.p99_ns <= r.max_ns for r in table.rows)
    assert any(r.grid and r.block and r.registers_per_thread for r in table.rows)
    con = h200.connect()
    try:
        name = table.rows[0].name
        grid = con.execute(
            "SELECT array_to_string(grid, '×'), count(*) FROM events WHERE kind = 'kernel' AND name = ? "
            "GROUP BY 1 ORDER BY 2 DESC LIMIT 1",
            [name],
        ).fetchone()
    finally:
        con.close()
    assert grid is not None and str(table.rows[0].grid).startswith(str(grid[0]))


def test_operator_table_self_time_and_shapes(torch211: Profile) -> None:
    table = operator_table(torch211)
    assert table.rows and all(0 <= r.self_ns <= r.total_ns for r in table.rows)
    assert any(r.self_ns < r.total_ns for r in table.rows)  # the trace's operators nest
    assert any(r.input_shapes for r in table.rows)  # recorded with record_shapes
    linear = next(r for r in table.rows if r.name == "aten::linear")
    addmm = next(r for r in table.rows if r.name == "aten::addmm")
    assert linear.self_ns < linear.total_ns and addmm.total_ns <= linear.total_ns
    con = torch211.connect()
    try:
        calls = dict(
            con.execute("SELECT name, count(*) FROM events WHERE kind = 'cpu_op' GROUP BY name").fetchall()
        )
        whole = con.execute(
            "SELECT sum(dur_ns) FROM events WHERE kind = 'cpu_op' AND dur_ns IS NOT NULL"
        ).fetchone()
    finally:
        con.close()
    assert {r.name: r.calls for r in table.rows} == calls
    # self times add up to the time covered by operators, never more than their inclusive sum
    assert whole is not None and sum(r.self_ns for r in table.rows) < int(whole[0])


def test_annotation_table_has_every_name(h200: Profile) -> None:
    every = annotation_table(h200).rows
    assert [r.name for r in every] == [r.name for r in annotation_stats(h200, top_k=10**6).rows]
    assert len(every) > len(annotation_stats(h200).rows) or len(every) <= 20


def _stack_self_times(thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> list[int]:
    """The definition: one pass per thread with a stack of the open intervals."""
    own = (end - ts).astype(np.int64)
    stack: list[int] = []
    last = None
    for i in range(len(ts)):
        if thread[i] != last:
            stack.clear()
            last = thread[i]
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        if stack:
            own[stack[-1]] -= min(end[i], end[stack[-1]]) - ts[i]
        stack.append(i)
    return [int(v) for v in own]


@pytest.mark.parametrize("seed", range(6))
def test_self_times_equal_a_stack_of_open_intervals(seed: int) -> None:
    """Random call trees on a few threads, with zero-length intervals, equal starts and intervals
    that outlive their parent: the array passes give what the stack gives."""
    rng = np.random.default_rng(seed)
    n = 3000
    thread = np.sort(rng.integers(0, 4, n))
    ts = rng.integers(0, 2000, n)
    dur = np.where(rng.random(n) < 0.1, 0, rng.geometric(0.02, n))
    order = np.lexsort((-dur, ts, thread))
    thread, ts, end = thread[order], ts[order], (ts + dur)[order]
    assert self_times(thread, ts, end).tolist() == _stack_self_times(thread, ts, end)


def test_self_times_of_far_apart_threads() -> None:
    """Times too far apart to pack with the thread: the outermost pass falls back, same answer."""
    thread = np.array([0, 0, 1, 1, 1])
    ts = np.array([-(2**62), -(2**62) + 1, 2**62 - 30, 2**62 - 25, 2**62 - 10])
    end = ts + np.array([10, 2, 10, 3, 5])
    assert self_times(thread, ts, end).tolist() == _stack_self_times(thread, ts, end) == [8, 2, 7, 3, 5]
