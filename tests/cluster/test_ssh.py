"""The ssh provider: its command lines and spec rules as pure functions, and a whole cluster brought
up, used and deleted through a real OpenSSH server on loopback that the test starts (port != 22,
generated host and client keys)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hyperscope import JobStatus, Store
from hyperscope.cluster import manage, ssh_hosts
from hyperscope.cluster.spec import SpecError, SshSettings, load_spec
from hyperscope.cluster.ssh_hosts import ssh_argv, start_command, stop_command, with_env
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Proc, alive

EXAMPLE_LIFECYCLE = Path(__file__).resolve().parents[2] / "examples" / "lifecycle"


def test_ssh_command_lines() -> None:
    s = SshSettings(port=2222, identity_file=Path("/k/id"), options=("StrictHostKeyChecking=no",))
    argv = ssh_argv(s, "10.0.0.2", "hostname -s")
    assert argv[:3] == ["ssh", "-p", "2222"] and argv[-2:] == ["root@10.0.0.2", "hostname -s"]
    assert "BatchMode=yes" in argv and "ControlMaster=auto" in argv and "ServerAliveInterval=5" in argv
    assert argv[argv.index("-i") + 1] == "/k/id" and "StrictHostKeyChecking=no" in argv
    assert with_env({"A": "x y"}, ["sbatch", "--wrap", "echo $A"]) == "env 'A=x y' sbatch --wrap 'echo $A'"
    start = start_command("/r/c", "slurmd-w-1.out", ["slurmd", "-N", "w-1"])
    assert start.startswith("cd /r/c || exit 1; env HYPERSCOPE_CLUSTER_DIR=/r/c setsid slurmd -N w-1 ")
    assert "> /r/c/log/slurmd-w-1.out 2>&1 < /dev/null & p=$!; echo $p " in start
    stop = stop_command([Proc("slurmd", 12, 345)], root="/r/c", keep=[Proc("munged", 7, 8)])
    assert "stop 12 345" in stop and "KEEP='\"'\"'7'\"'\"'" in stop  # quoted for bash -c
    assert "HYPERSCOPE_CLUSTER_DIR=/r/c" in stop and "SLURM_CONF=/r/c/etc/slurm.conf" in stop


def _spec_file(tmp: Path, **over: object) -> Path:
    shutil.copytree(EXAMPLE_LIFECYCLE, tmp / "lifecycle", dirs_exist_ok=True)
    doc: dict[str, object] = {
        "name": "s1", "provider": "ssh", "lifecycle_scripts": "lifecycle", "shared_dir": "shared",
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": ["127.0.0.1"]},
            {"name": "workers", "role": "worker", "count": 2, "hosts": ["127.0.0.1"]},
        ],
    }  # fmt: skip
    doc.update(over)
    (tmp / "cluster.yaml").write_text(yaml.safe_dump(doc))
    return tmp / "cluster.yaml"


def test_ssh_spec_rules(tmp_path: Path) -> None:
    spec = load_spec(_spec_file(tmp_path, ssh={"port": 2222, "options": ["StrictHostKeyChecking=no"]}))
    assert spec.ssh == SshSettings(port=2222, options=("StrictHostKeyChecking=no",))
    assert spec.groups[1].host("workers-2") == "127.0.0.1"
    bad = {"name": "workers", "role": "worker", "count": 2, "hosts": ["a", "b", "c"]}
    with pytest.raises(SpecError, match=r"instance_groups\[0\]\.hosts: must name one host for all nodes"):
        load_spec(_spec_file(tmp_path, instance_groups=[bad]))
    no_hosts = {"name": "controller", "role": "controller", "count": 1}
    with pytest.raises(SpecError, match=r"instance_groups\[0\]\.hosts: is required by the ssh provider"):
        load_spec(_spec_file(tmp_path, instance_groups=[no_hosts]))
    with pytest.raises(SpecError, match=r"ssh\.options: must be a list of OpenSSH Key=Value options"):
        load_spec(_spec_file(tmp_path, ssh={"options": ["-v"]}))
    with pytest.raises(SpecError, match="ssh: is not used by the local provider"):
        load_spec(_spec_file(tmp_path, provider="local", ssh={}))


def _free_base(n: int) -> int:
    """A run of ``n`` free TCP ports (slurmctld + nodes); Slurm's ports are consecutive here."""
    for base in range(31000 + os.getpid() % 5000, 60000, 37):
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An OpenSSH server on 127.0.0.1 for root with a generated key; (port, client key)."""
    if os.geteuid() != 0:
        pytest.skip("the ssh provider's test logs in as root (slurmd runs as root)")
    if shutil.which("sshd", path="/usr/sbin:/usr/bin") is None and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "openssh-server"],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True, timeout=300,
            check=False,
        )  # fmt: skip
    sshd_bin = shutil.which("sshd", path="/usr/sbin:/usr/bin")
    if sshd_bin is None or shutil.which("ssh") is None:
        pytest.skip("openssh-server/openssh-client not installed (./dev test installs them)")
    d = tmp_path / "sshd"
    d.mkdir()
    for key in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "client.pub", d / "authorized_keys")
    port = _free_base(1)
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {d / 'sshd.pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation folder
    server = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert server.poll() is None and time.monotonic() < deadline, "sshd did not start"
        time.sleep(0.05)
    yield port, d / "client"
    server.terminate()
    server.wait(10)


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_cluster_over_ssh(tmp_path: Path, sshd: tuple[int, Path]) -> None:
    port, key = sshd
    remote = f"/run/hs-test-{uuid.uuid4().hex[:8]}"
    ssh = {"port": port, "identity_file": str(key), "remote_dir": remote,
           "options": ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"]}  # fmt: skip
    groups = [
        {"name": "controller", "role": "controller", "count": 1, "hosts": ["127.0.0.1"]},
        {"name": "login", "role": "login", "count": 1, "hosts": ["127.0.0.1"]},
        {"name": "workers", "role": "worker", "count": 2, "hosts": ["127.0.0.1", "127.0.0.1"]},
    ]
    spec = _spec_file(tmp_path, ssh=ssh, instance_groups=groups, slurm={"port_base": _free_base(3)})
    home = tmp_path / "home"
    try:
        state = manage.create(spec, home)
        assert (state.provider, state.status, state.slurm_conf) == (
            "ssh",
            "InService",
            f"{remote}/s1/etc/slurm.conf",
        )
        assert {p.role for p in state.procs} == {"munged", "slurmctld", "slurmd", "agent"}
        assert [p.host for p in state.procs if p.role == "agent"] == [""]  # on this machine
        assert [p.host for p in state.procs if p.role == "munged"] == ["127.0.0.1"]  # one per host
        assert all(alive(p) for p in state.procs)  # loopback: the "remote" PIDs are this machine's
        d = manage.describe("s1", home)
        assert d.running and d.slurm_version.count(".") == 2
        rows = {r.node: (r.status, r.slurm_state, r.health) for r in manage.list_nodes("s1", home)}
        assert rows["workers-2"] == ("Running", "idle", "healthy")
        assert rows["login-1"] == ("Running", "-", "healthy")
        log = Path(remote) / "s1" / "log" / "on_create-workers-2.log"
        assert "on_create: workers-2 (worker of group workers) in s1" in log.read_text()

        out = tmp_path / "job.out"
        done = manage.submit(
            "s1", home, ["--wait", "-N2", "-o", str(out), "--wrap", "srun bash -c 'echo $SLURM_PROCID'"]
        )
        assert sorted(out.read_text().split()) == ["0", "1"] and done.status is JobStatus.COMPLETED
        with Store(done.store) as store:
            assert store.catalog.job(done.catalog_job).nodes == ["workers-1", "workers-2"]
        with pytest.raises(ClusterError, match=r"log in to 127\.0\.0\.1 with ssh"):
            manage.shell_env("s1", home)
        assert manage.create(spec, home).created == state.created  # in service: unchanged
    finally:
        assert manage.delete("s1", home)
    assert not any(alive(p) for p in state.procs)
    assert not Path(remote).joinpath("s1").exists() and not (home / "clusters" / "s1").exists()


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_failing_lifecycle_script_over_ssh_leaves_nothing_running(
    tmp_path: Path, sshd: tuple[int, Path]
) -> None:
    port, key = sshd
    remote = f"/run/hs-test-{uuid.uuid4().hex[:8]}"
    ssh = {"port": port, "identity_file": str(key), "remote_dir": remote,
           "options": ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"]}  # fmt: skip
    spec = _spec_file(tmp_path, ssh=ssh, slurm={"port_base": _free_base(3)})
    (tmp_path / "lifecycle" / "on_create.sh").write_text(
        '[ "$HYPERSCOPE_NODE" = workers-2 ] && { echo "disk check failed on $HYPERSCOPE_NODE"; exit 3; }\n'
        "true\n"
    )
    home = tmp_path / "home"
    with pytest.raises(
        ClusterError, match=r"exited with status 3 on node workers-2 \(host 127\.0\.0\.1"
    ) as info:
        manage.create(spec, home)
    assert "disk check failed on workers-2" in str(info.value)
    state = manage.load("s1", home)
    assert state.status == "Failed" and state.procs == [] and state.node("workers-2").status == "Failed"
    assert not Path(remote, "s1").exists()
    assert manage.delete("s1", home) and not manage.list_clusters(home)


def test_delete_with_an_unreachable_host_keeps_what_it_could_not_stop(tmp_path: Path) -> None:
    if shutil.which("ssh") is None:
        pytest.skip("openssh-client not installed")
    d = tmp_path / "clusters" / "gone"
    d.mkdir(parents=True)
    state = ClusterState(
        name="gone", provider="ssh", status="InService", dir=str(d), spec_path="", spec_digest="",
        slurm_conf="/r/gone/etc/slurm.conf", shared_dir=str(tmp_path), controller="controller-1",
        partition="dev", ctld_port=1, run_dir="/r/gone",
        ssh={"user": "root", "port": _free_base(1), "identity_file": None, "options": [], "remote_dir": "/r"},
    )  # fmt: skip
    state.nodes = [NodeState("controller-1", "controller", "controller", False, False, host="127.0.0.1")]
    state.procs = [Proc("slurmctld", 4242, 1, "", "127.0.0.1")]
    state.save()
    with pytest.raises(ClusterError, match=r"could not stop everything on 127\.0\.0\.1; run delete again"):
        manage.delete("gone", tmp_path)
    assert manage.load("gone", tmp_path).procs == state.procs  # still recorded, for the next try


def test_stopping_one_node_stops_only_its_processes(tmp_path: Path) -> None:
    """The re-create's stop, run by bash here as on a host: the node's processes (a frozen one
    too) go; a process of another cluster's node of the same name, and one of another node, stay."""
    from hyperscope.cluster.ssh_nodes import node_stop_command

    root = str(tmp_path / "c")
    base = {"PATH": os.environ["PATH"]}
    ours = {**base, "HYPERSCOPE_CLUSTER_DIR": root, "HYPERSCOPE_SLURMD_NODE": "w-1"}
    task = {**base, "SLURMD_NODENAME": "w-1", "SLURM_CONF": f"{root}/etc/slurm.conf", "SLURM_JOB_ID": "3"}
    other_cluster = {**base, "HYPERSCOPE_CLUSTER_DIR": "/elsewhere", "HYPERSCOPE_SLURMD_NODE": "w-1"}
    other_node = {**base, "HYPERSCOPE_CLUSTER_DIR": root, "HYPERSCOPE_SLURMD_NODE": "w-2"}
    envs = {"ours": ours, "task": task, "other_cluster": other_cluster, "other_node": other_node}
    procs = {k: subprocess.Popen(["sleep", "300"], env=env) for k, env in envs.items()}
    try:
        os.kill(procs["ours"].pid, signal.SIGSTOP)  # frozen: continued, then stopped
        time.sleep(0.2)
        subprocess.run(node_stop_command([], root, "w-1"), shell=True, check=True, timeout=30)
        assert procs["ours"].wait(10) != 0 and procs["task"].wait(10) != 0
        assert procs["other_cluster"].poll() is None and procs["other_node"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_slurm_commands_fail_over_to_the_next_controller_host_and_try_a_gone_one_last(
    sshd: tuple[int, Path],
) -> None:
    """The runner of :func:`ssh.slurm_for` (:meth:`ssh_hosts.Hosts.runner`): nothing listens on
    127.0.0.3 (ssh exits 255, as for a host that is gone), so the command runs on 127.0.0.1; the
    gone host is then tried last."""
    port, key = sshd
    options = ("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null")
    run = ssh_hosts.Hosts(SshSettings(port=port, identity_file=key, options=options)).runner(
        "127.0.0.3", "127.0.0.1"
    )
    ssh_hosts._AWAY.pop("127.0.0.3", None)
    done = run(["sh", "-c", "echo $SSH_CONNECTION"], {}, 20)
    assert done.returncode == 0 and done.stdout.split()[2:] == ["127.0.0.1", str(port)]
    assert ssh_hosts._AWAY["127.0.0.3"] > time.monotonic()  # tried after 127.0.0.1 for the next AWAY_S
    assert "127.0.0.1" not in ssh_hosts._AWAY
