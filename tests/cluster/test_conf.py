"""slurm.conf, gres.conf and the resource config as written from a spec (no daemons, no root)."""

from __future__ import annotations

import json
from pathlib import Path

from hyperscope.cluster.conf import gres_conf, resource_config, slurm_conf
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import ClusterState, NodeState

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster_specs"


def _state(spec: ClusterSpec) -> ClusterState:
    state = ClusterState(
        name=spec.name, provider="local", status="Creating", dir="/h/clusters/tiny", spec_path="/s.yaml",
        spec_digest="x", slurm_conf="/h/clusters/tiny/etc/slurm.conf", shared_dir=str(spec.shared_dir),
        controller="controller-1", partition=spec.slurm.partition, ctld_port=20000, run_dir="/run/hs/tiny-1",
    )  # fmt: skip
    port = 20001
    for g, n in spec.all_nodes():
        worker = g.role == "worker"
        state.nodes.append(NodeState(n, g.name, g.role, g.is_spare(n), worker, port=port if worker else None))
        port += worker
    return state


def test_slurm_conf_nodes_partition_and_timeouts() -> None:
    spec = load_spec(DATA / "valid.yaml")
    text = slurm_conf(spec, _state(spec))
    lines = text.splitlines()
    assert "ClusterName=tiny" in lines and "SlurmctldPort=20000" in lines
    assert "AuthInfo=socket=/run/hs/tiny-1/munge/munge.sock,cred_expire=5" in lines
    assert "SlurmdSpoolDir=/run/hs/tiny-1/spool/%n" in lines
    assert "MessageTimeout=2" in lines and "SlurmdTimeout=5" in lines and "GresTypes=gpu" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        f"NodeName=workers-{i} NodeHostname=localhost NodeAddr=127.0.0.1 Port={20000 + i} "
        "CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN"
        for i in (1, 2, 3)
    ]
    # the spare (workers-3) runs a slurmd but is in no partition until it replaces a node
    assert lines[-1] == "PartitionName=train Nodes=workers-1,workers-2 Default=YES MaxTime=INFINITE State=UP"


def test_gres_conf_one_line_per_gpu_node() -> None:
    spec = load_spec(DATA / "valid.yaml")
    assert gres_conf(spec, _state(spec)).splitlines() == [
        f"NodeName=workers-{i} Name=gpu File=/h/clusters/tiny/dev/workers-{i}/nvidia[0-1]" for i in (1, 2, 3)
    ]


def test_resource_config_lists_groups_and_instances() -> None:
    spec = load_spec(DATA / "valid.yaml")
    doc = json.loads(resource_config(_state(spec)))
    assert (
        doc["ClusterName"] == "tiny" and doc["Controller"] == "controller-1" and doc["Partition"] == "train"
    )
    workers = doc["InstanceGroups"][2]
    assert workers["Role"] == "worker"
    assert [(i["Name"], i["Spare"], i["SlurmNode"]) for i in workers["Instances"]] == [
        ("workers-1", False, True),
        ("workers-2", False, True),
        ("workers-3", True, True),
    ]
    assert doc["InstanceGroups"][1]["Instances"] == [{"Name": "login-1", "Spare": False, "SlurmNode": False}]
