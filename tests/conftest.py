"""Shared fixtures: a store per test, the real traces of ../shared/traces, generated traces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.store.synth import SynthSpec, write_job

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("HYPERSCOPE_SHARED_TRACES", REPO.parent / "shared" / "traces"))

#: name → the files (or directory) that make one profile
TRACE_SETS: dict[str, list[str]] = {
    "amd": ["HolisticTraceAnalysis/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
    "alexnet": [
        "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    ],
    "ns_resolution": [
        "HolisticTraceAnalysis/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    ],
    "h100": ["TraceLens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"],
    "dlrm": ["param/dlrm_kineto"],
    "df_index_resolver": ["HolisticTraceAnalysis/df_index_resolver/df_index_resolver.json.gz"],
    "resnet50_legacy": ["kineto/resnet50_autograd_legacy"],
}


#: the one skip reason of every test that reads ../shared where it is absent
SHARED_SKIP = f"real traces not available: {SHARED_TRACES} is absent (it ships beside the repo in CI)"


def shared_trace_set(name: str) -> list[Path]:
    """The files of one real trace set, or skip: ../shared exists in CI but not in a user's clone."""
    paths = [SHARED_TRACES / p for p in TRACE_SETS[name]]
    if not all(p.exists() for p in paths):
        pytest.skip(SHARED_SKIP)
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.glob("*.json*")) if p.is_dir() else [p])
    return files


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "home") as s:
        yield s


@pytest.fixture(scope="session")
def synth_job(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A generated 4-rank trace set: the same code paths as the real traces, everywhere."""
    return write_job(tmp_path_factory.mktemp("synth"), SynthSpec(ranks=4, steps=3, ops_per_step=20))


@pytest.fixture(autouse=True)
def timeline_index_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test profiles are far under ``store.derived.TIMELINE_STORE_MIN_EVENTS`` (profiles that small keep
    no index on disk): stored all the same, in blocks of 256 entries, so that every test that
    draws a timeline (servers and browsers included, through the environment) reads the compressed
    blocks across their edges. ``tests/timeline/test_blocks.py`` tests the threshold itself."""
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_STORE_MIN", "0")
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_BLOCK", "256")
