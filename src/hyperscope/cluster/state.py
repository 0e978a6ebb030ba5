"""What hyperscope remembers about a cluster: one JSON file per cluster, and the processes it started.

A cluster outlives the command that created it, so everything ``delete`` needs is written down:
every daemon's PID *and* its start time (a PID alone may be reused by an unrelated process after a
reboot or a long time), the ports, the paths. The file is replaced atomically so a crash mid-write
never leaves a cluster that cannot be deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from hyperscope.cluster.spec import ClusterSpec
from hyperscope.errors import HyperscopeError

Status = Literal["Creating", "InService", "Updating", "Failed", "Deleting"]
#: NeedsHardware: the agent opened a ticket (the node's host is gone, or no command can replace it)
NodeStatus = Literal["Pending", "Configuring", "Running", "Rebooting", "Replacing", "Failed", "NeedsHardware"]
STATE_FILE = "cluster.json"
CLUSTERS_DIR = "clusters"


class ClusterError(HyperscopeError):
    """A cluster that could not be created or operated; the message says which node and why."""


class ClusterNotFound(ClusterError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no cluster named {name!r}; `hyperscope cluster list` lists them")
        self.name = name


#: the role of the local provider's backup slurmctld among a cluster's daemons
BACKUP_CTLD = "slurmctld-backup"


@dataclass(slots=True)
class Proc:
    """A daemon we started: ``start`` is /proc/PID/stat's start time, to never kill a reused PID."""

    role: str  # munged, slurmctld, slurmd
    pid: int
    start: int
    node: str = ""
    host: str = ""  # the ssh provider's: the host it runs on ("" = this machine)


@dataclass(slots=True)
class NodeState:
    name: str
    group: str
    role: str
    spare: bool
    slurm: bool  # runs a slurmd
    status: NodeStatus = "Pending"
    port: int | None = None
    since: float = field(default_factory=time.time)
    output: str = ""  # the tail of on_create.sh's output
    replacements: int = 0
    host: str = ""  # the ssh provider's: the address hyperscope reaches the node at
    last_action: str = ""  # the agent's last decision about this node, with its reason
    straggler: str = ""  # a rank on it slower than the others now (the agent's reason); "" = none


@dataclass(slots=True)
class ClusterState:
    name: str
    provider: str
    status: Status
    dir: str
    spec_path: str
    spec_digest: str
    slurm_conf: str
    shared_dir: str
    controller: str
    partition: str
    ctld_port: int
    #: Sockets live here, not under ``dir``: a unix socket path must stay under 108 bytes.
    run_dir: str = ""
    nodes: list[NodeState] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    error: str = ""
    created: float = field(default_factory=time.time)
    #: the ssh provider's connection settings (SshSettings as JSON); {} for the others
    ssh: dict[str, Any] = field(default_factory=dict)
    updated: float = field(default_factory=time.time)
    #: what create could not set up but did not need to fail for (e.g. no SPANK plugin)
    notes: list[str] = field(default_factory=list)
    #: the backup slurmctld: its host name as slurm.conf names it ("" = no backup controller)
    backup_controller: str = ""
    #: the ssh provider's: the address of the backup slurmctld's host
    backup_host: str = ""
    #: a ``cluster update``/``update-software`` under way: its process (pid, start time; 0 = none)
    #: and the nodes it acts on now, which the agent leaves alone (:func:`updating_now`)
    update_pid: int = 0
    update_start: int = 0
    updating: list[str] = field(default_factory=list)

    def node(self, name: str) -> NodeState:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ClusterError(f"cluster {self.name!r} has no node {name!r}")

    def save(self) -> None:
        self.updated = time.time()
        path = Path(self.dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, cluster_dir: Path) -> ClusterState:
        path = cluster_dir / STATE_FILE
        try:
            raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            raw["nodes"] = [NodeState(**n) for n in raw.get("nodes", [])]
            raw["procs"] = [Proc(**p) for p in raw.get("procs", [])]
            return cls(**raw)
        except FileNotFoundError:
            raise
        except (OSError, ValueError, TypeError) as exc:
            raise ClusterError(
                f"{path}: unreadable cluster state ({exc}); delete the folder by hand"
            ) from exc


def clusters_dir(home: Path) -> Path:
    return home / CLUSTERS_DIR


@contextlib.contextmanager
def cluster_lock(home: Path, name: str, *, remove: bool = False) -> Iterator[None]:
    """One create or delete of a cluster at a time (two terminals, or a retry while the first runs):
    an advisory lock on a file beside the cluster's folder. ``remove`` (delete) unlinks it, so a
    deleted cluster leaves no file; a create racing that very delete may then run unserialized."""
    root = clusters_dir(home)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if remove:
                (root / f".{name}.lock").unlink(missing_ok=True)
            fcntl.flock(f, fcntl.LOCK_UN)


def list_states(home: Path) -> list[ClusterState]:
    root = clusters_dir(home)
    found: list[ClusterState] = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if (d / STATE_FILE).is_file():
            found.append(ClusterState.load(d))
    return found


class Provider(Protocol):
    """Brings a spec up as a running Slurm cluster and takes it down again (local, ssh, existing)."""

    def create(self, spec: ClusterSpec, progress: Progress | None = None) -> ClusterState: ...

    def delete(self, name: str) -> bool: ...


class Progress(Protocol):
    def __call__(self, node: str, step: str) -> None: ...


# --- processes -------------------------------------------------------------------------------------


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot); None for a gone or zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2 :].split()
    if rest[0] in ("Z", "X"):  # a zombie has exited; its parent just has not reaped it yet
        return None
    return int(rest[19])


def alive(proc: Proc) -> bool:
    return start_time(proc.pid) == proc.start


def processes_with_env(pairs: Iterable[str], *, require: str | None = None) -> list[int]:
    """PIDs whose environment holds one of ``pairs`` (``KEY=value``) and, if given, a ``require``
    variable: how slurmstepds (double-forked, parented to PID 1) and job tasks are found."""
    wanted = {p.encode() for p in pairs}
    need = require.encode() + b"=" if require else None
    me = os.getpid()
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted.intersection(env) and (need is None or any(e.startswith(need) for e in env)):
            pids.append(int(entry.name))
    return pids


def update_running(state: ClusterState) -> bool:
    """A ``cluster update``/``update-software`` recorded in the state still runs."""
    return bool(state.update_pid) and start_time(state.update_pid) == state.update_start


def updating_now(state: ClusterState) -> set[str]:
    """The nodes a live ``cluster update`` acts on now; none when no update runs or the one
    recorded died (a killed update must not keep its nodes from being recovered)."""
    return set(state.updating) if update_running(state) else set()


def mark_deleting(cluster_dir: Path) -> ClusterState | None:
    """The cluster's state, saved as Deleting before any daemon is stopped (so ``describe`` says so
    while it happens), or None when ``cluster_dir`` holds no cluster."""
    if not (cluster_dir / "cluster.json").is_file():
        return None
    state = ClusterState.load(cluster_dir)
    state.status = "Deleting"
    state.save()
    return state


def stop(procs: Iterable[Proc], *, grace: float = 5.0) -> list[Proc]:
    """SIGTERM every live one, SIGKILL what is left after ``grace`` s; returns those that needed KILL."""
    _reap()
    live = [p for p in procs if alive(p)]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        live = [p for p in live if alive(p)]
        if not live:
            return []
        _reap()
        time.sleep(0.05)
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    while any(alive(p) for p in live):
        _reap()
        time.sleep(0.05)
    return live


#: Daemons this process started: polled so they are reaped (not left as zombies) when they stop.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def adopt(child: subprocess.Popen[bytes], role: str, node: str = "") -> Proc:
    """Record a daemon just started by this process."""
    _CHILDREN[child.pid] = child
    started = start_time(child.pid)
    return Proc(role=role, pid=child.pid, start=started if started is not None else -1, node=node)


def _reap() -> None:
    """Poll only our own Popen objects: ``waitpid(-1)`` would steal other code's exit statuses."""
    for pid, child in list(_CHILDREN.items()):
        if child.poll() is not None:
            del _CHILDREN[pid]
