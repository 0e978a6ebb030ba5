"""The jobs list: search, status, creation time, sort, order and paging, all in SQL."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope import Store
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.server.jobs import CatalogReader, JobQuery, ProfileNotFound
from hyperscope.store.catalog import JobStatus, ProfileRef
from hyperscope.store.profile import Profile
from tests.server.conftest import Home, local

#: (name, created_ns, status, ranks)
JOBS = [
    ("resnet-run-1", 100, JobStatus.COMPLETED, 8),
    ("resnet-run-2", 200, JobStatus.FAILED, 8),
    ("ResNet-Run-3", 300, JobStatus.IN_PROGRESS, 16),
    ("llama_70b", 400, JobStatus.COMPLETED, 64),
    ("llama%70b", 500, JobStatus.STOPPED, 2),
    ("bert", 600, JobStatus.STOPPING, 1),
]


@pytest.fixture
def jobs_client(tmp_path: Path) -> Iterator[TestClient]:
    home = tmp_path / "home"
    with Store(home) as store:
        for n, (name, created, status, ranks) in enumerate(JOBS):
            ref = ProfileRef(f"{n:016x}", 0, created, "import", 10 * ranks, ranks, 1000, "test")
            store.catalog.add_profile(name, ref, status=status, nodes=[f"node-{n}"], created_ns=created)
        # a second profile for one job: latest_profile is the newer one
        ref = ProfileRef(f"{99:016x}", 0, 150, "import", 5, 8, 500, "test")
        store.catalog.add_profile("resnet-run-1", ref, status=JobStatus.COMPLETED, nodes=[], created_ns=150)
        for name, _, status, _ in JOBS:
            store.catalog.set_status(name, status)
    with local(create_app(home, static_dir=tmp_path / "none")) as client:
        yield client


def names(client: TestClient, query: str = "") -> list[str]:
    answer = client.get(f"/api/jobs?{query}")
    assert answer.status_code == 200, answer.text
    return [j["name"] for j in answer.json()["jobs"]]


def test_newest_first_by_default(jobs_client: TestClient) -> None:
    assert names(jobs_client) == [name for name, *_ in reversed(JOBS)]
    first = jobs_client.get("/api/jobs?search=resnet-run-1").json()["jobs"][0]
    assert first["profiles"] == 2 and first["latest_profile"] == f"{99:016x}"


def test_search_is_a_case_insensitive_substring(jobs_client: TestClient) -> None:
    assert names(jobs_client, "search=RESNET") == ["ResNet-Run-3", "resnet-run-2", "resnet-run-1"]
    assert names(jobs_client, "search=run-") == ["ResNet-Run-3", "resnet-run-2", "resnet-run-1"]
    # LIKE's wildcards are searched for as themselves
    assert names(jobs_client, "search=%25") == ["llama%70b"]
    assert names(jobs_client, "search=_") == ["llama_70b"]
    assert names(jobs_client, "search=nothing") == []


def test_status_filter_is_repeatable(jobs_client: TestClient) -> None:
    assert names(jobs_client, "status=Failed") == ["resnet-run-2"]
    both = names(jobs_client, "status=Completed&status=InProgress")
    assert both == ["llama_70b", "ResNet-Run-3", "resnet-run-1"]
    bad = jobs_client.get("/api/jobs?status=done")
    assert bad.status_code == 400 and "status" in bad.json()["detail"]


def test_created_window(jobs_client: TestClient) -> None:
    assert names(jobs_client, "created_after_ns=300&created_before_ns=500") == ["llama_70b", "ResNet-Run-3"]
    assert names(jobs_client, "created_after_ns=601") == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sort=name&order=asc",  # any case
         ["bert", "llama%70b", "llama_70b", "resnet-run-1", "resnet-run-2", "ResNet-Run-3"]),
        ("sort=ranks", ["llama_70b", "ResNet-Run-3", "resnet-run-2", "resnet-run-1", "llama%70b", "bert"]),
        ("sort=ranks&order=asc",  # ties by id, in the same order
         ["bert", "llama%70b", "resnet-run-1", "resnet-run-2", "ResNet-Run-3", "llama_70b"]),
        ("sort=created&order=asc", [name for name, *_ in JOBS]),
        ("sort=status&order=asc&search=resnet", ["resnet-run-1", "resnet-run-2", "ResNet-Run-3"]),
    ],
)  # fmt: skip
def test_sort_and_order(jobs_client: TestClient, query: str, expected: list[str]) -> None:
    assert names(jobs_client, query) == expected


def test_paging_keeps_the_total(jobs_client: TestClient) -> None:
    pages = [jobs_client.get(f"/api/jobs?limit=4&offset={o}").json() for o in (0, 4, 8)]
    assert [p["total"] for p in pages] == [6, 6, 6]
    assert [len(p["jobs"]) for p in pages] == [4, 2, 0]
    assert [j["name"] for p in pages for j in p["jobs"]] == names(jobs_client)
    filtered = jobs_client.get("/api/jobs?search=resnet&limit=1").json()
    assert filtered["total"] == 3 and len(filtered["jobs"]) == 1


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=1001", "offset=-1", "sort=weight", "order=up", "created_after_ns=soon"]
)
def test_bad_list_parameters_answer_400(jobs_client: TestClient, query: str) -> None:
    answer = jobs_client.get(f"/api/jobs?{query}")
    assert answer.status_code == 400
    assert query.split("=")[0] in answer.json()["detail"]


def test_job_named_like_a_number_wins_over_that_number(jobs_client: TestClient, tmp_path: Path) -> None:
    assert jobs_client.get("/api/jobs/1").json()["name"] == "resnet-run-1"
    assert jobs_client.get("/api/jobs/bert").json()["profile_list"][0]["ranks"] == 1
    assert jobs_client.get("/api/jobs/99999999999999999999999").status_code == 404


@pytest.mark.parametrize("sort", ["created", "name", "status", "ranks", "events", "size"])
def test_every_page_of_every_sort_is_a_slice_of_the_whole_sorted_list(
    jobs_client: TestClient, sort: str
) -> None:
    """Plain sorts cut the page before looking up each job's newest profile: the same jobs, the
    same fields, in the same order as the whole list cut afterwards."""
    for order in ("asc", "desc"):
        for search in ("", "&search=run"):
            whole = jobs_client.get(f"/api/jobs?sort={sort}&order={order}{search}&limit=100").json()["jobs"]
            pages = [
                job
                for offset in range(0, 7, 2)
                for job in jobs_client.get(
                    f"/api/jobs?sort={sort}&order={order}{search}&limit=2&offset={offset}"
                ).json()["jobs"]
            ]
            assert pages == whole and len(whole) == (3 if search else 6)
    latest = {j["name"]: j["latest_profile"] for j in whole}
    assert latest["resnet-run-1"] == f"{99:016x}"  # the newer of its two profiles, on every path


def test_a_kept_catalog_connection_sees_new_jobs_and_a_store_made_anew(tmp_path: Path) -> None:
    """The reader keeps one connection per thread: it must still see a writer's commits, and a
    catalog removed and created again at the same path."""
    home = tmp_path / "home"

    def add(name: str, n: int) -> None:
        with Store(home) as store:
            ref = ProfileRef(f"{n:016x}", 0, n, "import", 1, 1, 10, "test")
            store.catalog.add_profile(name, ref, status=JobStatus.COMPLETED, nodes=[], created_ns=n)

    add("first", 1)
    reader = CatalogReader(home)
    assert [j.name for j in reader.jobs(JobQuery()).jobs] == ["first"]
    kept = reader._local.db[0]
    add("second", 2)  # committed by another connection while the reader's stays open
    assert [j.name for j in reader.jobs(JobQuery()).jobs] == ["second", "first"]
    assert reader._local.db[0] is kept  # the same connection, not a new one per request
    shutil.rmtree(home)
    add("anew", 3)
    assert [j.name for j in reader.jobs(JobQuery()).jobs] == ["anew"]
    assert reader.profile(f"{3:016x}").job.name == "anew"


def test_a_kept_profile_look_up_follows_every_commit(tmp_path: Path) -> None:
    """A profile's look-up is answered again from the thread's last one until anything is
    committed: a job that finishes stops being live, a removed one is not found."""
    home = tmp_path / "home"
    pid = f"{7:016x}"
    with Store(home) as store:
        ref = ProfileRef(pid, 0, 7, "capture", 1, 1, 10, "test")
        store.catalog.add_profile("running", ref, status=JobStatus.IN_PROGRESS, nodes=[], created_ns=7)
    reader = CatalogReader(home)
    first = reader.profile(pid)
    assert first.live and first.job.status is JobStatus.IN_PROGRESS
    assert reader.profile(pid) is first  # nothing committed since: the kept answer
    with Store(home) as store:
        store.catalog.set_status("running", JobStatus.COMPLETED)
    done = reader.profile(pid)
    assert not done.live and done.job.status is JobStatus.COMPLETED
    with Store(home) as store:
        store.remove("running")
    with pytest.raises(ProfileNotFound):
        reader.profile(pid)


def test_a_growing_profiles_span_is_read_again_after_each_commit(tmp_path: Path, home: Home) -> None:
    """The jobs list reads a running job's span from its profile again only once something was
    committed (every flush of a capture records its progress in the catalog): in between, the
    page's last answer stands."""
    root = tmp_path / "home"
    with Store(root) as store:
        ref = ProfileRef(home.h200, 0, 1, "capture", 10, 1, 100, "test")
        store.catalog.add_profile("running", ref, status=JobStatus.IN_PROGRESS, nodes=[], created_ns=1)
    reader = CatalogReader(root)
    assert reader.jobs(JobQuery()).jobs[0].duration_ns is None  # nothing written yet
    shutil.copytree(profile_dir(home.path, home.h200), profile_dir(root, home.h200))  # a flush's parts
    assert reader.jobs(JobQuery()).jobs[0].duration_ns is None  # not committed yet: not read again
    with Store(root) as store:  # the flush's commit
        store.catalog.set_status("running", JobStatus.IN_PROGRESS, "step 10")
    meta = Profile.open(profile_dir(home.path, home.h200)).meta
    assert meta.ts_max_ns is not None and meta.ts_min_ns is not None
    assert reader.jobs(JobQuery()).jobs[0].duration_ns == meta.ts_max_ns - meta.ts_min_ns
