"""The whole-profile dashboard and the timeline index kept beside a finished profile: written by
import and capture, read back equal, ignored when the analysis code changed, and never required."""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from hyperscope import Store
from hyperscope import timeline as tl
from hyperscope.analysis import dashboard, stored, to_json
from hyperscope.analysis._common import ALL
from hyperscope.analysis.collective_waits import collective_waits
from hyperscope.analysis.filters import profile_filters
from hyperscope.analysis.memory_view import memory_view
from hyperscope.store.derived import TIMELINE_STORE_MIN_EVENTS
from hyperscope.store.synth import SynthSpec, write_job

FIXTURE = Path(__file__).parents[1] / "data" / "h200_capture"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home, ignore=shutil.ignore_patterns("README.txt"))
    return home


def test_precomputed_equals_computed_and_is_read_back(home: Path) -> None:
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    assert stored.load_dashboard(profile) is None
    assert stored.precompute_job(home, "h200-transformer") is not None
    expected = json.loads(json.dumps(to_json(dashboard(profile))))  # what JSON makes of the tables
    assert stored.load_dashboard(profile) == expected
    assert stored.dashboard_path(profile).parent.name == "derived"
    # the side answers, computed on the dashboard's connection, are each analysis's own answer
    assert stored.load_waits(profile) == json.loads(json.dumps(collective_waits(profile).to_dict()))
    assert stored.load_filters(profile) == json.loads(json.dumps(profile_filters(profile)))
    memory = {k: t.to_dict() for k, t in memory_view(profile, ALL).items()}
    assert stored.load_memory_view(profile) == json.loads(json.dumps(memory))


def test_answers_of_other_analysis_code_are_not_read(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    stored.precompute_dashboard(profile)
    monkeypatch.setattr(stored, "code_digest", lambda: "another-version")
    assert stored.load_dashboard(profile) is None


def test_a_read_only_store_only_loses_the_speed_up(home: Path) -> None:
    """A read-only bind mount of the profile (mounting needs root, which CI has)."""
    from tests.capture.test_disk_failure import mounted, read_only

    with Store(home) as store:
        profile = store.profile("h200-transformer")
    with mounted("--bind", str(profile.path), target=profile.path):
        read_only(profile.path)
        assert stored.save_dashboard(profile, {"x": 1}) is False
        assert stored.precompute_job(home, "h200-transformer") is not None  # computed, not kept
        assert stored.load_dashboard(profile) is None


def test_a_corrupt_stored_answer_is_ignored(home: Path) -> None:
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    path = stored.dashboard_path(profile)
    path.parent.mkdir()
    path.write_bytes(b'{"gpu_time": ')
    assert stored.load_dashboard(profile) is None


def test_hyperscope_import_precomputes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=3))
    env = {**os.environ, "HYPERSCOPE_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "hyperscope", "import", *map(str, paths), "--job", "j"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with Store(tmp_path / "home") as store:
        profile = store.profile("j")
    assert stored.load_dashboard(profile) is not None
    # the timeline index too: a fresh load (another process, here a cleared cache) reads it from disk
    where = tl.index.index_dir(profile)
    assert (where / tl.index.META).is_file()
    before = {p.name: p.stat().st_mtime_ns for p in where.iterdir()}

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the timeline index was built again")

    monkeypatch.setattr(tl.index, "build", no_build)
    monkeypatch.setattr(tl.index, "_CACHE", collections.OrderedDict())
    index = tl.load(profile)
    assert len(index.ts) > 0 and len(index.rows) >= 2
    assert {p.name: p.stat().st_mtime_ns for p in where.iterdir()} == before


def test_a_failed_timeline_index_only_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``hyperscope import`` (typer's runner, in this process) succeeds when the index cannot be
    built; the dashboard is kept, the index is left to the server's first request."""
    from typer.testing import CliRunner

    from hyperscope.cli.main import app

    def broken(*args: object, **kwargs: object) -> None:
        raise MemoryError("no room for the index")

    monkeypatch.setattr(tl.index, "build", broken)
    paths = write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=3))
    home = tmp_path / "home"
    with caplog.at_level(logging.WARNING, logger="hyperscope.analysis"):
        done = CliRunner().invoke(app, ["import", *map(str, paths), "--job", "j", "--home", str(home)])
    assert done.exit_code == 0, done.output
    assert "timeline index" in caplog.text and "no room for the index" in caplog.text
    with Store(home) as store:
        profile = store.profile("j")
    assert stored.load_dashboard(profile) is not None
    assert not tl.index.index_dir(profile).exists()


def test_precompute_keeps_the_index_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[str] = []
    assert (
        stored.precompute_job(home, "h200-transformer", report=lambda what, s: heard.append(what)) is not None
    )
    assert heard == ["dashboard computed", "memory view, waits and filters computed", "timeline index built"]
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    # kept beside the dashboard: what the dashboard page asks with it
    assert stored.load_memory_view(profile) is not None
    assert stored.load_waits(profile) == orjson.loads(orjson.dumps(collective_waits(profile).to_dict()))
    assert stored.load_filters(profile) == profile_filters(profile)
    where = tl.index.index_dir(profile)
    assert (where / tl.index.META).is_file() and where.parent.name == "derived"
    monkeypatch.setattr(tl.index, "build", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rebuilt")))
    assert stored.precompute_timeline(profile) is not None  # there already: nothing to do


@pytest.mark.parametrize("stored_index", [True, False])
def test_the_import_summary_counts_everything_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored_index: bool
) -> None:
    """``→ … on disk`` is every file of the profile once the import ends: the events, the
    dashboard and, where the profile is large enough to keep one, the timeline index."""
    import re

    from typer.testing import CliRunner

    from hyperscope.cli.main import app

    if not stored_index:  # as in use: a profile this small keeps no index on disk
        monkeypatch.setenv("HYPERSCOPE_TIMELINE_STORE_MIN", str(TIMELINE_STORE_MIN_EVENTS))
    paths = write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=3))
    home = tmp_path / "home"
    done = CliRunner().invoke(app, ["import", *map(str, paths), "--job", "j", "--home", str(home)])
    assert done.exit_code == 0, done.output
    said = re.search(r"→ ([\d.,]+) (KB|MB) on disk", " ".join(done.output.split()))
    assert said is not None, done.output
    with Store(home) as store:
        profile = store.profile("j")
    files = [p for p in profile.path.rglob("*") if p.is_file()]
    assert any(p.parent.name == "derived" for p in files)  # the dashboard
    assert any(p.parent.name.startswith("timeline-") for p in files) == stored_index
    total = sum(p.stat().st_size for p in files)
    scale = 1e3 if said.group(2) == "KB" else 1e6
    assert abs(float(said.group(1).replace(",", "")) * scale - total) <= scale * 0.05 + 1


def test_a_failed_side_answer_leaves_the_others(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The waits fail to compute: a warning names them, the memory view and filters are kept."""
    with Store(home) as store:
        profile = store.profile("h200-transformer")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no collectives today")

    monkeypatch.setattr(stored, "collective_waits", broken)
    with caplog.at_level(logging.WARNING, logger="hyperscope.analysis"):
        assert stored.precompute_side_answers(profile) == ["memory view", "filters"]
    assert "waits" in caplog.text and "no collectives today" in caplog.text
    assert stored.load_waits(profile) is None
    assert stored.load_memory_view(profile) is not None and stored.load_filters(profile) is not None


def test_side_answers_run_beside_the_dashboard_and_outlive_its_failure(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a thread of their own, on a cursor of the dashboard's connection; a dashboard that fails
    leaves them kept, and the connection is closed only once they are done."""
    import threading

    ran: list[tuple[str, bool]] = []
    real = stored.precompute_side_answers

    def watched(profile: object, con: object = None, only: object = None) -> list[str]:
        ran.append((threading.current_thread().name, con is not None))
        return real(profile, con, only)  # type: ignore[arg-type]

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no dashboard today")

    monkeypatch.setattr(stored, "precompute_side_answers", watched)
    monkeypatch.setattr(stored, "precompute_dashboard", broken)
    with caplog.at_level(logging.WARNING, logger="hyperscope.analysis"):
        assert stored.precompute_job(home, "h200-transformer") is None
    assert "no dashboard today" in caplog.text
    assert ran == [("hyperscope-precompute", True)]
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    assert stored.load_dashboard(profile) is None
    assert stored.load_waits(profile) == orjson.loads(orjson.dumps(collective_waits(profile).to_dict()))
    assert stored.load_memory_view(profile) is not None and stored.load_filters(profile) is not None


def _kept_beside_equals_computed(paths: list[Path], home: Path) -> None:
    """Imported with the answers computed over the rows in memory: each equals what the stored
    profile gives, and ``precompute_job`` computes none of them again."""
    with Store(home) as store:
        store.import_traces(paths, "j", beside=stored.precompute_beside)
        profile = store.profile("j")
    kept = stored.load_dashboard(profile)
    assert kept is not None, "the dashboard is published with the profile"
    want = orjson.loads(
        orjson.dumps(to_json(dashboard(profile, ALL, top_k=stored.TOP_K, buckets=stored.BUCKETS)))
    )
    assert [k for k in want if kept.get(k) != want[k]] == [] and set(kept) == set(want)
    assert stored.load_waits(profile) == orjson.loads(orjson.dumps(collective_waits(profile, ALL).to_dict()))
    assert stored.load_filters(profile) == orjson.loads(orjson.dumps(profile_filters(profile)))
    view = {k: t.to_dict() for k, t in memory_view(profile, ALL).items()}
    assert stored.load_memory_view(profile) == orjson.loads(orjson.dumps(view))


def test_answers_kept_beside_the_write_equal_the_stored_profiles(
    synth_job: list[Path], tmp_path: Path
) -> None:
    _kept_beside_equals_computed(synth_job, tmp_path / "home")


@pytest.mark.parametrize("name", ["df_index_resolver", "dlrm", "resnet50_legacy", "amd", "h100"])
def test_answers_kept_beside_the_write_equal_on_real_traces(name: str, tmp_path: Path) -> None:
    from tests.conftest import shared_trace_set

    _kept_beside_equals_computed(shared_trace_set(name), tmp_path / "home")


def test_precompute_job_keeps_what_the_import_kept(
    synth_job: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    with Store(home) as store:
        report = store.import_traces(synth_job, "j", beside=stored.precompute_beside)

    def again(*args: object, **kwargs: object) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(stored, "precompute_dashboard", again)
    monkeypatch.setattr(stored, "precompute_side_answers", again)
    monkeypatch.setattr(stored, "connection", again)  # not even a connection is opened
    heard: list[str] = []
    assert stored.precompute_job(home, "j", report.profile.id, lambda what, s: heard.append(what)) == 0.0
    assert not any("dashboard" in what or "waits" in what for what in heard)


def test_a_failure_beside_the_write_costs_nothing(
    synth_job: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What runs beside fails: the profile is stored whole, and ``precompute_job`` computes the
    answers from it."""
    seen: list[int] = []

    def broken(rows: Callable[[], pa.Table | None], profile_dir: Path) -> None:
        events = rows()
        seen.append(-1 if events is None else events.num_rows)
        raise RuntimeError("no room beside")

    home = tmp_path / "home"
    with caplog.at_level(logging.WARNING, logger="hyperscope.store"), Store(home) as store:
        report = store.import_traces(synth_job, "j", beside=broken)
    assert "no room beside" in caplog.text
    assert seen == [report.profile.events]  # every row, once
    with Store(home) as store:
        profile = store.profile("j")
    assert stored.load_dashboard(profile) is None
    assert stored.precompute_job(home, "j") is not None
    assert stored.load_dashboard(profile) is not None and stored.load_waits(profile) is not None


def test_rows_written_as_parts_are_not_handed_beside(
    synth_job: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the rows an import holds, what runs beside is told there are none (and ends), and
    ``precompute_job`` computes the answers from the stored profile."""
    from hyperscope.store import _staged

    monkeypatch.setattr(_staged, "SPILL_BYTES", 1)
    given: list[object] = []

    def beside(rows: Callable[[], pa.Table | None], profile_dir: Path) -> None:
        given.append(rows())
        stored.precompute_beside(lambda: None, profile_dir)  # told so, it ends having kept nothing

    home = tmp_path / "home"
    with Store(home) as store:
        store.import_traces(synth_job, "j", beside=beside)
        profile = store.profile("j")
    assert given == [None]
    assert stored.load_dashboard(profile) is None and not (profile.path / "derived").exists()
    assert stored.precompute_job(home, "j") is not None
    assert stored.load_dashboard(profile) is not None
