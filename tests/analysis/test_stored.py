"""The whole-profile dashboard kept beside a finished profile: written by import and capture,
read back equal, ignored when the analysis code changed, and never required."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.analysis import dashboard, stored, to_json
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


def test_hyperscope_import_precomputes(tmp_path: Path) -> None:
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
        assert stored.load_dashboard(store.profile("j")) is not None
