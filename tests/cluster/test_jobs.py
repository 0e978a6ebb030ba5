"""Slurm jobs in the shared store's jobs catalog: the pure mapping on recorded `scontrol show job`
output, and real jobs on a real cluster, one of which profiles itself into its own entry."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from hyperscope import JobStatus, Store
from hyperscope.cluster import jobs, manage
from hyperscope.cluster.local import LocalProvider
from hyperscope.cluster.slurm import Slurm, SlurmError, parse_show_job
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState

OUT = Path(__file__).resolve().parents[1] / "data" / "cluster_slurm_outputs"


def test_hostlists_expand_as_slurm_writes_them() -> None:
    assert jobs.expand_hostlist("workers-[1-3,5],login-1") == [
        "workers-1", "workers-2", "workers-3", "workers-5", "login-1",
    ]  # fmt: skip
    assert jobs.expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert jobs.expand_hostlist("workers-2") == ["workers-2"]
    with pytest.raises(ValueError, match="bad range 'x' in Slurm hostlist 'n\\[x\\]'"):
        jobs.expand_hostlist("n[x]")


def test_recorded_jobs_become_catalog_entries() -> None:
    by_id = {j.id: jobs.entry("demo", j) for j in parse_show_job((OUT / "show_job.txt").read_text())}
    assert {i: e.status for i, e in by_id.items()} == {
        1: JobStatus.COMPLETED, 2: JobStatus.FAILED, 3: JobStatus.IN_PROGRESS, 4: JobStatus.IN_PROGRESS,
        5: JobStatus.STOPPED, 6: JobStatus.COMPLETED, 7: JobStatus.IN_PROGRESS,
    }  # fmt: skip
    failed = by_id[2]
    assert failed.name == "demo-wrap-job2" and failed.nodes == ["workers-1"] and failed.ranks == 1
    assert failed.message == (
        "Slurm job 2 on cluster demo: FAILED (reason NonZeroExitCode, exit 3:0, nodes workers-1, "
        "output /tmp/jo/2.out)"
    )
    assert by_id[4].nodes == [f"workers-{i}" for i in range(1, 5)] and by_id[4].ranks == 4
    cancelled = by_id[5]  # cancelled while pending: no nodes, NumTasks=N/A, NumNodes=4
    assert (cancelled.name, cancelled.nodes, cancelled.ranks) == ("demo-cancelme-job5", [], 4)  # -N4
    assert jobs.slurm_time_ns("2026-11-30T17:52:21") == by_id[1].created_ns
    assert jobs.slurm_time_ns("Unknown") is None


def test_submit_names_follow_sbatch(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n")
    assert jobs.submit_name("demo", ["-N", "2", str(script), "--lr", "3"]) == "demo-train"
    assert jobs.submit_name("demo", ["-J", "big", str(script)]) == "demo-big"
    assert jobs.submit_name("demo", ["--job-name=big", "--wrap", "true"]) == "demo-big"
    assert jobs.submit_name("demo", ["-Jbig"]) == "demo-big"
    assert jobs.submit_name("demo", ["--wrap", "true"]) == "demo-wrap"
    assert jobs.submit_name("demo", ["missing.sh"]) == "demo-job"


_PROFILES_ITSELF = (
    f"{sys.executable} -c 'import hyperscope as h; h.start_profiling(); [h.step() for _ in range(3)]; "
    'h.stop_profiling()\'; echo "$HYPERSCOPE_JOB $HYPERSCOPE_HOME"'
)


def _wait_state(slurm: Slurm, job_id: int, state: str) -> None:
    """Polls slurmctld, which ends a cancelled job asynchronously (no timing is asserted)."""
    deadline = time.monotonic() + 60
    while {j.id: j.state for j in slurm.jobs()}.get(job_id) != state:
        assert time.monotonic() < deadline, f"job {job_id} never reached {state}"
        time.sleep(0.1)


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_jobs_of_a_cluster_in_its_shared_store(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    state = provider.create(make_spec(name="jobs", workers=2, spares=0))
    home = provider.home
    out = tmp_path / "out.txt"
    done = manage.submit("jobs", home, ["--wait", "-o", str(out), "--wrap", _PROFILES_ITSELF])
    store = Path(state.shared_dir) / "hyperscope"
    assert (done.catalog_job, done.store, done.output) == ("jobs-wrap", store, str(out))
    assert out.read_text().split() == ["jobs-wrap", str(store)], out.read_text()
    with Store(store) as s:
        job = s.catalog.job("jobs-wrap")  # the Slurm job and its own profile: one entry
        assert job.status is JobStatus.COMPLETED and len(job.profiles) == 1
        assert job.message.startswith(f"Slurm job {done.job_id} on cluster jobs: COMPLETED")
        assert job.nodes == ["workers-1"]

    failed = manage.submit("jobs", home, ["--wait", "-o", str(out), "--wrap", "exit 3"])
    assert failed.catalog_job == "jobs-wrap-2"  # the name was taken: the next one
    slurm = Slurm(Path(state.slurm_conf))
    held = slurm.submit("-o", str(out), "--hold", "--wrap", "true")  # plain sbatch: no reservation
    running = slurm.submit("-o", str(out), "-J", "sleeper", "--wrap", "sleep 60")
    _wait_state(slurm, running, "RUNNING")
    by_name = {j.name: j for j in manage.sync_jobs("jobs", home)}
    assert by_name["jobs-wrap-2"].status is JobStatus.FAILED
    assert "exit 3:0" in by_name["jobs-wrap-2"].message
    assert by_name[f"jobs-wrap-job{held}"].status is JobStatus.IN_PROGRESS  # PENDING (held)
    assert by_name[f"jobs-sleeper-job{running}"].status is JobStatus.IN_PROGRESS
    assert [j.name for j in manage.describe("jobs", home).jobs] == list(by_name)

    slurm.run("scancel", str(running))
    _wait_state(slurm, running, "CANCELLED")
    manage.list_nodes("jobs", home)  # syncs too
    with Store(store) as s:
        assert s.catalog.job(f"jobs-sleeper-job{running}").status is JobStatus.STOPPED
    with pytest.raises(SlurmError, match="invalid partition specified: nosuch"):
        manage.submit("jobs", home, ["-p", "nosuch", "--wrap", "true"])  # refused: reservation goes
    assert manage.delete("jobs", home)
    with Store(store) as s:  # the held job never ran: the deleted cluster stopped it
        gone = s.catalog.job(f"jobs-wrap-job{held}")
        assert gone.status is JobStatus.STOPPED and "cluster jobs was deleted" in gone.message
        assert len(s.catalog.jobs()) == 4


class _Recorded:
    """The subprocess seam answering `scontrol show job -o` with recorded output."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __call__(self, argv: Sequence[str], env: dict[str, str], timeout: float) -> CompletedProcess[str]:
        assert list(argv) == ["scontrol", "show", "job", "-o"]
        return CompletedProcess(list(argv), 0, self.text, "")


def test_sync_upserts_links_and_marks_forgotten_jobs(tmp_path: Path) -> None:
    state = ClusterState(
        name="demo", provider="local", status="InService", dir=str(tmp_path), spec_path="", spec_digest="",
        slurm_conf="/c/slurm.conf", shared_dir=str(tmp_path / "shared"), controller="controller-1",
        partition="dev", ctld_port=1,
    )  # fmt: skip
    text = (OUT / "show_job.txt").read_text()
    reserved = jobs.reserve(state, "demo-train")
    first = jobs.sync(state, Slurm(Path("/c"), runner=_Recorded(text)), link=(4, reserved.name))
    names = [j.name for j in first.catalog]
    assert len(names) == 7 and "demo-train" in names and "demo-wrap-job4" not in names
    assert sorted(first.live) == [1, 2, 3, 4, 5, 6, 7]
    # slurmctld forgets job 3 (still RUNNING when last seen) and the ended job 1
    later = "\n".join(line for line in text.splitlines() if not line.startswith(("JobId=3 ", "JobId=1 ")))
    again = {j.name: j for j in jobs.sync(state, Slurm(Path("/c"), runner=_Recorded(later))).catalog}
    assert len(again) == 7
    assert again["demo-wrap-job3"].status is JobStatus.FAILED
    assert "slurmctld forgot it before hyperscope saw it end" in again["demo-wrap-job3"].message
    assert again["demo-wrap-job1"].status is JobStatus.COMPLETED  # its end was seen: kept
    jobs.cluster_gone(state)
    assert again["demo-train"].status is JobStatus.IN_PROGRESS
    with Store(tmp_path / "shared" / "hyperscope") as s:
        assert s.catalog.job("demo-train").status is JobStatus.STOPPED  # RUNNING job 4, cluster gone
        assert s.catalog.job("demo-wrap-job7").status is JobStatus.STOPPED  # PENDING job 7
        assert s.catalog.job("demo-wrap-job2").status is JobStatus.FAILED


def test_recorded_ends_held_cancelled_node_fail_timeout() -> None:
    """Recorded from a real cluster: a held job, one cancelled while running, one on a node set
    DOWN (--no-requeue) and one past its 1-minute limit."""
    ends = [jobs.entry("rec", j) for j in parse_show_job((OUT / "show_job_ends.txt").read_text())]
    by_name = {e.name: e for e in ends}
    assert {n: e.status for n, e in by_name.items()} == {
        "rec-held-job1": JobStatus.IN_PROGRESS, "rec-cancelled-job2": JobStatus.STOPPED,
        "rec-nodefail-job3": JobStatus.FAILED, "rec-timeout-job4": JobStatus.FAILED,
    }  # fmt: skip
    assert "PENDING (reason JobHeldUser," in by_name["rec-held-job1"].message
    assert "NODE_FAIL (reason NodeDown, exit 0:15, nodes workers-2" in by_name["rec-nodefail-job3"].message
    assert by_name["rec-timeout-job4"].message.startswith(
        "Slurm job 4 on cluster rec: TIMEOUT (reason TimeLimit"
    )
