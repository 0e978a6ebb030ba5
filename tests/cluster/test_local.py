"""The local provider end to end, with real munged, slurmctld and slurmd daemons (root + Debian's
slurm-wlm and munge; skipped elsewhere). Each test starts and stops its own cluster in well under
a second of daemon time; what we check is what a user relies on: idle nodes, jobs that run across
nodes, a lifecycle failure that leaves nothing behind, and a delete that leaves no process."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.cluster.local import LocalProvider
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterError, ClusterState, Proc, alive

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("needs_slurm")]


def _ours(cluster_dir: Path) -> list[int]:
    """Live (non-zombie) processes whose command line or environment mentions the cluster's folder."""
    needle = str(cluster_dir).encode()
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            if needle in (p / "cmdline").read_bytes() or needle in (p / "environ").read_bytes():
                found.append(int(p.name))
        except OSError:
            continue
    return found


def test_create_run_delete(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    spec = make_spec(workers=4, spares=1)  # the example's shape: 4 workers x 2 GPUs, 1 spare
    steps: list[tuple[str, str]] = []
    state = provider.create(spec, lambda node, step: steps.append((node, step)))
    assert state.status == "InService"
    assert ("workers-5", "idle") in steps and ("login-1", "running on_create.sh") in steps
    assert {n.name: n.status for n in state.nodes} == dict.fromkeys(
        ["controller-1", "login-1", *(f"workers-{i}" for i in range(1, 6))], "Running"
    )
    slurm = Slurm(Path(state.slurm_conf))
    nodes = {n.name: n for n in slurm.nodes()}
    assert {k: (n.display_state, n.partitions, n.gres) for k, n in nodes.items()} == {
        **{f"workers-{i}": ("idle", ("dev",), "gpu:2") for i in range(1, 5)},
        "workers-5": ("idle", (), "gpu:2"),  # the spare: up, in no partition
    }
    out = slurm.run("srun", "-N4", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_PROCID").stdout
    assert sorted(out.splitlines()) == [f"workers-{i} {i - 1}" for i in range(1, 5)]
    out = slurm.run(
        "srun", "-N2", "--gpus-per-node=2", "bash", "-c",
        "echo $SLURMD_NODENAME $SLURM_PROCID $SLURM_NODEID $CUDA_VISIBLE_DEVICES",
    ).stdout  # fmt: skip
    assert sorted(out.split("\n")[:2]) == ["workers-1 0 0 0,1", "workers-2 1 1 0,1"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", slurm.version())
    # a batch job across both active nodes, waited for
    out_file = tmp_path / "job.out"
    job = slurm.submit(
        "--wait", "-N2", "-o", str(out_file), "--wrap", "srun bash -c 'echo $SLURMD_NODENAME $SLURM_PROCID'"
    )
    done = {j.id: j for j in slurm.jobs()}[job]
    assert (done.state, done.status.value, done.nodes) == ("COMPLETED", "Completed", "workers-[1-2]")
    assert sorted(out_file.read_text().splitlines()) == ["workers-1 0", "workers-2 1"]

    # the lifecycle script saw its node's facts and the resource config
    shared = spec.shared_dir
    assert (shared / "checkpoints").is_dir()
    login = state.node("login-1")
    assert "on_create: login-1 (login of group login) in t1" in login.output
    config = json.loads((Path(state.dir) / "etc" / "resource_config.json").read_text())
    assert [g["Name"] for g in config["InstanceGroups"]] == ["controller", "login", "workers"]

    again = provider.create(spec)  # idempotent: the same daemons
    assert [p.pid for p in again.procs] == [p.pid for p in state.procs]

    procs = ClusterState.load(Path(state.dir)).procs
    # munged, slurmctld, 5 slurmds (4 workers + 1 spare) and the recovery agent
    assert {p.role for p in procs} == {"munged", "slurmctld", "slurmd", "agent"} and len(procs) == 8
    assert provider.delete("t1")
    assert not any(alive(p) for p in procs)
    assert _ours(Path(state.dir)) == []
    assert not Path(state.dir).exists() and not Path(state.run_dir).exists()
    assert not provider.delete("t1")  # twice is fine
    assert list((tmp_path / "home" / "clusters").iterdir()) == []


def test_failing_lifecycle_script_leaves_nothing_running(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    script = (
        '#!/bin/bash\necho "configuring $HYPERSCOPE_NODE"\n'
        'if [ "$HYPERSCOPE_NODE" = workers-2 ]; then echo "no space left on /scratch" >&2; exit 3; fi\n'
    )
    spec = make_spec(name="bad", workers=2, spares=0, on_create=script)
    with pytest.raises(ClusterError) as info:
        provider.create(spec)
    msg = str(info.value)
    assert "exited with status 3 on node workers-2" in msg and "no space left on /scratch" in msg
    cluster_dir = provider.cluster_dir("bad")
    state = ClusterState.load(cluster_dir)
    assert state.status == "Failed" and "no space left on /scratch" in state.error
    assert state.node("workers-2").status == "Failed"
    assert "configuring workers-2" in state.node("workers-2").output
    assert state.node("workers-1").status == "Configuring"  # its slurmd started, never reached idle
    assert state.procs == []
    assert _ours(cluster_dir) == []

    # a fixed script: create again replaces the failed attempt
    spec.on_create.write_text("#!/bin/bash\necho ok\n")
    assert provider.create(spec).status == "InService"
    assert provider.delete("bad") and _ours(cluster_dir) == []


def test_two_clusters_side_by_side(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    a = provider.create(make_spec(name="a", workers=1, spares=0))
    try:
        b = provider.create(make_spec(name="b", workers=1, spares=0))
        for s in (a, b):
            out = Slurm(Path(s.slurm_conf)).run("srun", "-N1", "bash", "-c", "echo $SLURMD_NODENAME").stdout
            assert out.strip() == "workers-1"
        pids_a = {p.pid for p in a.procs}
        assert provider.delete("b")
        assert all(alive(Proc(p.role, p.pid, p.start)) for p in a.procs if p.pid in pids_a)
    finally:
        provider.delete("a")
        provider.delete("b")


def test_slurmd_that_cannot_start_fails_cleanly(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    """A node's port taken by another program: slurmd exits, create says so with its log, and
    stops what it had started."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = make_spec(name="busy", workers=1, spares=0, port_base=port - 1)  # workers-1 gets `port`
        with pytest.raises(ClusterError) as info:
            provider.create(spec)
    assert "slurmd workers-1 exited" in str(info.value), info.value
    assert "Address already in use" in str(info.value) or "bind" in str(info.value)
    cluster_dir = provider.cluster_dir("busy")
    assert ClusterState.load(cluster_dir).status == "Failed"
    assert _ours(cluster_dir) == []
    assert provider.delete("busy")


def test_interrupted_create_stops_what_it_started(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], provider: LocalProvider
) -> None:
    """Ctrl-C in the middle of create (here: while the second worker is being configured)."""
    spec = make_spec(name="intr", workers=2, spares=0)

    def progress(node: str, step: str) -> None:
        if (node, step) == ("workers-2", "running on_create.sh"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        provider.create(spec, progress)
    state = ClusterState.load(provider.cluster_dir("intr"))
    assert (state.status, state.error, state.procs) == ("Failed", "interrupted during create", [])
    assert _ours(provider.cluster_dir("intr")) == []
