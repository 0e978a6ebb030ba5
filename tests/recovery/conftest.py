"""Fixtures for the recovery tests on real Slurm: a local cluster (2 workers + 1 spare, agent on)
created and deleted by each test, and the reference weights of a 2-rank run that never failed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hyperscope.cluster.local import LocalProvider, missing_requirements
from hyperscope.cluster.spec import load_spec
from hyperscope.cluster.state import ClusterState, list_states
from tests.recovery import netns

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resilient_ddp.py"
SBATCH = ROOT / "examples" / "resilient_ddp.sbatch"
#: the training every test runs: 40 steps, a checkpoint every 4; slow enough to be hit mid-run
TRAIN = ["--steps", "40", "--every", "4", "--step-time", "0.2"]


def wait_for(what: str, ready: Callable[[], object], timeout: float = 120.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[Callable[..., ClusterState]]:
    """``make(**recovery)``: a running cluster; deleted (every daemon stopped) after the test."""
    why = missing_requirements()
    if why:
        pytest.skip(f"real Slurm unavailable: {why} (./dev installs it when run as root)")
    home = tmp_path / "home"
    provider = LocalProvider(home)

    def make(
        spares: int = 1, gpus: int = 0, slurm: dict[str, object] | None = None, **recovery: object
    ) -> ClusterState:
        d = tmp_path / "spec"
        shutil.copytree(ROOT / "examples" / "lifecycle", d / "lifecycle")
        doc = {
            "name": "rs",
            "provider": "local",
            "lifecycle_scripts": "lifecycle",
            "shared_dir": str(tmp_path / "shared"),
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1},
                {"name": "workers", "role": "worker", "count": 2, "spares": spares, "gpus_per_node": gpus},
            ],
            "recovery": recovery,
            **({"slurm": slurm} if slurm else {}),
        }
        (d / "cluster.yaml").write_text(yaml.safe_dump(doc))
        return provider.create(load_spec(d / "cluster.yaml"))

    yield make
    for state in list_states(home):
        provider.delete(state.name)


def train_env() -> dict[str, str]:
    """What the batch script needs: this Python and the example (the job runs a copy of the script)."""
    return {"PYTHON": sys.executable, "EXAMPLE": str(EXAMPLE)}


@pytest.fixture(scope="session")
def reference_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final weights of the same 2-rank training that never failed, run without Slurm."""
    pytest.importorskip("torch", reason="the recovery tests train with PyTorch (./dev test installs it)")
    d = tmp_path_factory.mktemp("reference")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    env.pop("HYPERSCOPE_HEARTBEAT_DIR", None)
    argv = [sys.executable, str(EXAMPLE), *TRAIN, "--step-time", "0", "--checkpoints", str(d / "ck")]
    ranks = [
        subprocess.Popen([*argv, "--out", str(d / "final.pt")], env={**env, "RANK": str(r)}) for r in (0, 1)
    ]
    assert [p.wait(timeout=300) for p in ranks] == [0, 0]
    return d / "final.pt"


@pytest.fixture
def net_hosts(tmp_path: Path) -> Iterator[Callable[[int], netns.Hosts]]:
    """``make(n)``: n hosts as network namespaces (netns.py), each with its own sshd; every
    namespace, link and process in them removed after the test, whatever happened."""
    why = netns.missing() or missing_requirements()
    if why:
        pytest.skip(f"multi-host tests need namespaces and Slurm: {why}")
    made: list[netns.Hosts] = []

    def make(n: int) -> netns.Hosts:
        hosts = netns.Hosts(tmp_path, f"/run/hs-ns-{uuid.uuid4().hex[:8]}")
        made.append(hosts)
        return hosts.open(n)

    yield make
    for hosts in made:
        hosts.close()
