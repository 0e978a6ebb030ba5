"""Slurm's own output, recorded from a real local Slurm 22.05 cluster, read by the pure parsers;
the command seam tested with a fake runner (the only fake: the subprocess boundary)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperscope.cluster.slurm import (
    Slurm,
    SlurmError,
    job_status,
    parse_config,
    parse_fields,
    parse_ping,
    parse_sbatch,
    parse_show_job,
    parse_show_node,
    parse_sinfo,
    parse_version,
)
from hyperscope.store.catalog import JobStatus

OUT = Path(__file__).resolve().parents[1] / "data" / "cluster_slurm_outputs"


def _read(name: str) -> str:
    return (OUT / name).read_text()


def test_show_node_idle() -> None:
    nodes = parse_show_node(_read("show_node_idle.txt"))
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    assert all(n.state == "IDLE" and not n.flags and n.available for n in nodes)
    assert nodes[0].gres == "gpu:2" and nodes[0].partitions == ("debug",) and nodes[0].cpus == 2
    assert nodes[1].port == 27002
    assert nodes[0].fields["OS"].startswith("Linux ") and " SMP " in nodes[0].fields["OS"]
    assert nodes[0].fields["AllocTRES"] == ""


def test_show_node_drained_and_mixed() -> None:
    n1, n2, n3 = parse_show_node(_read("show_node_mixed.txt"))
    assert n2.state == "IDLE" and n2.flags == ("DRAIN",) and not n2.available
    assert n2.reason == "ecc errors on gpu1" and n2.display_state == "idle+drain"
    assert n3.state == "MIXED" and n3.cpus_alloc == 1 and n3.available
    assert n1.reason == ""


def test_show_node_not_responding() -> None:
    n3 = parse_show_node(_read("show_node_down.txt"))[2]
    assert (n3.state, n3.flags, n3.reason) == ("DOWN", ("NOT_RESPONDING",), "Not responding")
    assert not n3.available


def test_sinfo() -> None:
    rows = parse_sinfo(_read("sinfo_down.txt"))
    assert [(r.node, r.state, r.reason) for r in rows] == [
        ("n1", "idle", ""),
        ("n2", "drained", "ecc errors on gpu1"),
        ("n3", "down*", "Not responding"),
    ]
    assert rows[0].partition == "debug" and rows[0].default_partition and rows[0].gres == "gpu:2"
    with pytest.raises(SlurmError, match="unexpected sinfo line"):
        parse_sinfo("n1 idle")


def test_config_and_version() -> None:
    conf = parse_config(_read("show_config.txt"))
    assert conf["ClusterName"] == "lslurm" and conf["SlurmctldPort"] == "26817"
    assert conf["SelectType"] == "select/cons_tres" and conf["MessageTimeout"] == "2 sec"
    assert parse_version(_read("version.txt")) == "22.05.8"
    assert parse_version("slurm 23.11.4\n") == "23.11.4"
    with pytest.raises(SlurmError, match="no Slurm version"):
        parse_version("command not found")


def test_fields_value_with_equals_free_spaces() -> None:
    assert parse_fields("NodeName=a Reason=disk full, see log State=DOWN") == {
        "NodeName": "a",
        "Reason": "disk full, see log",
        "State": "DOWN",
    }


class FakeRunner:
    def __init__(self, rc: int = 0, stdout: str = "", stderr: str = "", exc: Exception | None = None) -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.rc, self.stdout, self.stderr, self.exc = rc, stdout, stderr, exc

    def __call__(
        self, argv: Sequence[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), env["SLURM_CONF"]))
        if self.exc is not None:
            raise self.exc
        return subprocess.CompletedProcess(list(argv), self.rc, self.stdout, self.stderr)


def test_seam_sets_slurm_conf_and_parses() -> None:
    fake = FakeRunner(stdout=_read("show_node_idle.txt"))
    slurm = Slurm(Path("/c/slurm.conf"), runner=fake)
    assert len(slurm.nodes()) == 3
    assert fake.calls == [(["scontrol", "show", "node", "-o"], "/c/slurm.conf")]


def test_seam_errors_name_command_status_and_message() -> None:
    slurm = Slurm(Path("/c/slurm.conf"), runner=FakeRunner(rc=1, stderr="Node nosuch not found\n"))
    with pytest.raises(SlurmError) as info:
        slurm.run("scontrol", "show", "node", "nosuch")
    assert str(info.value) == (
        "`scontrol show node nosuch` (SLURM_CONF=/c/slurm.conf) failed with status 1: Node nosuch not found"
    )
    assert not Slurm(Path("/c"), runner=FakeRunner(rc=1)).ping()
    missing = Slurm(Path("/c"), runner=FakeRunner(exc=FileNotFoundError(2, "x")))
    with pytest.raises(SlurmError, match="`sinfo` is not installed"):
        missing.sinfo()
    slow = Slurm(Path("/c"), runner=FakeRunner(exc=subprocess.TimeoutExpired("scontrol", 1)))
    with pytest.raises(SlurmError, match="gave no answer within 10 s"):
        slow.ping()


def test_sbatch_wait_of_a_failed_job_still_gives_its_id() -> None:
    """``sbatch --wait`` exits with the job's status; the job was submitted all the same."""
    assert Slurm(Path("/c"), runner=FakeRunner(rc=3, stdout="12\n")).submit("--wait", "x.sh") == 12
    refused = FakeRunner(rc=1, stderr="sbatch: error: Batch job submission failed: Node count\n")
    with pytest.raises(SlurmError, match="failed with status 1: sbatch: error: Batch job submission"):
        Slurm(Path("/c"), runner=refused).submit("-N", "9", "x.sh")


def test_show_job_states_and_catalog_status() -> None:
    jobs = {j.id: j for j in parse_show_job(_read("show_job.txt"))}
    assert {i: (j.state, j.status) for i, j in jobs.items()} == {
        1: ("COMPLETED", JobStatus.COMPLETED),
        2: ("FAILED", JobStatus.FAILED),
        3: ("RUNNING", JobStatus.IN_PROGRESS),
        4: ("RUNNING", JobStatus.IN_PROGRESS),
        5: ("CANCELLED", JobStatus.STOPPED),
        6: ("COMPLETED", JobStatus.COMPLETED),
        7: ("PENDING", JobStatus.IN_PROGRESS),
    }
    assert (jobs[1].nodes, jobs[1].num_nodes, jobs[1].exit_code) == ("workers-[1-2]", 2, "0:0")
    assert (jobs[2].reason, jobs[2].exit_code) == ("NonZeroExitCode", "3:0")
    assert jobs[7].nodes == "" and jobs[7].num_nodes == 4 and jobs[5].name == "cancelme"
    assert jobs[1].fields["ReqNodeList"] == "(null)"  # NodeList= is not confused with ReqNodeList=


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("NODE_FAIL", JobStatus.FAILED),
        ("TIMEOUT", JobStatus.FAILED),
        ("OUT_OF_MEMORY", JobStatus.FAILED),
        ("COMPLETING", JobStatus.STOPPING),
        ("CANCELLED by 0", JobStatus.STOPPED),
        ("CANCELLED+", JobStatus.STOPPED),
        ("requeued", JobStatus.IN_PROGRESS),
    ],
)
def test_job_status_mapping(state: str, status: JobStatus) -> None:
    assert job_status(state) == status


def test_unknown_job_state_and_sbatch_output() -> None:
    with pytest.raises(SlurmError, match="unknown Slurm job state 'WEIRD'"):
        job_status("WEIRD")
    assert parse_sbatch("6\n") == 6 and parse_sbatch("12;lslurm\n") == 12
    with pytest.raises(SlurmError, match="no job id"):
        parse_sbatch("sbatch: error: Batch job submission failed")


def test_parse_ping_names_each_controller() -> None:
    # recorded from 22.05.8 with a backup controller and the primary killed
    assert parse_ping(_read("ping_primary_down.txt")) == {"controller-1": "DOWN", "controller-1-backup": "UP"}
    assert parse_ping("Slurmctld(primary) at localhost is UP\n") == {"localhost": "UP"}
    assert parse_ping("scontrol: error: cannot connect\n") == {}
