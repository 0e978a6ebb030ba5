"""Every endpoint of docs/ui-api.md, in-process, against the analyses they serve."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from hyperscope import Store
from hyperscope.analysis import Scope, annotation_histogram, annotation_stats, dashboard, to_json
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.store.catalog import JobStatus
from hyperscope.store.profile import Profile
from tests.server.conftest import H200, H200_PROFILE, Home, local

DASHBOARD_TABLES = {
    "gpu_time", "gpu_time_job", "kernel_types", "idle", "kernels", "precision", "gpu_activity",
    "memory_ops", "launch_latency", "latency_outliers", "latency_histogram", "steps", "steps_job",
    "step_histogram", "annotations", "cpu_time", "gpu_utilization", "gpu_utilization_nodes",
    "cpu_utilization", "ranks",
}  # fmt: skip


def expected_tables(home: Path, profile_id: str, scope: Scope | None = None, **kw: int) -> dict[str, Any]:
    """What the analysis library gives, through the same JSON encoding (NaN → null)."""
    tables = dashboard(Profile.open(profile_dir(home, profile_id)), scope or Scope(), **kw)
    return dict(orjson.loads(orjson.dumps(to_json(tables))))


def test_jobs_lists_every_job_newest_first(client: TestClient, home: Home) -> None:
    body = client.get("/api/jobs").json()
    assert body["total"] == 3
    assert [j["name"] for j in body["jobs"]] == ["ground-truth", "synth-multi", "h200-transformer"]
    h200 = body["jobs"][2]
    assert h200["latest_profile"] == H200_PROFILE and h200["profiles"] == 1
    assert h200["status"] == "Completed" and h200["nodes"] == ["vm"] and h200["ranks"] == 1
    assert set(h200) == {
        "id", "name", "status", "created_ns", "updated_ns", "nodes", "ranks", "message",
        "latest_profile", "profiles", "events", "bytes", "duration_ns",
    }  # fmt: skip
    # the newest profile's size and traced span, for the jobs table
    assert h200["events"] == 55786 and h200["bytes"] > 0
    meta = Profile.open(profile_dir(home.path, H200_PROFILE)).meta
    assert meta.ts_max_ns is not None and meta.ts_min_ns is not None
    assert h200["duration_ns"] == meta.ts_max_ns - meta.ts_min_ns
    by_events = client.get("/api/jobs?sort=events&order=asc").json()["jobs"]
    assert [j["events"] for j in by_events] == sorted(j["events"] for j in body["jobs"])
    by_size = client.get("/api/jobs?sort=size&order=desc").json()["jobs"]
    assert [j["bytes"] for j in by_size] == sorted((j["bytes"] for j in body["jobs"]), reverse=True)
    multi = body["jobs"][1]
    assert multi["nodes"] == ["node-a", "node-b"] and multi["ranks"] == 4


def test_job_by_name_or_id_lists_its_profiles(client: TestClient, home: Home) -> None:
    by_name = client.get("/api/jobs/synth-multi").json()
    by_id = client.get(f"/api/jobs/{by_name['id']}").json()
    assert by_name == by_id
    assert [p["id"] for p in by_name["profile_list"]] == [home.multi]
    ref = by_name["profile_list"][0]
    assert ref["source"] == "import" and ref["ranks"] == 4 and ref["events"] > 0 and ref["bytes"] > 0
    assert client.get("/api/jobs/no-such-job").status_code == 404
    assert "no-such-job" in client.get("/api/jobs/no-such-job").json()["detail"]


def test_profile_information_panel(client: TestClient, home: Home) -> None:
    body = client.get(f"/api/profiles/{home.h200}").json()
    assert body["id"] == home.h200 and body["job"] == "h200-transformer" and body["status"] == "Completed"
    assert body["source"] == "capture" and body["events"] == 55786 and body["world_size"] == 1
    assert body["ts_min_ns"] < body["ts_max_ns"]
    (rank,) = body["ranks"]
    assert rank["devices"] == ["NVIDIA H200"] and rank["node"] == "vm" and rank["complete"] is True
    assert [g["index"] for g in rank["gpus"]] == [0] and rank["gpus"][0]["name"] == "NVIDIA H200"
    assert body["hosts"] == ["vm"]
    assert any("perf counters" in n for n in rank["notes"])
    assert body["settings"]["sample_interval_s"] == 0.1  # the capture's ProfilerConfig
    multi = client.get(f"/api/profiles/{home.multi}").json()
    assert [r["rank"] for r in multi["ranks"]] == [0, 1, 2, 3] and multi["settings"] == {}
    assert [r["node"] for r in multi["ranks"]] == ["node-a", "node-a", "node-b", "node-b"]
    # each generated trace lists 8 visible GPUs; rank r ran on GPU r
    assert [len(r["devices"]) for r in multi["ranks"]] == [8] * 4
    assert [[g["index"] for g in r["gpus"]] for r in multi["ranks"]] == [[0], [1], [2], [3]]
    assert multi["hosts"] == ["node-a", "node-b"]


def test_filters_offer_what_the_profile_has(client: TestClient, home: Home) -> None:
    h200 = client.get(f"/api/profiles/{home.h200}/filters").json()
    assert h200 == {
        "nodes": ["vm"],
        "ranks": [0],
        "steps": {"min": 0, "max": 39},
        "annotations": sorted(h200["annotations"], key=lambda n: h200["annotations"].index(n)),
        "rank_nodes": {"0": ["vm"]},
    }
    assert {"forward", "backward", "optimizer", "data"} <= set(h200["annotations"])
    multi = client.get(f"/api/profiles/{home.multi}/filters").json()
    assert multi["nodes"] == ["node-a", "node-b"] and multi["ranks"] == [0, 1, 2, 3]
    assert multi["steps"] is not None and multi["steps"]["max"] - multi["steps"]["min"] == 3
    assert multi["rank_nodes"] == {"0": ["node-a"], "1": ["node-a"], "2": ["node-b"], "3": ["node-b"]}


@pytest.mark.parametrize("profile", ["h200", "multi"])
def test_dashboard_equals_the_analysis(client: TestClient, home: Home, profile: str) -> None:
    pid = getattr(home, profile)
    body = client.get(f"/api/profiles/{pid}/dashboard").json()
    assert set(body["tables"]) == DASHBOARD_TABLES
    assert body["tables"] == expected_tables(home.path, pid)
    assert body["scope"] == {"nodes": None, "ranks": None, "steps": None}
    assert body["cached"] is False and body["elapsed_ms"] > 0


@pytest.mark.parametrize(
    ("query", "scope", "echo"),
    [
        ("rank=3&rank=1&rank=3", Scope(ranks=(1, 3)), {"nodes": None, "ranks": [1, 3], "steps": None}),
        ("node=node-b", Scope(nodes=("node-b",)), {"nodes": ["node-b"], "ranks": None, "steps": None}),
        ("steps=1:2", Scope(steps=(1, 2)), {"nodes": None, "ranks": None, "steps": [1, 2]}),
        ("steps=2&rank=0", Scope(ranks=(0,), steps=(2, 2)), {"nodes": None, "ranks": [0], "steps": [2, 2]}),
    ],
)
def test_dashboard_filters(client: TestClient, home: Home, query: str, scope: Scope, echo: Any) -> None:
    body = client.get(f"/api/profiles/{home.multi}/dashboard?{query}&top_k=3&buckets=7").json()
    assert body["scope"] == echo
    assert body["tables"] == expected_tables(home.path, home.multi, scope, top_k=3, buckets=7)
    ranks = {row["group"] for row in body["tables"]["gpu_time"]["rows"]}
    assert ranks == {str(r) for r in (scope.ranks or ((2, 3) if scope.nodes else (0, 1, 2, 3)))}


def test_dashboard_is_cached_for_finished_jobs(client: TestClient, home: Home) -> None:
    url = f"/api/profiles/{home.multi}/dashboard?rank=0"
    first, second = client.get(url).json(), client.get(url).json()
    assert (first["cached"], second["cached"]) == (False, True)
    assert first["tables"] == second["tables"]
    assert client.get(url + "&rank=0").json()["cached"] is True  # the same scope, said twice
    assert client.get(url + "&top_k=4").json()["cached"] is False
    # a cached answer is spliced from tables compressed once (server/_gzip.py): the same JSON
    zipped = client.get(url, headers={"Accept-Encoding": "gzip"})
    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    assert zipped.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    for answer in (zipped.json(), plain.json()):
        assert answer["cached"] is True and answer["elapsed_ms"] >= 0
        assert {k: answer[k] for k in ("tables", "scope")} == {k: first[k] for k in ("tables", "scope")}


def test_running_jobs_show_new_data_on_refresh(tmp_path: Path) -> None:
    """A capture still InProgress writes parts as it goes: every request reads what is there."""
    home = tmp_path / "home"
    shutil.copytree(H200, home)
    with Store(home) as store:
        store.catalog.set_status("h200-transformer", JobStatus.IN_PROGRESS)
    events = profile_dir(home, H200_PROFILE) / "events"
    part = max(events.glob("*.parquet"), key=lambda p: p.stat().st_size)  # the one with the kernels
    later = tmp_path / part.name
    shutil.move(part, later)  # not written yet
    app = create_app(home, static_dir=tmp_path / "none")
    with local(app) as client:
        url = f"/api/profiles/{H200_PROFILE}/dashboard"
        before = client.get(url).json()
        shutil.move(later, events / later.name)  # the next flush
        after = client.get(url).json()
        assert (before["cached"], after["cached"]) == (False, False)
        # the last row of the kernel table counts every launch
        old, new = (b["tables"]["kernels"]["rows"][-1]["launches"] for b in (before, after))
        assert after["tables"] == expected_tables(home, H200_PROFILE)
        assert new > old
        assert "still being written" in " ".join(client.get(f"/api/profiles/{H200_PROFILE}").json()["notes"])


def test_annotation_histogram(client: TestClient, home: Home) -> None:
    profile = Profile.open(profile_dir(home.path, home.h200))
    body = client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram?bins=5").json()
    stats = annotation_stats(profile, Scope(), name="forward").to_dict()["rows"][0]
    assert body["stats"] == orjson.loads(orjson.dumps(stats)) and body["stats"]["count"] == 40
    assert body["histogram"] == annotation_histogram(profile, "forward", Scope(), bins=5).to_dict()
    assert sum(b["count"] for b in body["histogram"]["rows"]) == 40
    scoped = client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram?steps=3:4").json()
    in_steps = annotation_stats(profile, Scope(steps=(3, 4)), name="forward").rows[0]
    assert scoped["stats"]["count"] == in_steps.count


def test_annotation_unknown_or_out_of_scope(client: TestClient, home: Home) -> None:
    missing = client.get(f"/api/profiles/{home.h200}/annotations/no%2Fsuch/histogram")
    assert missing.status_code == 404 and "no/such" in missing.json()["detail"]
    body = client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram?steps=900").json()
    assert body["stats"] is None and body["histogram"]["rows"] == []
    assert any("none in scope" in n for n in body["histogram"]["notes"])


@pytest.mark.parametrize(
    ("path", "word"),
    [
        ("dashboard?steps=x", "steps"),
        ("dashboard?steps=7:3", "steps"),
        ("dashboard?rank=abc", "rank"),
        ("dashboard?rank=99", "rank 99"),
        ("dashboard?node=nowhere", "nowhere"),
        ("dashboard?top_k=0", "top_k"),
        ("dashboard?buckets=100000", "buckets"),
        ("annotations/forward/histogram?bins=0", "bins"),
    ],
)
def test_bad_parameters_answer_400(client: TestClient, home: Home, path: str, word: str) -> None:
    answer = client.get(f"/api/profiles/{home.multi}/{path}")
    if path.startswith("annotations"):
        answer = client.get(f"/api/profiles/{home.h200}/{path}")
    assert answer.status_code == 400
    assert word in answer.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/profiles/0123456789abcdef",  # well formed, not in the catalog
        "/api/profiles/13D6A1A68216D320",  # upper case is another id
        "/api/profiles/13d6a1a68216d3200",
        "/api/profiles/..%2F..%2Fetc",
        "/api/profiles/..%2F..%2Fetc/dashboard",
        "/api/profiles/%2e%2e%2f%2e%2e%2fcatalog.sqlite/filters",
        "/api/nothing-here",
    ],
)
def test_unknown_or_malformed_ids_answer_404(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/json"
    assert set(answer.json()) == {"detail"}


def test_openapi_documents_every_endpoint(client: TestClient) -> None:
    schema = client.get("/api/openapi.json").json()
    assert set(schema["paths"]) == {
        "/api/jobs",
        "/api/jobs/{id_or_name}",
        "/api/profiles/{profile_id}",
        "/api/profiles/{profile_id}/filters",
        "/api/profiles/{profile_id}/dashboard",
        "/api/profiles/{profile_id}/annotations/{name}/histogram",
        "/api/compare",
        "/api/profiles/{profile_id}/export",
        "/api/profiles/{profile_id}/tables/{table}",
        "/api/profiles/{profile_id}/memory",
        "/api/profiles/{profile_id}/collectives/waits",
        "/api/clusters",
        "/api/clusters/{name}",
        "/api/clusters/{name}/jobs/{job_id}/capture",
        *(
            f"/api/profiles/{{profile_id}}/timeline/{p}"
            for p in (
                "rows",
                "tile",
                "range",
                "event",
                "links",
                "flows",
                "search",
                "collective",
                "collectives",
            )
        ),
    }
    dashboard_answer = schema["paths"]["/api/profiles/{profile_id}/dashboard"]["get"]["responses"]
    assert dashboard_answer["200"]["content"]["application/json"]["schema"]["$ref"].endswith("DashboardOut")
    assert {"400", "401", "404", "413", "504"} <= set(dashboard_answer)
    assert {"DashboardOut", "JobListOut", "ProfileOut", "FiltersOut", "ClusterOut"} <= set(
        schema["components"]["schemas"]
    )
    assert client.get("/api/docs").status_code == 200


def test_large_answers_are_compressed(client: TestClient, home: Home) -> None:
    answer = client.get(f"/api/profiles/{home.multi}/dashboard", headers={"Accept-Encoding": "gzip"})
    assert answer.headers["content-encoding"] == "gzip"
    assert set(answer.json()["tables"]) == DASHBOARD_TABLES  # decoded by the client
    small = client.get("/api/jobs?limit=1", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers


def test_a_failed_job_whose_other_ranks_still_write_is_not_cached(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(H200, home)
    with Store(home) as store:
        ref = store.job("h200-transformer").profiles[0]
        store.catalog.open_capture("h200-transformer", ref, rank=1, node="vm", world_size=2)
        store.catalog.set_status("h200-transformer", JobStatus.FAILED, "rank 0 failed")
    with local(create_app(home, static_dir=tmp_path / "none")) as client:
        url = f"/api/profiles/{H200_PROFILE}/filters"
        assert client.get(url).status_code == client.get(url).status_code == 200
        dash = [client.get(f"/api/profiles/{H200_PROFILE}/dashboard").json()["cached"] for _ in range(2)]
        assert dash == [False, False]
        info = client.get(f"/api/profiles/{H200_PROFILE}").json()
        assert info["status"] == "Failed" and "rank 0 failed" in info["notes"]


def test_prewarm_computes_the_newest_finished_profile_at_start(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from hyperscope.schema.layout import profile_dir
    from hyperscope.server import prewarm
    from hyperscope.store.profile import Profile
    from hyperscope.timeline import index as timeline_index

    assert timeline_index.store(Profile.open(profile_dir(home.path, home.big)))  # as import does
    monkeypatch.setattr(prewarm, "REST_AT_MOST_S", 0.0)  # the filters and dashboard at once
    with local(create_app(home.path, static_dir=tmp_path, prewarm=1)) as client:
        for thread in threading.enumerate():
            if thread.name == "hyperscope-prewarm":
                thread.join(120)
        newest = client.get("/api/jobs?limit=1").json()["jobs"][0]["latest_profile"]
        assert newest == home.big
        assert client.get(f"/api/profiles/{home.big}/dashboard").json()["cached"] is True
        assert client.get(f"/api/profiles/{home.big}/dashboard?top_k=15&buckets=50").json()["cached"] is True
        assert client.get(f"/api/profiles/{home.multi}/dashboard").json()["cached"] is False  # only one
        assert client.get(f"/api/profiles/{home.big}/timeline/rows").json()["cached"] is True


def test_prewarm_answers_the_first_look_before_any_request_and_the_rest_once_idle(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile's information and timeline rows are computed before the first request is
    answered; the filters and dashboard only once a page has asked for a profile and then no
    request about one has come for ``IDLE_S``."""
    import threading
    import time

    from hyperscope.schema.layout import profile_dir
    from hyperscope.server import prewarm
    from hyperscope.store.profile import Profile
    from hyperscope.timeline import index as timeline_index

    assert timeline_index.store(Profile.open(profile_dir(home.path, home.big)))  # as import does
    monkeypatch.setattr(prewarm, "IDLE_S", 3600.0)  # never idle enough: the rest waits
    monkeypatch.setattr(prewarm, "REST_AT_MOST_S", 3600.0)
    app = create_app(home.path, static_dir=tmp_path, prewarm=1)
    with local(app) as client:
        assert client.get(f"/api/profiles/{home.big}/timeline/rows").json()["cached"] is True
        assert client.get(f"/api/profiles/{home.big}/dashboard").json()["cached"] is False
    monkeypatch.setattr(prewarm, "IDLE_S", 0.2)
    with local(create_app(home.path, static_dir=tmp_path, prewarm=1)) as client:
        assert client.get("/api/jobs").status_code == 200
        time.sleep(1.0)
        (warm,) = [t for t in threading.enumerate() if t.name == "hyperscope-prewarm"]
        assert warm.is_alive()  # no page has asked for a profile yet: the rest waits
        assert client.get(f"/api/profiles/{home.big}/timeline/rows").json()["cached"] is True
        warm.join(120)  # 0.2 s after that request, the rest
        assert not warm.is_alive()
        assert client.get(f"/api/profiles/{home.big}/dashboard").json()["cached"] is True


def test_the_server_only_reads_an_existing_store(tmp_path: Path) -> None:
    import hashlib

    home = tmp_path / "home"
    shutil.copytree(H200, home)

    def contents() -> dict[str, str]:
        files = [p for p in home.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))]
        return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}

    before = contents()
    with local(create_app(home, static_dir=tmp_path / "none", prewarm=1)) as client:
        for path in ("/api/jobs", "/api/jobs/1", f"/api/profiles/{H200_PROFILE}", "/nowhere"):
            assert client.get(path).status_code == 200
        for what in ("filters", "dashboard?rank=0", "annotations/data/histogram"):
            assert client.get(f"/api/profiles/{H200_PROFILE}/{what}").status_code == 200
    assert contents() == before


def test_a_new_store_is_created_empty(tmp_path: Path) -> None:
    with local(create_app(tmp_path / "new", static_dir=tmp_path / "none")) as client:
        assert client.get("/api/jobs").json() == {"total": 0, "jobs": []}
    assert (tmp_path / "new" / "catalog.sqlite").is_file()


def test_answers_match_their_documented_models(client: TestClient, home: Home) -> None:
    """The two endpoints that send pre-encoded JSON still answer what /api/openapi.json says."""
    from hyperscope.server.models import AnnotationHistogramOut, DashboardOut

    body = client.get(f"/api/profiles/{home.h200}/dashboard?steps=2:5").json()
    assert DashboardOut.model_validate(body).scope.steps == [2, 5]
    for query in ("", "?steps=900"):
        hist = client.get(f"/api/profiles/{home.h200}/annotations/forward/histogram{query}").json()
        AnnotationHistogramOut.model_validate(hist)


def test_a_dashboard_kept_beside_the_profile_is_served_without_computing(tmp_path: Path) -> None:
    from hyperscope.analysis import stored

    home = tmp_path / "home"
    shutil.copytree(H200, home)
    assert stored.precompute_job(home, "h200-transformer") is not None
    with Store(home) as store:
        profile = store.profile("h200-transformer")
    kept = stored.load_dashboard(profile)
    assert kept is not None
    kept["kernels"]["notes"].append("read from the stored answer")
    stored.save_dashboard(profile, kept)
    with local(create_app(home, static_dir=tmp_path / "none")) as client:
        whole = client.get(f"/api/profiles/{H200_PROFILE}/dashboard").json()
        scoped = client.get(f"/api/profiles/{H200_PROFILE}/dashboard?rank=0").json()
    assert "read from the stored answer" in whole["tables"]["kernels"]["notes"]
    assert "read from the stored answer" not in scoped["tables"]["kernels"]["notes"]  # computed
