"""The ssh provider's controllers and health loops as pure text: slurm.conf with a backup controller
on its own host, the hosts' health-check wrapper, the step that starts a node's loop; and the
liveness probe the agent runs on a controller host, run here on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from hyperscope.cluster import conf, ssh_ctld, ssh_health
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import ClusterState, NodeState, Proc, start_time

EXAMPLE_LIFECYCLE = Path(__file__).resolve().parents[2] / "examples" / "lifecycle"


def _state(tmp: Path) -> tuple[ClusterSpec, ClusterState]:
    shutil.copytree(EXAMPLE_LIFECYCLE, tmp / "lifecycle")
    doc = {
        "name": "lab", "provider": "ssh", "lifecycle_scripts": "lifecycle", "shared_dir": "shared",
        "slurm": {"backup_controller": "10.0.0.9"},
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": ["10.0.0.1"]},
            {"name": "workers", "role": "worker", "count": 2, "gpus_per_node": 4,
             "hosts": ["10.0.0.2", "10.0.0.3"]},
        ],
    }  # fmt: skip
    (tmp / "lab.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp / "lab.yaml")
    (tmp / "d" / "etc").mkdir(parents=True)
    state = ClusterState(
        name="lab", provider="ssh", status="Creating", dir=str(tmp / "d"), spec_path=str(tmp / "lab.yaml"),
        spec_digest="", slurm_conf="/srv/hs/lab/etc/slurm.conf", shared_dir=str(spec.shared_dir),
        controller="controller-1", partition="dev", ctld_port=6817, run_dir="/srv/hs/lab",
        backup_controller="bk", backup_host="10.0.0.9", ssh={"remote_dir": "/srv/hs", "python": "/opt/py"},
    )  # fmt: skip
    state.nodes = [
        NodeState("controller-1", "controller", "controller", False, False, host="10.0.0.1"),
        NodeState("workers-1", "workers", "worker", False, True, port=6818, host="10.0.0.2"),
        NodeState("workers-2", "workers", "worker", False, True, port=6819, host="10.0.0.3"),
    ]
    return spec, state


def test_slurm_conf_names_both_controllers_and_keeps_their_state_on_the_shared_directory(
    tmp_path: Path,
) -> None:
    spec, state = _state(tmp_path)
    names = {"controller-1": "c1", "workers-1": "w1", "workers-2": "w2"}
    text = conf.slurm_conf(spec, state, root=Path(state.run_dir), hostnames=names)
    assert "SlurmctldHost=c1(10.0.0.1)\nSlurmctldHost=bk(10.0.0.9)\n" in text
    assert f"StateSaveLocation={Path(state.shared_dir) / 'slurm-state' / 'lab'}\n" in text
    assert "SlurmctldPidFile=/srv/hs/lab/state/slurmctld.pid\n" in text  # each host's own
    assert "NoCtldInAddrAny" not in text  # the local provider's (two on one machine) only
    assert ssh_ctld.every_host(state) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.9"]
    assert ssh_ctld.controller_hosts(state) == ["10.0.0.1", "10.0.0.9"]


def test_the_hosts_wrapper_and_loop_step(tmp_path: Path) -> None:
    spec, state = _state(tmp_path)
    lines = ssh_health.install(spec, state)
    assert (
        lines[0] == "HealthCheckProgram=/srv/hs/lab/etc/healthcheck.sh"
        and "HealthCheckNodeState=ANY" in lines
    )
    wrapper = (tmp_path / "d" / "etc" / "healthcheck.sh").read_text()
    assert "setsid -f /opt/py -m hyperscope.health --loop 5 " in wrapper  # ssh.python
    assert (
        "faults=/srv/hs/lab/faults/$node.json" in wrapper
        and "export HYPERSCOPE_CLUSTER_DIR=/srv/hs/lab" in wrapper
    )
    assert "--gpu-devices /dev" in wrapper and "workers-1|workers-2) gpus=4" in wrapper
    assert (
        "agent-watchdog" not in wrapper and "hyperscope agent" not in wrapper
    )  # the agent is not on the hosts
    step = ssh_health.start_loop_command(state, "workers-2", 4242)
    assert step.startswith("[ -x /srv/hs/lab/etc/healthcheck.sh ] || exit 0; env SLURMD_NODENAME=workers-2 ")
    assert "HYPERSCOPE_SLURMD_PID=4242 " in step and "HYPERSCOPE_SLURMD_NODE=workers-2 " in step
    assert step.endswith("setsid /srv/hs/lab/etc/healthcheck.sh </dev/null >/dev/null 2>&1")


def test_the_liveness_probe_names_only_processes_that_still_run_with_their_start_time() -> None:
    me = os.getpid()
    began = start_time(me)
    assert began is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    probe = ssh_ctld.alive_command(
        [Proc("slurmctld", me, began), Proc("munged", me, began + 1), Proc("slurmctld-backup", dead.pid, 1)]
    )
    out = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, check=True)  # as over ssh
    assert out.stdout.split() == [str(me)]
