"""The SPANK plugin, built here against Debian's libslurm-dev and loaded by the real srun/sbatch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hyperscope.recovery import spank

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not spank.HEADER.is_file() or shutil.which("srun") is None:
        pytest.skip("needs Slurm's srun and libslurm-dev (./dev installs them when run as root)")
    return spank.build(tmp_path_factory.mktemp("spank"))


def _conf(tmp_path: Path, plugin: Path) -> dict[str, str]:
    """A slurm.conf that srun and sbatch can parse for --help and option checks (no daemons)."""
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=t\nSlurmctldHost=localhost\nAuthType=auth/munge\n"
        f"PlugStackConfig={tmp_path / 'plugstack.conf'}\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n"
    )
    (tmp_path / "plugstack.conf").write_text(
        spank.plugstack_line(plugin, slurm_conf=tmp_path / "slurm.conf", log=tmp_path / "auto-resume.log")
    )
    return {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}


def test_the_build_is_reused_until_the_source_changes(plugin: Path) -> None:
    assert spank.build(plugin.parent) == plugin
    assert plugin.name.startswith("hyperscope_auto_resume-") and plugin.stat().st_size > 0


def test_srun_and_sbatch_offer_the_option(plugin: Path, tmp_path: Path) -> None:
    env = _conf(tmp_path, plugin)
    for tool in ("srun", "sbatch", "salloc"):
        done = subprocess.run([tool, "--help"], env=env, capture_output=True, text=True, timeout=60)
        assert "--auto-resume=[N]" in done.stdout + done.stderr, tool


def test_a_bad_count_is_refused_with_a_clear_error(plugin: Path, tmp_path: Path) -> None:
    env = _conf(tmp_path, plugin)
    done = subprocess.run(
        ["srun", "--auto-resume=x", "true"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "--auto-resume=x: expected a number of retries from 0 to 100" in done.stderr


def test_a_missing_header_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(spank, "HEADER", tmp_path / "spank.h")
    with pytest.raises(spank.SpankBuildError, match="apt-get install libslurm-dev"):
        spank.build(tmp_path)
