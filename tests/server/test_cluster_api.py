"""``/api/clusters`` over a cluster recorded on a real local cluster (tests/data/metrics: its state,
Slurm's outputs, agent.log, heartbeats and attempts); an unknown name is a 404, never a path. The
routes on a live cluster, through the UI: tests/ui/test_cluster_page.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope.capture import request as rq
from hyperscope.cluster.fleet import Beat, Snapshot
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
        "replacements": 0, "last_action": "", "straggler": "",
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


def test_each_ranks_straggler_score_and_the_agents_verdict(tmp_path: Path) -> None:
    base = recorded()
    beats = [
        Beat("1", 0, 90, base.now_ns, 100_000_000, "workers-1"),
        Beat("1", 1, 60, base.now_ns, 300_000_000, "workers-2"),
    ]
    log = [*base.log, {"kind": "straggler", "job": "1", "rank": 1, "phase": "decided", "reason": "slow"}]
    body = _client(tmp_path, dataclasses.replace(base, beats=beats, log=log)).get("/api/clusters/rs").json()
    assert body["stragglers"] == [
        {"job": "1", "rank": 0, "node": "workers-1", "step_s": 0.1, "median_s": 0.3,
         "score": pytest.approx(-2 / 3), "named": False},
        {"job": "1", "rank": 1, "node": "workers-2", "step_s": 0.3, "median_s": 0.1,
         "score": pytest.approx(2.0), "named": True},
    ]  # fmt: skip
    assert {n["node"]: n["straggler"] for n in body["nodes"]}["workers-2"] == ""  # state.json's own


def test_profile_now_takes_only_json_and_says_why_a_job_cannot_be_captured(tmp_path: Path) -> None:
    client = _client(tmp_path, recorded())
    path = tmp_path / "home" / "clusters" / "rs" / "cluster.json"
    state = json.loads(path.read_text())
    state["shared_dir"], state["slurm_conf"] = str(tmp_path / "shared"), str(tmp_path / "no-slurm.conf")
    path.write_text(json.dumps(state))
    # what a page of another site can send without a preflight: a form, or JSON called text/plain
    form = client.post("/api/clusters/rs/jobs/5/capture", content="steps=10",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert form.status_code in (400, 415), form.text
    plain = client.post("/api/clusters/rs/jobs/5/capture", content='{"steps": 3}',
                        headers={"Content-Type": "text/plain"})  # fmt: skip
    assert plain.status_code in (400, 415), plain.text
    assert client.post("/api/clusters/nope/jobs/5/capture", json={"steps": 3}).status_code == 404
    bad = client.post("/api/clusters/rs/jobs/5/capture", json={"steps": 0})
    assert bad.status_code == 400 and "steps" in bad.text
    # a job whose ranks stopped answering a minute ago (a frozen process): said, nothing asked
    control = tmp_path / "shared" / "hyperscope" / "control"
    gone = rq.Presence("slurm-5", 0, 2, "workers-1", 4242, ("5",), 120, time.time_ns() - 60 * 10**9,
                       10**8, "", "")  # fmt: skip
    rq.write_atomic(rq.Paths(control).live(gone.key, 0), gone.to_json())
    stale = client.post("/api/clusters/rs/jobs/5/capture", json={"steps": 3})
    assert stale.status_code == 409, stale.text
    assert (
        "job '5' is not running: its ranks last answered 60 s ago (rank 0, step 120, on workers-1)"
        in (stale.json()["detail"])
    )
    assert not (control / rq.REQUESTS_DIR).exists()  # no request was left for anyone to read
