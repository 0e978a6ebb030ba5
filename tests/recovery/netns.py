"""Hosts for multi-host cluster tests: each a Linux network namespace of this machine (its own
address on a private bridge, its own sshd, hostname and /run folder for the cluster's files), so
the ssh provider reaches "remote" machines exactly as it would real ones. Only namespaces and
links this module creates are touched, and :meth:`Hosts.close` removes every one of them, with
whatever still runs inside, even after a failed test."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

#: every host's network interface (a job's ranks name it, e.g. ``GLOO_SOCKET_IFNAME``)
IFNAME = "eth0"


def _ip(*args: str, ns: str = "") -> None:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def missing() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin")
    if sshd is None or shutil.which("ssh") is None or shutil.which("unshare") is None:
        return "openssh-server, openssh-client and util-linux are needed (./dev installs them)"
    probe = f"hsprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, FileNotFoundError) as exc:
        return f"`ip netns add` does not work here: {exc}"
    _ip("netns", "del", probe)
    return None


@dataclass
class Host:
    ns: str
    addr: str
    sshd: subprocess.Popen[bytes]


@dataclass
class Hosts:
    """``n`` hosts at 10.X.Y.1..n; their sshd listens on ``port`` as root with ``key``."""

    work: Path
    remote_dir: str  # a tmpfs of its own on every host (a real machine's local disk)
    key: Path = field(init=False)
    port: int = field(init=False)
    hosts: list[Host] = field(default_factory=list)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    subnet: str = ""

    @property
    def bridge(self) -> str:
        return f"hsb{self.tag}"

    def open(self, n: int) -> Hosts:
        d = self.work / "sshd"
        d.mkdir(parents=True)
        for key in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
        shutil.copy(d / "client.pub", d / "authorized_keys")
        self.key, self.port = d / "client", random.randint(20000, 60000)
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=False).stdout
        while True:
            self.subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
            if f"{self.subnet}." not in routes:
                break
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        Path(self.remote_dir).mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
        for i in range(1, n + 1):
            self._host(i, d)
        return self

    def _host(self, i: int, d: Path) -> None:
        ns, addr = f"hs{self.tag}{i}", f"{self.subnet}.{i}"
        outer, inner = f"v{self.tag}{i}a", f"v{self.tag}{i}b"
        _ip("netns", "add", ns)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", outer, "master", self.bridge, "up")
        _ip("link", "set", inner, "name", IFNAME, ns=ns)  # one name on every host, as on real ones
        _ip("addr", "add", f"{addr}/24", "dev", IFNAME, ns=ns)
        _ip("link", "set", IFNAME, "up", ns=ns)
        _ip("link", "set", "lo", "up", ns=ns)
        conf = d / f"sshd_config.{i}"
        conf.write_text(
            f"Port {self.port}\nListenAddress {addr}\nHostKey {d / 'host'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nUsePAM no\nStrictModes no\n"
            # a session whose client vanished with a cut link ends, as on a tuned real host
            "ClientAliveInterval 5\nClientAliveCountMax 2\n"
            f"PidFile {d / f'sshd.{i}.pid'}\n"
        )
        sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin")
        boot = (
            f"hostname h{i} && mount -t tmpfs -o size=256m tmpfs {self.remote_dir} && "
            f"exec {sshd} -D -e -f {conf}"
        )
        with open(d / f"sshd.{i}.log", "wb") as log:
            proc = subprocess.Popen(
                # not `ip netns exec`: it mounts a sysfs of its own, without the cgroup tree slurmd needs
                ["nsenter", f"--net=/run/netns/{ns}", "unshare", "-m", "-u", "--propagation", "private",
                 "sh", "-c", boot],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.hosts.append(Host(ns, addr, proc))
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((addr, self.port)) == 0:
                    return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd in {ns} did not start: {(d / f'sshd.{i}.log').read_text()}")
            time.sleep(0.05)

    def ssh_options(self) -> dict[str, object]:
        """The spec's ``ssh:`` for these hosts."""
        return {
            "port": self.port, "identity_file": str(self.key), "remote_dir": self.remote_dir,
            "options": ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"],
        }  # fmt: skip

    def ssh(self, addr: str, command: str, check: bool = True) -> str:
        argv = ["ssh", "-p", str(self.port), "-i", str(self.key), "-o", "BatchMode=yes", "-o",
                "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                f"root@{addr}", command]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{addr}: `{command}` failed: {done.stderr.strip()}")
        return done.stdout

    def pids(self, host: Host) -> list[int]:
        done = subprocess.run(["ip", "netns", "pids", host.ns], capture_output=True, text=True, check=False)
        return [int(p) for p in done.stdout.split()]

    def kill(self, host: Host) -> None:
        """The machine is gone: everything in its namespace killed, sshd included."""
        for pid in self.pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            host.sshd.wait(10)

    def close(self) -> None:
        for host in self.hosts:
            self.kill(host)
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", host.ns)
        with contextlib.suppress(RuntimeError):
            _ip("link", "del", self.bridge)
        with contextlib.suppress(OSError):
            Path(self.remote_dir).rmdir()
