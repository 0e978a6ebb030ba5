"""Issue 14 on the ssh provider: the Prolog check, the TaskProlog and ``--auto-resume`` on hosts of
their own (network namespaces of this machine, each with its own sshd; netns.py). One cluster for
the module (controller on one host, two workers and a spare on three others, the agent on this
machine): plain ``sbatch`` on the controller's host of the example job gets heartbeats on the
shared directory and a frozen pair of ranks is requeued by the agent; a killed node's
``srun --auto-resume=1`` job resumes from its checkpoint; a node whose Prolog check fails is
drained before the job runs there."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import hooks, manage, ssh_health
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.slurm import Job
from hyperscope.cluster.ssh_hosts import MARKER, NODE_MARKER
from hyperscope.cluster.state import ClusterError, ClusterState, processes_with_env
from hyperscope.recovery.agent import read_log
from tests.recovery import netns
from tests.recovery.conftest import ROOT, SBATCH, TRAIN, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.capture]

torch = pytest.importorskip("torch", reason="the recovery tests train with PyTorch (./dev test installs it)")


@dataclass
class Net:
    hosts: netns.Hosts
    state: ClusterState
    home: Path
    work: Path
    script: Path

    def login(self, command: str, check: bool = True) -> str:
        """``command`` on the controller's host (the login node), as a user's shell there."""
        env = f"SLURM_CONF={self.state.slurm_conf} PATH={Path(sys.executable).parent}:/usr/bin:/bin"
        return self.hosts.ssh(self.host("controller-1"), f"cd {ROOT} && env {env} {command}", check=check)

    def host(self, node: str) -> str:
        return manage.load(self.state.name, self.home).node(node).host

    def sbatch(self, *args: str) -> int:
        return int(self.login("sbatch --parsable " + shlex.join(args)).strip().split(";")[0])

    def job(self, job_id: int) -> Job:
        return {j.id: j for j in manage._slurm(self.state).jobs()}[job_id]

    def finished(self, job_id: int) -> Job | None:
        job = self.job(job_id)
        return job if job.state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT") else None

    def log(self) -> list[dict[str, Any]]:
        return read_log(Path(self.state.dir))


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    why = netns.missing() or missing_requirements()
    if why:
        pytest.skip(f"multi-host tests need namespaces and Slurm: {why}")
    work = tmp_path_factory.mktemp("sshhooks")
    hosts = netns.Hosts(work, f"/run/hs-ns-{uuid.uuid4().hex[:8]}")
    home = work / "home"
    try:
        hosts.open(4)
        shutil.copytree(ROOT / "examples" / "lifecycle", work / "lifecycle")
        a = [h.addr for h in hosts.hosts]
        doc = {
            "name": "hk", "provider": "ssh", "lifecycle_scripts": "lifecycle",
            "shared_dir": str(work / "shared"), "ssh": hosts.ssh_options(),
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]},
                {"name": "workers", "role": "worker", "count": 2, "spares": 1, "hosts": a[1:4]},
            ],
            # the periodic check every 300 s: only the Prolog can see a fault in time
            "recovery": {"hang_timeout_s": 4, "health_check_interval": 300, "max_replacements": 20},
        }  # fmt: skip
        (work / "hk.yaml").write_text(yaml.safe_dump(doc))
        state = manage.create(work / "hk.yaml", home)
        # the example as a user submits it on hosts of their own: rank 0 runs on the batch host,
        # so the ranks meet at its address, on its interface (not the example's 127.0.0.1)
        script = work / "ddp.sbatch"
        script.write_text(
            "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --open-mode=append\n"
            f"export MASTER_ADDR=$(hostname -I | cut -d' ' -f1) GLOO_SOCKET_IFNAME={netns.IFNAME}\n"
            f'exec bash {SBATCH} "$@"\n'
        )
        yield Net(hosts, state, home, work, script)
    finally:
        agent_log = home / "clusters" / "hk" / "agent.log"
        if agent_log.is_file():  # shown when a test fails
            print(agent_log.read_text())
        if (home / "clusters" / "hk" / "cluster.json").is_file():
            with contextlib.suppress(ClusterError):
                manage.delete("hk", home)
        hosts.close()


def _last_step(out: Path) -> int:
    steps = re.findall(r"^rank 0 step (\d+) ", out.read_text() if out.exists() else "", re.M)
    return int(steps[-1]) if steps else -1


def _starts(out: Path) -> list[tuple[int, int]]:
    """(attempt, start step) of rank 0 in each attempt."""
    found = re.findall(r"^rank 0/2 .* attempt=(\d+) start=(\d+)", out.read_text(), re.M)
    return [(int(a), int(s)) for a, s in found]


def _ours(state: ClusterState, *pairs: str) -> set[int]:
    """PIDs with one of ``pairs`` in their environment that are this cluster's (its SLURM_CONF or
    its marker): other clusters on this machine have nodes and jobs of the same names."""
    mine = processes_with_env([f"SLURM_CONF={state.slurm_conf}", f"{MARKER}={state.run_dir}"])
    return set(processes_with_env(pairs)) & set(mine)


def _tasks(state: ClusterState, job_id: int) -> list[int]:
    """The job's training processes, on whichever hosts (one PID space: namespaces of this machine)."""
    return [
        pid for pid in _ours(state, f"SLURM_JOB_ID={job_id}")
        if "SLURM_PROCID" in _environ(pid)
        and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(sys.executable.encode())
    ]  # fmt: skip


def test_plain_sbatch_on_hosts_writes_heartbeats_and_a_frozen_job_is_requeued(net: Net) -> None:
    out, final = net.work / "hang.out", net.work / "hang.pt"
    job_id = net.sbatch("-o", str(out), str(net.script), *TRAIN, "--out", str(final))
    wait_for("step 10", lambda: _last_step(out) >= 10, 180)
    # the TaskProlog's heartbeats, written on the workers' hosts, on the shared directory
    beats = Path(net.state.shared_dir) / "hyperscope" / "heartbeats"
    written = {p.name: p.read_text().split() for p in beats.iterdir() if p.name.startswith(f"{job_id}.")}
    assert set(written) == {f"{job_id}.0", f"{job_id}.1"}
    assert {fields[3] for fields in written.values()} <= {"workers-1", "workers-2", "workers-3"}
    ckpts = Path(net.state.shared_dir) / "checkpoints" / f"hk-{int(net.state.created)}-job{job_id}"
    assert ckpts.is_dir() and any(ckpts.iterdir())
    tasks = _tasks(net.state, job_id)
    assert len(tasks) == 2
    for pid in tasks:
        os.kill(pid, signal.SIGSTOP)  # a hang: only the heartbeats can tell

    job = wait_for("the job to end", lambda: net.finished(job_id), 180)
    assert isinstance(job, Job) and job.state == "COMPLETED", out.read_text()[-2000:]
    requeued = [r for r in net.log() if r["kind"] == "requeue" and r["job"] == str(job_id)]
    assert requeued and "no progress for" in requeued[0]["reason"]
    starts = _starts(out)
    assert starts[0] == (1, 0) and len(starts) >= 2 and starts[-1][1] > 0  # resumed from a checkpoint


def test_auto_resume_on_hosts_resumes_a_killed_nodes_job_from_its_checkpoint(
    net: Net, reference_weights: Path
) -> None:
    out, final = net.work / "kill.out", net.work / "kill.pt"
    job_id = net.sbatch("-o", str(out), str(net.script), *TRAIN, "--out", str(final))
    wait_for("step 10", lambda: _last_step(out) >= 10, 180)
    (victim,) = [
        e["SLURMD_NODENAME"] for e in map(_environ, _tasks(net.state, job_id)) if e.get("SLURM_PROCID") == "1"
    ]
    mark = len(net.log())
    # the node dies: its slurmd and slurmstepds (they carry its marker) and its job tasks
    gone = _ours(net.state, f"{NODE_MARKER}={victim}", f"SLURMD_NODENAME={victim}")
    for pid in gone:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    job = wait_for("the job to end", lambda: net.finished(job_id), 240)
    assert isinstance(job, Job) and job.state == "COMPLETED", out.read_text()[-2000:]
    starts = _starts(out)
    # attempt=2: HYPERSCOPE_ATTEMPT, set in the tasks by the plugin on the hosts
    assert starts[0] == (1, 0) and starts[-1][0] == 2 and starts[-1][1] > 0 and starts[-1][1] % 4 == 0
    x, y = torch.load(final), torch.load(reference_weights)
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    # the plugin's decision, whichever rank's task ended first (one line per attempt, every host's
    # in the one file on the shared directory): its requeue, or a skip where Slurm's requeue of the
    # dead node's job came first (the survivor's task was then killed by that requeue)
    decisions = hooks.auto_resume_log(net.state).read_text()
    attempt1 = re.findall(
        rf"^\d+ job={job_id} step=0 task=\d status=\d+ attempt=1 of=2 (.*)$", decisions, re.M
    )
    assert attempt1 in (["action=requeue"], ["action=skip reason=already-requeued"]), decisions
    done = wait_for(
        f"{victim} replaced",
        lambda: next((r for r in net.log()[mark:] if r["kind"] == "replace" and r["phase"] == "done"), None),
    )
    assert isinstance(done, dict) and done["nodes"][0] == victim, done

    ran = net.login("srun --auto-resume=1 -N1 bash -c 'exit 3' 2>&1; true")
    assert "not inside a batch job (sbatch), and only a batch job can be requeued" in ran


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(v.split("=", 1) for v in raw.split("\0") if "=" in v)


def test_the_prolog_on_a_host_drains_a_sick_node_before_the_job_runs_there(net: Net) -> None:
    now = manage.load("hk", net.home)
    sick = next(n.name for n in now.nodes if n.slurm and not n.spare)
    fault = json.dumps({"gpus": [{"index": 0, "ecc_uncorrectable": 1}]})
    path = shlex.quote(ssh_health.faults_file(now, sick))
    net.hosts.ssh(net.host(sick), f"mkdir -p $(dirname {path}) && echo {shlex.quote(fault)} > {path}")
    mark = len(net.log())
    out = net.work / "prolog.out"
    job_id = net.sbatch("-N2", "-o", str(out), "--wrap", "srun bash -c 'echo ran on $SLURMD_NODENAME'")
    job = wait_for("the job to end", lambda: net.finished(job_id), 180)
    assert isinstance(job, Job) and job.state == "COMPLETED", out.read_text() if out.exists() else job
    ran = sorted(re.findall(r"ran on (\S+)", out.read_text()))
    assert len(ran) == 2 and sick not in ran  # drained by its Prolog on its host
    decided = [r for r in net.log()[mark:] if r["kind"] == "replace"]
    assert decided and decided[0]["nodes"][0] == sick and "gpu0.ecc" in decided[0]["reason"]
