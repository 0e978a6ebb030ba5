"""`hyperscope cluster …` as a user runs it: a real process per command, real daemons in between."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState, alive

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster_specs"


def run(home: Path, *args: str, code: int = 0, top: bool = False) -> subprocess.CompletedProcess[str]:
    """``hyperscope cluster ARGS``, or ``hyperscope ARGS`` with ``top``."""
    env = {**os.environ, "HYPERSCOPE_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "hyperscope", *(() if top else ("cluster",)), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == code, proc.stdout + proc.stderr
    return proc


def plain(text: str) -> str:
    """A rich table's cells separated by spaces only, for regexes."""
    return re.sub(r"[│┃]", " ", text)


def test_bad_spec_and_unknown_cluster(tmp_path: Path) -> None:
    bad = run(tmp_path, "create", "-f", str(DATA / "bad_role.yaml"), code=2)
    assert f"error: {DATA / 'bad_role.yaml'}: instance_groups[1].role: " in bad.stderr
    assert "(got 'gpu-worker')" in bad.stderr
    assert "no cluster named 'nope'" in run(tmp_path, "describe", "nope", code=1).stderr
    assert "no clusters" in run(tmp_path, "list").stdout
    assert "nothing to do" in run(tmp_path, "delete", "nope").stdout


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_create_describe_list_nodes_delete(tmp_path: Path, make_spec: Callable[..., ClusterSpec]) -> None:
    spec = make_spec(name="cli", workers=2, spares=0)
    home = tmp_path / "home"
    created = run(home, "create", "-f", str(spec.source))
    assert "cluster cli is InService (4 nodes" in created.stdout
    assert re.search(r"workers-2\s+idle", created.stderr)  # progress per node
    conf = re.search(r"export SLURM_CONF=(\S+)", created.stdout)
    assert conf is not None
    state = ClusterState.load(home / "clusters" / "cli")
    try:
        assert re.search(r"cli\s+local\s+InService\s+4\s+controller-1", plain(run(home, "list").stdout))
        described = run(home, "describe", "cli").stdout
        assert re.search(r"slurm version\s+22\.05", described) or "slurm version" in described
        assert f"slurm.conf     {conf.group(1)}" in described
        nodes = plain(run(home, "list-nodes", "cli").stdout)
        assert re.search(r"workers-1\s+workers\s+worker\s+Running\s+idle\s+healthy", nodes), nodes
        assert re.search(r"login-1\s+login\s+login\s+Running\s+-\s+healthy", nodes), nodes
        # plain srun with the printed SLURM_CONF works, as for a user
        srun = subprocess.run(
            ["srun", "-N2", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID"],
            env={**os.environ, "SLURM_CONF": conf.group(1)}, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert sorted(srun.stdout.split()) == sorted(["workers-1", "0", "workers-2", "1"]), srun.stderr
        job_out = tmp_path / "job.out"
        args = ("--wait", "-N2", "-o", str(job_out), "--wrap", "srun bash -c 'echo $SLURM_PROCID'")
        submitted = run(home, "submit", "cli", "--", *args, top=True).stdout
        assert re.match(r"submitted job \d+ to cluster cli\ncatalog job: cli-wrap ", submitted), submitted
        assert f"output: {job_out}\nprofiles: {spec.shared_dir / 'hyperscope'}\n" in submitted
        assert re.search(r"cli-wrap\s+Completed", plain(run(home, "describe", "cli").stdout))
        assert sorted(job_out.read_text().split()) == ["0", "1"]
        # a shell "on" the login node, as HyperPod users get through Session Manager
        sh = run(home, "shell", "cli", "-c", 'echo "$HYPERSCOPE_NODE $PWD $SLURM_CONF"; sinfo -h -o %D')
        assert sh.stdout.split() == ["login-1", str(spec.shared_dir), conf.group(1), "2"]
        on = run(home, "shell", "cli", "--node", "workers-2", "-c", "echo $HYPERSCOPE_ROLE").stdout
        assert on.strip() == "worker"
        assert "has no node 'w9'" in run(home, "shell", "cli", "--node", "w9", "-c", "true", code=1).stderr
    finally:
        assert "deleted cluster cli" in run(home, "delete", "cli").stdout
    assert not any(alive(p) for p in state.procs)
    assert not (home / "clusters" / "cli").exists()
