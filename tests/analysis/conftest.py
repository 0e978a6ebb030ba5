"""Fixtures for the analysis tests: the real traces imported once per session, and generated
profiles with known answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.store.profile import Profile
from tests.conftest import SHARED_TRACES, TRACE_SETS, shared_trace_set


@pytest.fixture(scope="session")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store(tmp_path_factory.mktemp("real") / "home") as store:
        yield store


@pytest.fixture(scope="session")
def real_profile(real_store: Store) -> Callable[[str], Profile]:
    """name in tests.conftest.TRACE_SETS → its profile, imported on first use (skips without ../shared)."""

    def get(name: str) -> Profile:
        if name not in {j.name for j in real_store.jobs()}:
            real_store.import_traces(shared_trace_set(name), name)
        return real_store.profile(name)

    return get


@pytest.fixture(scope="session")
def hta_reference_text() -> str:
    path = SHARED_TRACES / "HTA_REFERENCE.txt"
    if not path.exists():
        pytest.skip(f"HTA reference numbers not available: {path} is absent (it ships beside the repo in CI)")
    return path.read_text()


@pytest.fixture(scope="session")
def ground_truth(tmp_path_factory: pytest.TempPathFactory) -> Callable[[GroundTruthSpec], Profile]:
    """A generated profile per spec, written once per session."""
    made: dict[GroundTruthSpec, Profile] = {}
    root = tmp_path_factory.mktemp("groundtruth")

    def get(spec: GroundTruthSpec) -> Profile:
        if spec not in made:
            made[spec] = write_profile(root / f"p{len(made):03d}", spec)
        return made[spec]

    return get


__all__ = ["TRACE_SETS", "Path"]
