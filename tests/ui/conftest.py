"""Fixtures of the browser tests: Debian's chromium (skipped when absent), the real ``hyperscope ui``
server over a store per data set, and what ``hyperscope.analysis`` computes for the same profiles."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis import dashboard
from hyperscope.analysis.dashboard import to_json
from hyperscope.store.synth import SynthSpec, write_job
from tests.conftest import REPO, shared_trace_set
from tests.ui.harness import ARTIFACTS, launch_chromium, missing, ui_server
from tests.ui.pages import NAVIGATION_LOG_JS


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    why = missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (own storage) whose uncaught script errors fail the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(NAVIGATION_LOG_JS)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert not errors, f"script errors in the page: {errors}"


def screenshot(pg: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    return path


@dataclass(frozen=True)
class Served:
    """A store served by ``hyperscope ui``, and the job the tests look at."""

    url: str
    home: Path
    job: str
    profile_id: str
    ranks: int
    expected: dict[str, Any]  # to_json(dashboard(profile)): the defaults the server uses


def expected_dashboard(home: Path, job: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    with Store(home) as store:
        profile = store.profile(job)
        return profile.meta.profile_id, to_json(dashboard(profile, **kw))


def _serve(home: Path, job: str, ranks: int) -> Iterator[Served]:
    if missing():
        pytest.skip(missing() or "")
    profile_id, expected = expected_dashboard(home, job)
    with ui_server(home) as url:
        yield Served(url, home, job, profile_id, ranks, expected)


def _other_run(store: Store, root: Path) -> None:
    """A second, small job, so that search and filters have something to leave out."""
    store.import_traces(write_job(root / "other", SynthSpec(ranks=1, steps=2, ops_per_step=5)), "other-run")


def _synth_home(root: Path, job: str, ranks: int) -> Path:
    home = root / "home"
    with Store(home) as store:
        store.import_traces(write_job(root / "traces", SynthSpec(ranks=ranks, steps=6, ops_per_step=20)), job)
        _other_run(store, root)
    return home


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A generated 4-rank profile: runs everywhere."""
    root = tmp_path_factory.mktemp("ui-synth")
    yield from _serve(_synth_home(root, "synth-ui-4ranks", 4), "synth-ui-4ranks", 4)


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The H200 capture kept in tests/data (one rank, NVML samples, annotations), copied to tmp."""
    root = tmp_path_factory.mktemp("ui-h200")
    home = root / "home"
    shutil.copytree(REPO / "tests" / "data" / "h200_capture", home)
    with Store(home) as store:
        _other_run(store, root)
    yield from _serve(home, "h200-transformer", 1)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The 8-rank DLRM trace of ../shared/traces (skipped where absent)."""
    files = shared_trace_set("dlrm")
    root = tmp_path_factory.mktemp("ui-real")
    home = root / "home"
    with Store(home) as store:
        store.import_traces(files, "dlrm-kineto-8ranks")
        _other_run(store, root)
    yield from _serve(home, "dlrm-kineto-8ranks", 8)
