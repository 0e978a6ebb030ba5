"""The steps a capture records: the session's fast path (a clock read and an append per step)
stores the same steps, in the same files, as the full path does."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hyperscope as hs
from hyperscope.capture import api
from hyperscope.capture.parts import step_marks
from hyperscope.schema.layout import EVENTS_DIR
from hyperscope.store.store import Store
from tests.capture.profiles import query

pytestmark = pytest.mark.capture


@pytest.fixture(autouse=True)
def _clean_session() -> Iterator[None]:
    yield
    hs.stop_profiling()
    api._unhandled.clear()
    api._manual_steps = False
    api._auto_steps = False


def _run(home: Path, job: str, n: int, **config: Any) -> None:
    assert hs.start_profiling(hs.ProfilerConfig(job=job, home=home, sample_interval_s=0, **config))
    for i in range(n):
        if i in (3, 17):
            with hs.annotate(f"work {i}"):
                pass
        hs.step()
    hs.stop_profiling()


def _steps(home: Path, job: str) -> list[tuple[Any, ...]]:
    return query(
        home, job, "SELECT name, tid, ts_ns, dur_ns, args FROM events WHERE kind = 'step' ORDER BY ts_ns"
    )


def _parts(home: Path, job: str) -> int:
    with Store(home) as store:
        return len(list((store.profile(job).path / EVENTS_DIR).glob("*.parquet")))


def test_every_step_is_recorded_back_to_back_by_the_thread_that_marked_it(tmp_path: Path) -> None:
    _run(tmp_path, "fast", 25)
    rows = _steps(tmp_path, "fast")
    assert [r[0] for r in rows] == [f"ProfilerStep#{i}" for i in range(25)]
    assert {r[1] for r in rows} == {threading.get_native_id()}
    assert all(r[3] >= 0 for r in rows)
    # each step begins where the one before ended: no gap, no overlap
    assert all(a[2] + a[3] == b[2] for a, b in itertools.pairwise(rows))
    assert [r[4] for r in rows] == [f'{{"step":{i}}}' for i in range(25)]
    notes = query(tmp_path, "fast", "SELECT name, args FROM events WHERE kind = 'annotation' ORDER BY ts_ns")
    assert notes == [("work 3", '{"step":3}'), ("work 17", '{"step":17}')]


def test_the_fast_path_writes_the_steps_and_files_the_full_path_writes(tmp_path: Path) -> None:
    # A list of steps takes the full path at every step; a range the fast one: same steps, same files.
    every = dict(flush_every_steps=4, flush_min_gap_s=0)
    _run(tmp_path, "full", 30, steps=list(range(2, 23)), **every)
    _run(tmp_path, "fast", 30, steps=range(2, 23), **every)
    full, fast = _steps(tmp_path, "full"), _steps(tmp_path, "fast")
    assert [r[0] for r in fast] == [r[0] for r in full] == [f"ProfilerStep#{i}" for i in range(2, 23)]
    assert _parts(tmp_path, "fast") == _parts(tmp_path, "full") > 3
    assert [r[4] for r in fast] == [r[4] for r in full]


def test_a_range_of_steps_ends_the_capture_after_its_last_step(tmp_path: Path) -> None:
    assert hs.start_profiling(
        hs.ProfilerConfig(job="range", home=tmp_path, steps=range(0, 6), sample_interval_s=0)
    )
    for _ in range(6):
        assert api.is_profiling()
        hs.step()
    assert not api.is_profiling()  # the 6th step() ended step 5, the last one asked for
    hs.stop_profiling()
    assert len(_steps(tmp_path, "range")) == 6


def test_step_marks_of_runs() -> None:
    marks = step_marks([(4, 100, 7, [150, 175]), (9, 300, 8, [310])])
    assert marks == [
        ("step", "ProfilerStep#4", 7, 100, 50, 4),
        ("step", "ProfilerStep#5", 7, 150, 25, 5),
        ("step", "ProfilerStep#9", 8, 300, 10, 9),
    ]
