"""The jobs catalog: filters, statuses, and several processes writing at once."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from hyperscope import JobNotFound, JobStatus, Store, UsageError
from hyperscope.store.catalog import Catalog, ProfileRef


def _ref(pid: str, events: int = 1) -> ProfileRef:
    return ProfileRef(pid, 0, time.time_ns(), "import", events, 1, 100, "test")


def test_jobs_filter_by_name_status_and_creation_time(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    old = 1_700_000_000 * 10**9
    cat.add_profile("resnet-a", _ref("p1"), status=JobStatus.COMPLETED, nodes=["n1"], created_ns=old)
    cat.add_profile("resnet_b", _ref("p2"), status=JobStatus.FAILED, nodes=["n2"], created_ns=old + 10**12)
    cat.add_profile("llama", _ref("p3"), status=JobStatus.IN_PROGRESS, nodes=[], created_ns=old + 2 * 10**12)
    assert [j.name for j in cat.jobs(search="resnet")] == ["resnet_b", "resnet-a"]
    assert [j.name for j in cat.jobs(search="t_b")] == ["resnet_b"]  # '_' is literal, not a wildcard
    assert [j.name for j in cat.jobs(status=JobStatus.FAILED)] == ["resnet_b"]
    assert [j.name for j in cat.jobs(since_ns=old + 1)] == ["llama", "resnet_b"]
    assert cat.job("llama").status is JobStatus.IN_PROGRESS
    cat.set_status("llama", JobStatus.STOPPED, "stopped by user")
    assert cat.job("llama").status is JobStatus.STOPPED
    assert cat.job(str(cat.job("llama").id)).name == "llama"  # by number too


def test_second_profile_joins_the_job_and_merges_nodes(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    cat.add_profile("j", _ref("p1"), status=JobStatus.COMPLETED, nodes=["b"], created_ns=1)
    job = cat.add_profile("j", _ref("p2"), status=JobStatus.COMPLETED, nodes=["a"], created_ns=2)
    assert [p.id for p in job.profiles] == ["p1", "p2"]
    assert job.nodes == ["a", "b"]


def test_unknown_job_and_status_say_what_exists(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    with pytest.raises(JobNotFound, match="hyperscope jobs"):
        cat.job("nope")
    with pytest.raises(UsageError, match="InProgress, Completed, Failed, Stopped, Stopping"):
        JobStatus.parse("done")
    assert JobStatus.parse("completed") is JobStatus.COMPLETED


def _writer(path: str, worker: int, count: int) -> None:
    cat = Catalog(Path(path))
    for i in range(count):
        cat.add_profile(
            f"job-{i % 3}",
            _ref(f"w{worker}-{i}"),
            status=JobStatus.IN_PROGRESS,
            nodes=[f"n{worker}"],
            created_ns=time.time_ns(),
        )
    cat.close()


def test_several_processes_write_at_once(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    Catalog(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    jobs = Catalog(path).jobs()
    assert sorted(j.name for j in jobs) == ["job-0", "job-1", "job-2"]
    assert sum(len(j.profiles) for j in jobs) == 100
    assert all(j.nodes == ["n0", "n1", "n2", "n3"] for j in jobs)


def _open_at(path: str, start: float, worker: int) -> None:
    while time.time() < start:
        pass
    cat = Catalog(Path(path))
    cat.add_profile("job", _ref(f"w{worker}"), status=JobStatus.IN_PROGRESS, nodes=[], created_ns=1)
    cat.close()


def test_processes_creating_the_catalog_at_the_same_moment(tmp_path: Path) -> None:
    """The ranks of a run open a catalog that does not exist yet, all at once."""
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = tmp_path / f"new-{attempt}.sqlite"
        start = time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(str(path), start, w)) for w in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 6
        assert len(Catalog(path).job("job").profiles) == 6


def test_remove_deletes_files_and_catalog_rows(store: Store, synth_job: list[Path]) -> None:
    store.import_traces(synth_job[:1], "one")
    profile_dir = store.profile("one").path
    assert profile_dir.exists()
    store.remove("one")
    assert not profile_dir.exists()
    assert store.jobs() == []
    with pytest.raises(JobNotFound):
        store.remove("one")
