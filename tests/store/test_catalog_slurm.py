"""Slurm jobs in the jobs catalog: one entry per (cluster, job id), joined with the job's own
profile, and old catalogs gain the columns without losing a row."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from hyperscope import JobStatus
from hyperscope.store.catalog import Catalog, ProfileRef

_OLD_SCHEMA = """
CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL, status TEXT NOT NULL,
    nodes TEXT NOT NULL DEFAULT '[]', ranks INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '');
INSERT INTO jobs(name, created_ns, updated_ns, status) VALUES ('old', 1, 1, 'Completed');
"""


def _upsert(
    cat: Catalog, cluster: str, jid: int | None, name: str, status: JobStatus, nodes: list[str]
) -> str:
    job = cat.upsert_slurm_job(
        cluster, jid, name=name, status=status, nodes=nodes, ranks=len(nodes), created_ns=5, message="m"
    )
    return job.name


def test_a_catalog_from_before_slurm_jobs_opens_and_keeps_its_rows(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "c.sqlite")
    db.executescript(_OLD_SCHEMA)
    db.close()
    cat = Catalog(tmp_path / "c.sqlite")
    assert [j.name for j in cat.jobs()] == ["old"] and cat.slurm_jobs("demo:1") == {}

    def columns() -> set[str]:
        with sqlite3.connect(tmp_path / "c.sqlite") as db:
            return {r[1] for r in db.execute("PRAGMA table_info(jobs)")}

    assert "slurm_job_id" not in columns()  # opening and reading write nothing
    _upsert(cat, "demo:1", 7, "demo-wrap-7", JobStatus.IN_PROGRESS, ["w-1"])
    assert {"slurm_cluster", "slurm_job_id"} <= columns()
    cat.close()
    again = Catalog(tmp_path / "c.sqlite")
    assert sorted(again.slurm_jobs("demo:1")) == [7]
    assert {j.name for j in again.jobs()} == {"old", "demo-wrap-7"}


def test_one_entry_per_slurm_job_updated_in_place(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    _upsert(cat, "demo:1", 3, "demo-wrap-3", JobStatus.IN_PROGRESS, [])
    first = cat.job("demo-wrap-3")
    same = _upsert(cat, "demo:1", 3, "demo-wrap-3", JobStatus.IN_PROGRESS, [])
    assert cat.job(same).updated_ns == first.updated_ns  # nothing new, nothing written
    _upsert(cat, "demo:1", 3, "ignored-once-known", JobStatus.COMPLETED, ["w-2", "w-1"])
    (job,) = cat.jobs()
    assert (job.name, job.status, job.nodes, job.ranks) == (
        "demo-wrap-3",
        JobStatus.COMPLETED,
        ["w-1", "w-2"],
        2,
    )


def test_a_recreated_cluster_reuses_job_ids_without_touching_old_entries(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    assert _upsert(cat, "demo:1", 1, "demo-wrap-1", JobStatus.COMPLETED, []) == "demo-wrap-1"
    assert _upsert(cat, "demo:2", 1, "demo-wrap-1", JobStatus.IN_PROGRESS, []) == "demo-wrap-1-2"
    assert cat.job("demo-wrap-1").status is JobStatus.COMPLETED
    assert [j.name for j in cat.slurm_jobs("demo:2").values()] == ["demo-wrap-1-2"]


def test_reserved_entry_profile_and_slurm_job_are_one_entry(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    name = _upsert(cat, "demo:1", None, "demo-train", JobStatus.IN_PROGRESS, [])  # before sbatch
    # the job starts at once and its capture opens the entry by name (HYPERSCOPE_JOB) ...
    ref = ProfileRef("p1", 0, time.time_ns(), "capture", 0, 0, 0, "test")
    cat.open_capture(name, ref, rank=0, node="w-1", world_size=1)
    # ... before submit records the job id that sbatch printed
    assert _upsert(cat, "demo:1", 9, name, JobStatus.IN_PROGRESS, ["w-1"]) == "demo-train"
    (job,) = cat.jobs()
    assert [p.id for p in job.profiles] == ["p1"] and list(cat.slurm_jobs("demo:1")) == [9]
    # a second reservation under the same name gets its own entry
    assert _upsert(cat, "demo:1", None, "demo-train", JobStatus.IN_PROGRESS, []) == "demo-train-2"
