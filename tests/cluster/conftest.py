"""Fixtures for cluster tests: a spec written into tmp_path, and the skip for machines without Slurm."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hyperscope.cluster.local import LocalProvider, missing_requirements
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import list_states

EXAMPLE_LIFECYCLE = Path(__file__).resolve().parents[2] / "examples" / "lifecycle"


@pytest.fixture
def needs_slurm() -> None:
    why = missing_requirements()
    if why:
        pytest.skip(f"real Slurm unavailable: {why} (./dev installs it when run as root)")


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    """A provider on a fresh home; whatever a failing test left running is deleted afterwards."""
    home = tmp_path / "home"
    p = LocalProvider(home)
    yield p
    for state in list_states(home):
        p.delete(state.name)


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ClusterSpec]:
    """A spec file in tmp_path: ``workers`` workers with 2 GPUs, 1 spare; ``on_create`` replaces the
    example lifecycle script."""

    def make(
        name: str = "t1", workers: int = 2, spares: int = 1, on_create: str | None = None, port_base: int = 0
    ) -> ClusterSpec:
        d = tmp_path / name
        lifecycle = d / "lifecycle"
        shutil.copytree(EXAMPLE_LIFECYCLE, lifecycle)
        if on_create is not None:
            (lifecycle / "on_create.sh").write_text(on_create)
        doc: dict[str, object] = {
            "name": name,
            "provider": "local",
            "lifecycle_scripts": "lifecycle",
            "shared_dir": "shared",
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1},
                {"name": "login", "role": "login", "count": 1},
                {"name": "workers", "role": "worker", "count": workers, "gpus_per_node": 2, "spares": spares},
            ],
        }
        if port_base:
            doc["slurm"] = {"port_base": port_base}
        (d / "cluster.yaml").write_text(yaml.safe_dump(doc))
        return load_spec(d / "cluster.yaml")

    return make
