"""Profiles for the timeline tests: generated ones written straight to Parquet, and the H200 capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.store.profile import Profile

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "h200_capture" / "profiles" / "13d6a1a68216d320"


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """4 ranks on 2 nodes, nested host events (steps around launches), one kernel inside another."""
    spec = GroundTruthSpec(
        ranks=4, steps=30, kernels_per_step=12, nodes=2, samples=True, overlapping_kernel=True
    )
    return write_profile(tmp_path_factory.mktemp("tl") / "gen", spec)


@pytest.fixture(scope="session")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """The real capture, copied: the index is written beside the profile."""
    target = tmp_path_factory.mktemp("tl-h200") / "p"
    shutil.copytree(H200, target)
    return Profile.open(target)
