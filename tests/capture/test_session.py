"""Capture in this process with real PyTorch: what lands in the store, when, and what never breaks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

import hyperscope as hs
from hyperscope import JobStatus, Store
from hyperscope.capture import api
from hyperscope.store.catalog import RankStatus
from tests.capture.profiles import imported_rows, query

torch = pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture


@pytest.fixture(autouse=True)
def _clean_session() -> Iterator[None]:
    yield
    hs.stop_profiling()
    api._unhandled.clear()
    api._manual_steps = False
    api._auto_steps = False


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def _train_step(model: Any, opt: Any) -> None:
    with hs.annotate("forward"):
        loss = model(torch.randn(4, 32)).pow(2).mean()
    handle = hs.annotation_begin("backward")
    loss.backward()
    hs.annotation_end(handle)
    opt.step()
    opt.zero_grad()


def _kineto_result() -> Any:
    """Kineto's results of three small CPU steps, one annotated."""
    from hyperscope.capture.torch_backend import Activities, KinetoSession

    model, kineto = _model(), KinetoSession(Activities(cpu=True, cuda=False))
    kineto.start()
    for _ in range(3):
        with torch.profiler.record_function("forward"):
            loss = model(torch.randn(4, 32)).sum()
        loss.backward()
    return kineto.stop()


def test_capture_equals_importing_torchs_own_json(tmp_path: Path) -> None:
    """Reading Kineto's results directly gives exactly the rows an import of its JSON gives."""
    from hyperscope.capture.torch_backend import kineto_table

    result = _kineto_result()
    con = duckdb.connect()
    con.register("captured", kineto_table(result, rank=0, node="n", con=con))
    mine = con.sql("SELECT * EXCLUDE (rank, node) FROM captured ORDER BY ALL").fetchall()
    assert len(mine) > 100
    assert mine == imported_rows(result, tmp_path)


def test_releases_without_trace_activities_read_kinetos_json_into_the_same_rows() -> None:
    """PyTorch 2.11's results offer no ``trace_activities``: the JSON route must give equal rows."""
    from hyperscope.capture.torch_backend import kineto_table

    class OlderResult:  # what such a release offers: save(), no trace_activities()
        def __init__(self, inner: Any) -> None:
            self.save = inner.save

    result = _kineto_result()
    con = duckdb.connect()
    con.register("direct", kineto_table(result, rank=0, node="n", con=con))
    con.register("via_json", kineto_table(OlderResult(result), rank=0, node="n", con=con))
    direct = con.sql("SELECT * FROM direct ORDER BY ALL").fetchall()
    assert len(direct) > 100
    assert con.sql("SELECT * FROM via_json ORDER BY ALL").fetchall() == direct


def test_steps_window_annotations_and_completion(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = hs.ProfilerConfig(
        job="window",
        home=home,
        steps=range(2, 5),
        cpu_ops=True,
        flush_every_steps=1,
        flush_min_gap_s=0,
        sample_interval_s=0.05,
    )
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @hs.annotate("decorated")
    def helper() -> None:
        # the window (3 steps) spans >= 0.3 s: several sampler rounds, every core's clock ticked
        # between them (a window of a few ms can end before a CPU % is known; seen in the suite)
        time.sleep(0.1)

    assert hs.start_profiling(config)
    for _ in range(8):
        _train_step(model, opt)
        helper()
        worker = threading.Thread(
            target=lambda: hs.annotate("in-thread").__enter__().__exit__(None, None, None)
        )
        worker.start()
        worker.join()
        hs.step()
    hs.stop_profiling()

    steps = query(home, "window", "SELECT name, dur_ns > 0 FROM events WHERE kind = 'step' ORDER BY ts_ns")
    assert steps == [("ProfilerStep#2", True), ("ProfilerStep#3", True), ("ProfilerStep#4", True)]
    marks = dict(
        query(
            home,
            "window",
            "SELECT name, count(*) FROM events WHERE kind = 'annotation' "
            "AND cat = 'user_annotation' AND args LIKE '{\"step\":%' GROUP BY name",
        )
    )
    assert marks == {"forward": 3, "backward": 3, "decorated": 3, "in-thread": 3}
    tids = dict(
        query(
            home,
            "window",
            "SELECT name, list(DISTINCT tid) FROM events WHERE kind = 'annotation' "
            "AND name IN ('forward', 'in-thread') GROUP BY name",
        )
    )
    assert tids["forward"] == [threading.get_native_id()]
    assert threading.get_native_id() not in tids["in-thread"]
    # operators were recorded inside the window only
    inside = query(
        home,
        "window",
        "SELECT count(*) FILTER (WHERE e.ts_ns >= w.lo AND e.ts_ns <= w.hi), count(*) FROM events e, "
        "(SELECT min(ts_ns) lo, max(ts_ns + dur_ns) hi FROM events WHERE kind = 'step') w "
        "WHERE e.kind = 'cpu_op'",
    )
    assert inside[0][1] > 50 and inside[0][0] == inside[0][1]
    samples = query(home, "window", "SELECT DISTINCT metric FROM samples")
    assert {("cpu_util_pct",), ("process_rss_bytes",)} <= set(samples)
    with Store(home) as store:
        job = store.job("window")
        profile = store.profile("window")
    assert job.status is JobStatus.COMPLETED and job.ranks == 1
    assert profile.meta.source == "capture" and profile.meta.settings["steps"] == "2:5"
    assert profile.meta.ranks[0].complete and profile.meta.events == job.profiles[0].events > 0
    # one part per flush (after the first step, to learn the rate; at the end), each holding the
    # operators and the steps together: the step marks never come in a part of their own
    parts = sorted((profile.path / "events").glob("*.parquet"))
    assert len(parts) >= 2
    kinds = [set(pq.read_table(p, columns=["kind"]).column("kind").to_pylist()) for p in parts]
    assert all({"cpu_op", "step"} <= k for k in kinds[1:]), kinds


def test_events_appear_while_the_job_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hs.start_profiling(
        hs.ProfilerConfig(job="live", home=home, flush_every_steps=2, flush_min_gap_s=0, sample_interval_s=0)
    )
    for _ in range(5):
        _train_step(model, opt)
        hs.step()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not query(home, "live", "SELECT 1 FROM events LIMIT 1"):
        time.sleep(0.05)
    with Store(home) as store:
        assert store.job("live").status is JobStatus.IN_PROGRESS
    running = query(home, "live", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0]
    assert running >= 2
    hs.stop_profiling()
    with Store(home) as store:
        assert store.job("live").status is JobStatus.COMPLETED
    assert query(home, "live", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0] == 5


def test_calls_without_a_capture_do_nothing(tmp_path: Path) -> None:
    assert hs.annotation_begin("x") == 0
    hs.annotation_end(0)
    hs.annotation_end(12345)
    with hs.annotate("x"):
        hs.step()

    @hs.annotate("f")
    def f(a: int, *, b: int) -> int:
        return a + b

    assert f(1, b=2) == 3
    assert f.__name__ == "f"
    hs.stop_profiling()  # stopping what never started is fine
    assert not api.is_profiling()


def test_duration_ends_the_capture(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hs.start_profiling(hs.ProfilerConfig(job="timed", home=home, duration_s=0.3, sample_interval_s=0))
    for _ in range(12):
        time.sleep(0.05)
        hs.step()
    with Store(home) as store:  # ended on its own, before stop_profiling
        assert store.job("timed").status is JobStatus.COMPLETED
    recorded = query(home, "timed", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0]
    assert 3 <= recorded <= 7


def test_memory_is_bounded_by_configuration(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hs.start_profiling(
        hs.ProfilerConfig(
            job="bounded", home=home, max_buffered_events=1000, flush_every_steps=100, sample_interval_s=0
        )
    )
    for _ in range(1500):
        with hs.annotate("tiny"):
            pass
    hs.step()
    hs.stop_profiling()
    assert query(home, "bounded", "SELECT count(*) FROM events")[0][0] == 1000
    with Store(home) as store:
        notes = store.profile("bounded").meta.ranks[0].notes
    assert any("501 annotations dropped" in n for n in notes)


def test_the_event_rate_brings_files_forward(tmp_path: Path) -> None:
    """Kineto's buffers are bounded by events, whatever the step count says."""
    home = tmp_path / "home"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    config = hs.ProfilerConfig(
        job="rate",
        home=home,
        cpu_ops=True,
        flush_every_steps=1000,
        flush_min_gap_s=0,
        max_buffered_events=1000,
        sample_interval_s=0,
    )
    hs.start_profiling(config)
    for _ in range(12):
        _train_step(model, opt)
        hs.step()
    hs.stop_profiling()
    with Store(home) as store:
        profile = store.profile("rate")
        parts = [pq.read_metadata(p).num_rows for p in sorted((profile.path / "events").glob("*.parquet"))]
    # Files: one step's worth (to learn the rate), one when ~1000 Kineto events were due, the rest
    # at stop; each flush writes one part, the annotations in it. The step count alone gives one.
    ops = query(home, "rate", "SELECT count(*) FROM events WHERE kind IN ('cpu_op', 'flow')")[0][0]
    assert ops > 1000 and len(parts) >= 3, (ops, parts)
    assert max(parts) <= 1000 + 12 * 20  # no file much beyond the bound


def test_a_profiler_bug_never_reaches_the_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from hyperscope.capture import torch_backend

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("converter exploded")

    monkeypatch.setattr(torch_backend, "typed_rows", broken)
    home = tmp_path / "home"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level(logging.WARNING, logger="hyperscope.capture"):
        hs.start_profiling(
            hs.ProfilerConfig(
                job="buggy",
                home=home,
                cpu_ops=True,
                flush_every_steps=1,
                flush_min_gap_s=0,
                sample_interval_s=0,
            )
        )
        for _ in range(4):
            _train_step(model, opt)
            hs.step()
        hs.stop_profiling()
    warnings = [r.getMessage() for r in caplog.records if "converter exploded" in r.getMessage()]
    assert len(warnings) == 1  # said once, not once per flush
    with Store(home) as store:
        job = store.job("buggy")
        statuses = store.catalog.rank_statuses(job.profiles[0].id)
    assert job.status is JobStatus.COMPLETED
    assert statuses[0][2] is RankStatus.INCOMPLETE and "converter exploded" in statuses[0][3]
    assert "profile incomplete" in job.message


def test_an_unusable_store_leaves_training_unprofiled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="hyperscope.capture"):
        assert hs.start_profiling(hs.ProfilerConfig(home=blocker / "home")) is False
    assert any(
        "profiling is off" in r.getMessage() and str(blocker) in r.getMessage() for r in caplog.records
    )
    with hs.annotate("still fine"):
        hs.step()


def test_names_that_are_not_utf8_do_not_stop_the_capture() -> None:
    """PyTorch's Python tracer sometimes hands over names that are not UTF-8 (seen on 2.13)."""
    from hyperscope.capture.torch_backend import UNDECODABLE, _meta, _name

    class Garbled:
        def name(self) -> str:
            raise UnicodeDecodeError("utf-8", b"\xa6", 0, 1, "invalid start byte")

        metadata_json = name

    assert _name(Garbled()) == UNDECODABLE
    assert "not UTF-8" in _meta(Garbled())


def test_slicing_large_windows_changes_no_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows are read and typed in slices to bound memory; the rows are the same."""
    from hyperscope.capture import torch_backend
    from hyperscope.capture.torch_backend import Activities, KinetoSession, kineto_rows, typed_rows

    model, kineto = _model(), KinetoSession(Activities(cpu=True, cuda=False))
    kineto.start()
    for _ in range(3):
        model(torch.randn(4, 32)).sum().backward()
    raw = kineto_rows(kineto.stop())
    con = duckdb.connect()
    whole = typed_rows(raw, rank=0, node="n", con=con)
    monkeypatch.setattr(torch_backend, "_SLICE_ROWS", 37)
    sliced = typed_rows(raw, rank=0, node="n", con=con)
    assert raw.num_rows > 37 * 3 and sliced.num_rows == whole.num_rows
    con.register("whole", whole)
    con.register("sliced", sliced)
    in_order = "SELECT * FROM {} ORDER BY ALL"
    assert con.sql(in_order.format("sliced")).fetchall() == con.sql(in_order.format("whole")).fetchall()


def test_a_bug_during_a_step_ends_the_capture_not_the_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperscope.capture.session import Session

    def broken(self: Session) -> None:
        raise RuntimeError("step exploded")

    home = tmp_path / "home"
    hs.start_profiling(hs.ProfilerConfig(job="stepbug", home=home, sample_interval_s=0))
    monkeypatch.setattr(Session, "step", broken)
    for _ in range(3):
        with hs.annotate("work"):
            pass
        hs.step()  # raises inside; the caller sees nothing
    assert not api.is_profiling()
    with Store(home) as store:
        job = store.job("stepbug")
        rank = store.catalog.rank_statuses(job.profiles[0].id)[0]
    assert job.status is JobStatus.COMPLETED  # the training ended well; the profile says what broke
    assert rank[2] is RankStatus.INCOMPLETE and "step exploded" in rank[3]
