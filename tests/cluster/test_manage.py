"""describe / list-nodes / shell on recorded state alone (a Failed cluster: no daemons, no Slurm),
and the requirement check; none of this needs root."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperscope.cluster import manage
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.state import ClusterError, ClusterNotFound, ClusterState, NodeState


def _failed_cluster(home: Path) -> ClusterState:
    d = home / "clusters" / "f"
    d.mkdir(parents=True)
    state = ClusterState(
        name="f", provider="local", status="Failed", dir=str(d), spec_path="/s.yaml", spec_digest="x",
        slurm_conf=str(d / "etc" / "slurm.conf"), shared_dir="/shared", controller="controller-1",
        partition="dev", ctld_port=1, error="on_create.sh exited with status 3 on node workers-1",
    )  # fmt: skip
    state.nodes = [
        NodeState("controller-1", "controller", "controller", False, False, status="Running"),
        NodeState("workers-1", "workers", "worker", False, True, status="Failed", port=2),
        NodeState("workers-2", "workers", "worker", True, True, port=3),
    ]
    state.save()
    return state


def test_describe_and_list_nodes_of_a_failed_cluster(tmp_path: Path) -> None:
    _failed_cluster(tmp_path)
    d = manage.describe("f", tmp_path)
    assert (d.state.status, d.running, d.slurm_version) == ("Failed", False, "")
    assert d.groups == [("controller", "controller", 1, 0), ("workers", "worker", 1, 1)]
    rows = {r.node: r for r in manage.list_nodes("f", tmp_path)}
    assert (rows["workers-1"].status, rows["workers-1"].slurm_state, rows["workers-1"].health) == (
        "Failed",
        "unknown",
        "unknown",
    )
    assert rows["controller-1"].slurm_state == "-" and rows["workers-2"].spare
    assert [s.name for s in manage.list_clusters(tmp_path)] == ["f"]
    with pytest.raises(ClusterError, match="is Failed, not InService"):
        manage.shell_env("f", tmp_path)
    with pytest.raises(ClusterError, match="nothing submitted"):
        manage.submit("f", tmp_path, ["--wrap", "true"])


def test_unknown_cluster_and_provider(tmp_path: Path) -> None:
    with pytest.raises(ClusterNotFound, match="no cluster named 'x'"):
        manage.describe("x", tmp_path)
    assert manage.delete("x", tmp_path) is False
    with pytest.raises(ClusterError, match="unknown provider 'gcp'; use local, ssh or existing"):
        manage.provider_for("gcp", tmp_path)


def test_missing_requirements_names_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    why = missing_requirements()
    assert why is not None
    assert "slurm-wlm munge" in why or "needs root" in why
