"""The ssh provider's controllers: slurmctld on the controller's host and, with
``slurm.backup_controller: HOST`` in the spec, Slurm's backup controller on that host
(``SlurmctldHost`` twice; both keep their state on the shared directory, where the backup finds
what the primary saved when it takes over, after ``SlurmctldTimeout``).

The agent (on the machine that created the cluster) is their supervisor: every
:data:`CHECK_EVERY_S` seconds one ``ssh`` step per controller host looks whether the recorded
munged and slurmctld still run there (PID and start time), and a dead one is started again on its
host: slurmctld without ``-c``, so it recovers its jobs from the saved state, and a restarted
primary takes control back from the backup.
"""

from __future__ import annotations

import shlex
from typing import Protocol

from hyperscope.cluster.ssh_hosts import start_command
from hyperscope.cluster.state import BACKUP_CTLD, ClusterError, ClusterState, Proc

#: how often the agent looks at the controllers' daemons over ssh (one round trip per host)
CHECK_EVERY_S = 5.0
ROLES = ("munged", "slurmctld", BACKUP_CTLD)


def munged_argv(root: str) -> list[str]:
    m = f"{root}/munge"
    return ["munged", "-F", "--force", f"--socket={m}/munge.sock", f"--key-file={m}/munge.key",
            f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed"]  # fmt: skip


def ctld_argv(state: ClusterState, *, clear: bool = False) -> list[str]:
    return ["slurmctld", "-D", *(["-c"] if clear else []), "-f", state.slurm_conf]


def controller_hosts(state: ClusterState) -> list[str]:
    """The primary's host, then the backup's (if any)."""
    primary = state.node(state.controller).host
    return list(dict.fromkeys([primary, *([state.backup_host] if state.backup_host else [])]))


def every_host(state: ClusterState) -> list[str]:
    """Every host the cluster runs on: the nodes', and the backup controller's."""
    return list(dict.fromkeys([*(n.host for n in state.nodes), *controller_hosts(state)]))


def alive_command(procs: list[Proc]) -> str:
    """Prints the PIDs of ``procs`` still running with their recorded start time."""
    pairs = " ".join(f"{p.pid} {p.start}" for p in procs)
    script = (
        f"set -- {pairs}\nwhile [ $# -gt 1 ]; do\n"
        "  a=($(sed 's/.*) //' /proc/$1/stat 2>/dev/null))\n"
        '  [ -n "${a[0]:-}" ] && [ "${a[0]}" != Z ] && [ "${a[19]}" = "$2" ] && echo $1\n'
        "  shift 2; done; true"
    )
    return f"bash -c {shlex.quote(script)}"


class Runner(Protocol):
    """What this module needs of :class:`hyperscope.cluster.ssh_hosts.Hosts` (its ``run``)."""

    def run(
        self, host: str, command: str, *, stdin: bytes = b"", timeout: float = 60.0, check: bool = True
    ) -> str: ...


def dead(hosts: Runner, state: ClusterState) -> list[Proc]:
    """The controller hosts' recorded daemons that are gone; a host that does not answer ssh keeps
    its daemons counted as alive (nothing can be restarted there; the backup, if any, serves)."""
    mine = [p for p in state.procs if p.role in ROLES]
    out = gone(hosts, [p for h in controller_hosts(state) for p in mine if p.host == h])
    return sorted(out, key=lambda p: p.role != "munged")  # munged first: slurmctld needs it


def gone(hosts: Runner, procs: list[Proc]) -> list[Proc]:
    """Those of ``procs`` no longer running on their hosts (one ssh step per host); a host that
    does not answer keeps its processes counted as alive."""
    out: list[Proc] = []
    for host in dict.fromkeys(p.host for p in procs):
        mine = [p for p in procs if p.host == host]
        try:
            running = {int(x) for x in hosts.run(host, alive_command(mine), timeout=20).split()}
        except ClusterError:
            continue
        out += [p for p in mine if p.pid not in running]
    return out


def start(hosts: Runner, state: ClusterState, host: str, role: str, argv: list[str], log: str) -> Proc:
    """A daemon on ``host``, recorded in ``state.procs`` (not saved: the caller does)."""
    pid, began = hosts.run(host, start_command(state.run_dir, log, argv)).split()
    proc = Proc(role, int(pid), int(began), "", host)
    state.procs.append(proc)
    return proc


def start_munged(hosts: Runner, state: ClusterState, host: str) -> None:
    m = shlex.quote(f"{state.run_dir}/munge")
    hosts.run(host, f"rm -f {m}/munge.sock")
    start(hosts, state, host, "munged", munged_argv(state.run_dir), "munged.out")
    hosts.run(host, f"for i in $(seq 100); do [ -S {m}/munge.sock ] && exit 0; sleep 0.1; done; exit 1")


def start_backup(hosts: Runner, state: ClusterState, *, munged: bool) -> None:
    """The backup slurmctld on its host (and that host's munged first, when ``munged``)."""
    if munged:
        start_munged(hosts, state, state.backup_host)
    start(hosts, state, state.backup_host, BACKUP_CTLD, ctld_argv(state), "slurmctld-backup.out")


def restart(hosts: Runner, state: ClusterState, gone: list[Proc]) -> list[str]:
    """Start again what :func:`dead` found gone, on its own host; the roles restarted."""
    state.procs = [p for p in state.procs if p not in gone]
    for p in gone:
        if p.role == "munged":
            start_munged(hosts, state, p.host)
        elif p.role == "slurmctld":
            start(hosts, state, p.host, "slurmctld", ctld_argv(state), "slurmctld.out")
        else:
            start(hosts, state, p.host, BACKUP_CTLD, ctld_argv(state), "slurmctld-backup.out")
    return [p.role for p in gone]
