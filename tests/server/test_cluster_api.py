"""``/api/clusters`` over a cluster recorded on a real local cluster (tests/data/metrics: its state,
Slurm's outputs, agent.log, heartbeats and attempts); an unknown name is a 404, never a path. The
routes on a live cluster, through the UI: tests/ui/test_cluster_page.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from fastapi.testclient import TestClient

from hyperscope.cluster.fleet import Snapshot
from hyperscope.server import create_app
from tests.metrics.test_families import recorded

LOCAL = "http://127.0.0.1:8321"
DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def _client(tmp_path: Path, snap: Snapshot) -> TestClient:
    home = tmp_path / "home"
    d = home / "clusters" / "rs"
    d.mkdir(parents=True)
    shutil.copy(DATA / "cluster.json", d / "cluster.json")
    app = create_app(home, static_dir=tmp_path, observe_cluster=lambda h, name: snap)
    return TestClient(app, base_url=LOCAL)


def test_nodes_spares_decisions_and_jobs_with_goodput(tmp_path: Path) -> None:
    client = _client(tmp_path, recorded())
    listed = client.get("/api/clusters").json()
    assert listed == {
        "clusters": [{"name": "rs", "provider": "local", "status": "InService", "nodes": 3, "spares": 1}]
    }
    body = client.get("/api/clusters/rs").json()
    assert body["slurm_error"] == ""
    nodes = {n["node"]: n for n in body["nodes"]}
    assert nodes["workers-3"] == {
        "node": "workers-3", "group": "workers", "role": "worker", "spare": True, "status": "Running",
        "slurm_state": "idle+drain", "responding": True, "healthy": False, "reason": "disk swap, ticket 42",
        "replacements": 0, "last_action": "",
    }  # fmt: skip
    assert nodes["workers-1"]["healthy"] is True and nodes["controller-1"]["healthy"] is None
    assert [d["kind"] for d in body["decisions"]] == ["release", "leave", "start"]
    assert body["decisions"][1]["nodes"] == ["workers-3"]
    (job,) = body["jobs"]
    assert (job["id"], job["name"], job["state"], job["restarts"]) == (1, "rs-wrap", "RUNNING", 1)
    assert [a["end_state"] for a in job["attempts"]] == ["REQUEUED", ""]
    g = job["goodput"]
    assert g["attempts"] == 2 and 0.9 < g["goodput"] < 1
    assert abs(g["training_s"] + g["lost_s"] - g["wall_s"]) < 0.01


def test_slurm_silent_is_said_and_what_hyperscope_records_still_shown(tmp_path: Path) -> None:
    snap = dataclasses.replace(recorded(), show_node="", show_job="", slurm_error="slurmctld gave no answer")
    body = _client(tmp_path, snap).get("/api/clusters/rs").json()
    assert body["slurm_error"] == "slurmctld gave no answer"
    assert {n["node"]: n["healthy"] for n in body["nodes"]}["workers-3"] is None  # unknown, not healthy
    assert body["jobs"][0]["state"] == "InProgress"  # the catalog's, for a job Slurm did not list


def test_an_unknown_cluster_is_404_and_a_name_is_never_a_path(tmp_path: Path) -> None:
    client = _client(tmp_path, recorded())
    for name in ("nope", "..", "rs%2F..%2Frs", "..%2F..%2Fetc"):
        answer = client.get(f"/api/clusters/{name}")
        assert answer.status_code == 404, name
    assert "no cluster named 'nope'" in client.get("/api/clusters/nope").json()["detail"]
    empty = TestClient(create_app(tmp_path / "empty", static_dir=tmp_path), base_url=LOCAL)
    assert empty.get("/api/clusters").json() == {"clusters": []}
    assert json.loads(empty.get("/api/clusters/rs").text)["detail"].startswith("no cluster named")
