"""A profile hyperscope captured on a real H200 (tests/data/h200_capture): what the GPU capture path
stored, checked on every machine, and the dashboard computed on it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from hyperscope.analysis import dashboard, to_json
from hyperscope.store.profile import Profile

FIXTURE = Path(__file__).parents[1] / "data" / "h200_capture"
JOB = "h200-transformer"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    home = tmp_path_factory.mktemp("h200") / "home"
    shutil.copytree(FIXTURE, home, ignore=shutil.ignore_patterns("README.txt"))
    return Store(home)


@pytest.fixture(scope="module")
def profile(store: Store) -> Profile:
    return store.profile(JOB)


def test_the_capture_completed_with_the_gpu_described(store: Store, profile: Profile) -> None:
    assert store.job(JOB).status is JobStatus.COMPLETED
    (rank,) = profile.meta.ranks
    assert rank.complete and "H200" in rank.device_properties[0]["name"]
    assert any("perf counters unavailable" in note for note in rank.notes)


def test_every_kernel_follows_the_launch_that_caused_it(profile: Profile) -> None:
    con = profile.connect()
    kernels, linked, runtime, driver = con.sql(
        """SELECT count(*), count(l.kind), count(*) FILTER (WHERE l.kind = 'runtime'),
                  count(*) FILTER (WHERE l.kind = 'driver')
           FROM events k LEFT JOIN events l ON l.correlation = k.correlation
                AND l.kind IN ('runtime', 'driver') AND l.ts_ns <= k.ts_ns
           WHERE k.kind = 'kernel'"""
    ).fetchall()[0]
    assert kernels == linked == 10_902
    assert driver == 840 and runtime == kernels - driver  # cuBLAS/CUTLASS go through cuLaunchKernel
    grids = con.sql("SELECT count(*) FROM events WHERE kind = 'kernel' AND grid IS NULL").fetchall()
    assert grids == [(0,)]


def test_dashboard_on_the_gpu_capture(profile: Profile) -> None:
    tables = dashboard(profile)
    to_json(tables)
    con = profile.connect()
    kernel_ns = con.sql("SELECT sum(dur_ns) FROM events WHERE kind = 'kernel'").fetchall()[0][0]
    total = tables["kernels"].rows[-1]
    assert (total.launches, total.total_ns) == (10_902, kernel_ns)
    hist = tables["latency_histogram"].rows
    memory = con.sql("SELECT count(*) FROM events WHERE kind IN ('memcpy', 'memset')").fetchall()[0][0]
    assert sum(b.count for b in hist) == 10_902 + memory  # every kernel, copy and memset has a latency
    assert len(tables["steps"].rows) == 1 and tables["steps"].rows[0].steps == 40
    util = tables["gpu_utilization"].rows
    assert util and max(r.util_pct for r in util) > 0
