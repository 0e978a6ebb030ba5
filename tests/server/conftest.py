"""A store with every kind of profile the server must handle, built once per session.

- ``h200-transformer``: the real H200 capture (tests/data/h200_capture, copied: a store is written
  to when opened), one rank, 40 steps, annotations, NVML samples;
- ``synth-multi``: a generated 4-rank trace on two nodes (ranks 0-1 on node-a, 2-3 on node-b),
  imported as a user would;
- ``ground-truth``: a generated profile of ~100k events written straight to Parquet, for the
  time limit.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from hyperscope import Store
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.store.catalog import JobStatus, ProfileRef
from hyperscope.store.profile import Profile, new_profile_id
from hyperscope.store.synth import SynthSpec, write_rank

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "h200_capture"
H200_PROFILE = "13d6a1a68216d320"


@dataclass(frozen=True, slots=True)
class Home:
    path: Path
    h200: str  # profile ids
    multi: str
    big: str


def add_generated(store: Store, job: str, spec: GroundTruthSpec) -> str:
    """A ground-truth profile written into the store and listed in its catalog."""
    pid = new_profile_id()
    return list_profile(store, job, pid, write_profile(profile_dir(store.home, pid), spec))


def list_profile(store: Store, job: str, pid: str, profile: Profile) -> str:
    """A profile written straight into the store's folder (as ``pid``), listed in its catalog as ``job``."""
    ref = ProfileRef(
        id=pid,
        job_id=0,
        created_ns=profile.meta.created_ns,
        source="import",
        events=profile.meta.events,
        ranks=len(profile.meta.ranks),
        bytes=profile.disk_bytes(),
        origin="generated",
    )
    store.catalog.add_profile(
        job, ref, status=JobStatus.COMPLETED, nodes=profile.meta.nodes, created_ns=profile.meta.created_ns
    )
    return pid


def import_multi(store: Store, work: Path, job: str) -> str:
    work.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(4):
        path = work / f"rank{rank}.pt.trace.json"
        write_rank(path, SynthSpec(ranks=4, steps=4, ops_per_step=12, node=f"node-{'ab'[rank // 2]}"), rank)
        paths.append(path)
    return store.import_traces(paths, job).profile.id


@pytest.fixture(scope="session")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("server") / "home"
    shutil.copytree(H200, root, ignore=shutil.ignore_patterns("README.txt"))
    with Store(root) as store:
        multi = import_multi(store, root.parent / "multi", "synth-multi")
        big = add_generated(store, "ground-truth", GroundTruthSpec(ranks=8, steps=300, kernels_per_step=12))
    return Home(root, H200_PROFILE, multi, big)


def local(app: FastAPI) -> TestClient:
    """A client that addresses the server as a browser on this machine does (a token-less server
    answers only to loopback host names)."""
    return TestClient(app, base_url="http://127.0.0.1:8321")


@pytest.fixture
def client(home: Home, tmp_path: Path) -> Iterator[TestClient]:
    """A fresh server (empty caches) on the shared store; no UI bundle."""
    with local(create_app(home.path, static_dir=tmp_path / "no-bundle")) as c:
        yield c
