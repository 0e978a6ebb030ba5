"""The ssh provider's hosts get the local provider's hooks: the slurm.conf lines (Prolog, TaskProlog,
PlugStackConfig) name the cluster's folder on the hosts; the plugin is used only where every host
matches the machine that built it; its decisions go to the shared directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from hyperscope.cluster import hooks, ssh_health, ssh_hooks
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import ClusterState, NodeState
from hyperscope.recovery import spank

ROOT = Path(__file__).resolve().parents[2]


def _state(tmp_path: Path) -> tuple[ClusterSpec, ClusterState]:
    shutil.copytree(ROOT / "examples" / "lifecycle", tmp_path / "lifecycle")
    doc = {
        "name": "lab", "provider": "ssh", "lifecycle_scripts": "lifecycle", "shared_dir": "shared",
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": ["10.0.0.1"]},
            {"name": "workers", "role": "worker", "count": 1, "hosts": ["10.0.0.2"]},
        ],
    }  # fmt: skip
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "lab.yaml")
    state = ClusterState(
        name="lab", provider="ssh", status="Creating", dir=str(tmp_path / "d"), spec_path="",
        spec_digest="", slurm_conf="/srv/hs/lab/etc/slurm.conf", shared_dir=str(spec.shared_dir),
        controller="controller-1", partition="dev", ctld_port=6817, run_dir="/srv/hs/lab",
        created=1700000000.5,
    )  # fmt: skip
    state.nodes = [NodeState("workers-1", "workers", "worker", False, True, port=6818, host="10.0.0.2")]
    (tmp_path / "d" / "etc").mkdir(parents=True)
    return spec, state


def test_the_hosts_get_the_prolog_and_task_prolog_at_the_cluster_folder_there(tmp_path: Path) -> None:
    spec, state = _state(tmp_path)
    lines = ssh_health.install(spec, state)
    assert lines[3:] == ["Prolog=/srv/hs/lab/etc/healthcheck.sh", "TaskProlog=/srv/hs/lab/etc/taskprolog.sh"]
    prolog = (tmp_path / "d" / "etc" / "taskprolog.sh").read_text()
    assert f"HYPERSCOPE_HEARTBEAT_DIR={tmp_path / 'shared' / 'hyperscope' / 'heartbeats'}" in prolog
    assert f"HYPERSCOPE_CHECKPOINT_DIR={tmp_path / 'shared' / 'checkpoints' / 'lab-1700000000-job'}" in prolog
    assert not (tmp_path / "d" / "faults").exists()  # a host's faults are in its own folder


def test_the_auto_resume_log_is_on_the_shared_directory_per_creation(tmp_path: Path) -> None:
    _, state = _state(tmp_path)
    log = hooks.auto_resume_log(state)
    assert log == tmp_path / "shared" / "hyperscope" / "auto-resume" / "lab-1700000000" / "auto-resume.log"
    log.parent.mkdir(parents=True)
    log.write_text("x\n")
    ssh_hooks.remove_log(state)
    assert not log.parent.exists() and log.parent.parent.is_dir()


def test_the_plugin_is_used_only_where_every_host_matches_this_machine() -> None:
    here = ("x86_64", "slurm-wlm 22.05.8")
    assert ssh_hooks.mismatch(here, {"h1": here, "h2": here}) is None
    why = ssh_hooks.mismatch(here, {"h1": here, "h2": ("aarch64", "slurm-wlm 22.05.8")})
    assert why == "host h2 is aarch64, the plugin was built here for x86_64"
    why = ssh_hooks.mismatch(here, {"h1": ("x86_64", "slurm 23.11.1")})
    assert why == "host h1 runs 'slurm 23.11.1', the plugin was built here against 'slurm-wlm 22.05.8'"
    assert ssh_hooks.mismatch(here, {"h1": ("x86_64", "no slurmd")}) is not None


def test_cluster_hooks_writes_an_adopted_clusters_files_to_the_shared_directory(tmp_path: Path) -> None:
    """`hyperscope cluster hooks NAME` (a real process) on an adopted cluster's recorded state: the
    TaskProlog and plugin on the shared directory, the lines for its operator; nothing else."""
    home, shared = tmp_path / "home", tmp_path / "shared"
    d = home / "clusters" / "prod"
    d.mkdir(parents=True)
    state = ClusterState(
        name="prod", provider="existing", status="InService", dir=str(d), spec_path="", spec_digest="",
        slurm_conf="/etc/slurm/slurm.conf", shared_dir=str(shared), controller="c1", partition="batch",
        ctld_port=6817, created=1700000000.0,
    )  # fmt: skip
    state.save()
    done = run_cli(home, "hooks", "prod")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = shared / "hyperscope" / "hooks" / "prod-1700000000"
    assert f"TaskProlog={folder / 'taskprolog.sh'}" in done.stdout.splitlines()
    assert (
        "HYPERSCOPE_HEARTBEAT_DIR=" + str(shared / "hyperscope" / "heartbeats")
        in (folder / "taskprolog.sh").read_text()
    )
    if spank.HEADER.is_file():  # the plugin, built here and put beside it
        assert f"PlugStackConfig={folder / 'plugstack.conf'}" in done.stdout.splitlines()
        plug = (folder / "plugstack.conf").read_text()
        (so,) = folder.glob("hyperscope_auto_resume-*.so")
        log = shared / "hyperscope" / "auto-resume" / "prod-1700000000" / "auto-resume.log"
        assert plug == f"required {so} scontrol=scontrol conf=/etc/slurm/slurm.conf log={log}\n"
        assert "every node must match" in done.stderr
    assert ClusterState.load(d).notes == []  # the cluster's record is unchanged

    local = run_cli(home, "hooks", "nope")
    assert local.returncode != 0 and "nope" in local.stdout + local.stderr


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYPERSCOPE_HOME": str(home), "COLUMNS": "300"}
    argv = [sys.executable, "-m", "hyperscope", "cluster", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
