"""What the ``hyperscope cluster`` commands call: pick the provider, and join the recorded state with
what Slurm says now. Kept apart from the providers so the CLI (and later the UI's API) never reads a
state file or runs a Slurm command itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from hyperscope.cluster import jobs, ssh
from hyperscope.cluster import update as updates
from hyperscope.cluster.existing import ExistingProvider
from hyperscope.cluster.local import LocalProvider
from hyperscope.cluster.slurm import Node, Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.ssh import SshProvider
from hyperscope.cluster.state import (
    ClusterError,
    ClusterNotFound,
    ClusterState,
    Progress,
    Provider,
    alive,
    clusters_dir,
    list_states,
)
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import calm, keeper
from hyperscope.store.catalog import Job as CatalogJob
from hyperscope.store.catalog import JobStatus
from hyperscope.store.store import Store


def provider_for(kind: str, home: Path) -> Provider:
    if kind == "local":
        return LocalProvider(home)
    if kind == "existing":
        return ExistingProvider(home)
    if kind == "ssh":
        return SshProvider(home)
    raise ClusterError(f"unknown provider {kind!r}; use local, ssh or existing")


def _slurm(state: ClusterState) -> Slurm:
    """Slurm's commands for this cluster: here, or on the controller's host (ssh provider)."""
    return ssh.slurm_for(state) if state.provider == "ssh" else Slurm(Path(state.slurm_conf))


def create(
    spec_file: Path, home: Path, progress: Progress | None = None, *, replace: bool = False
) -> ClusterState:
    """Bring the spec up. A cluster of that name that is still running is refused (the same spec
    in service is returned unchanged) unless ``replace``: then it is deleted first — its running
    jobs stopped, and said so through ``progress`` — and its agent.log kept in the new cluster's
    ``log/`` folder."""
    spec: ClusterSpec = load_spec(spec_file)
    d = clusters_dir(home) / spec.name
    kept = ""
    if replace and (d / "cluster.json").is_file():
        say = progress or (lambda node, step: None)
        old = ClusterState.load(d)
        try:
            ctld = any(p.role == "slurmctld" and alive(p) for p in old.procs) or old.provider != "local"
            # recorded first (the agent, which syncs, may be the daemon that died): then the
            # delete below marks them Stopped
            live = list(jobs.sync(old, _slurm(old)).live.values()) if ctld else []
        except HyperscopeError:
            live = []
        running = [j for j in live if j.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING)]
        if running:
            ids = ", ".join(f"{j.id} ({j.name}, {j.state.lower()})" for j in running)
            say("*", f"replacing the cluster: stopping its {len(running)} unfinished job(s): {ids}")
        else:
            say("*", "replacing the cluster (no job running)")
        old_log = d / "agent.log"
        kept = old_log.read_text() if old_log.is_file() else ""
        delete(spec.name, home)
        kept_name = f"agent-{int(old.created)}.log"
    state = provider_for(spec.provider, home).create(spec, progress)
    if kept:
        (Path(state.dir) / "log" / kept_name).write_text(kept)
    return state


def update(spec_file: Path, home: Path, progress: Progress, *, drain_timeout_s: float) -> updates.UpdatePlan:
    """Change a live cluster to its edited spec (counts, groups); what was done."""
    spec = load_spec(spec_file)
    return updates.update(home, spec, progress, drain_timeout_s=drain_timeout_s)


def update_software(
    name: str, home: Path, progress: Progress, *, batch: int, drain_timeout_s: float
) -> list[str]:
    load(name, home)  # a clear "no cluster named" first
    return updates.update_software(home, name, progress, batch=batch, drain_timeout_s=drain_timeout_s)


def load(name: str, home: Path) -> ClusterState:
    d = clusters_dir(home) / name
    try:
        return ClusterState.load(d)
    except FileNotFoundError:
        raise ClusterNotFound(name) from None


def delete(name: str, home: Path) -> bool:
    """True when a cluster was deleted; False when there was none (deleting twice is fine). Its
    jobs' last states are synced first; those still running end Stopped in the catalog."""
    d = clusters_dir(home) / name
    state = ClusterState.load(d) if (d / "cluster.json").is_file() else None
    if state is not None:
        _sync_quietly(name, home)
    deleted = provider_for(state.provider if state else "local", home).delete(name)
    if state is not None and state.provider != "existing":  # an adopted cluster's jobs run on
        with contextlib.suppress(HyperscopeError):
            jobs.cluster_gone(state)
    return deleted


def list_clusters(home: Path) -> list[ClusterState]:
    return list_states(home)


@dataclass(frozen=True, slots=True)
class Description:
    state: ClusterState
    running: bool  # every daemon we started is alive
    slurm_version: str  # "" when Slurm does not answer
    groups: list[tuple[str, str, int, int]]  # name, role, nodes, spares
    jobs: list[CatalogJob]  # the cluster's jobs in the shared store's catalog, just synced
    jobs_note: str  # why they could not be synced, else ""


def _running(state: ClusterState) -> bool:
    """Ours: every daemon we started is alive. Adopted: its slurmctld answers."""
    if state.provider in ("existing", "ssh"):
        return _slurm(state).ping()
    return bool(state.procs) and all(alive(p) for p in state.procs)


def describe(name: str, home: Path) -> Description:
    state = load(name, home)
    keeper.revive(home, name, "`hyperscope cluster describe`")
    running = _running(state)
    version = ""
    if running:
        try:
            version = _slurm(state).version()
        except SlurmError:
            version = ""
    groups: dict[str, tuple[str, int, int]] = {}
    for n in state.nodes:
        role, count, spares = groups.get(n.group, (n.role, 0, 0))
        groups[n.group] = (role, count + (not n.spare), spares + n.spare)
    synced, note = _sync_quietly(name, home) if running else ([], "")
    return Description(state, running, version, [(g, *v) for g, v in groups.items()], synced, note)


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    group: str
    role: str
    spare: bool
    status: str  # ours: Pending, Configuring, Running, Failed
    slurm_state: str  # Slurm's, e.g. idle, mixed, idle+drain; "-" for nodes without slurmd
    health: str  # healthy, unhealthy (with Slurm's reason), unknown
    since: str  # ISO time of our last status change
    replacements: int
    last_action: str  # the recovery agent's last decision about it, with its reason ("" = none)
    straggler: str = ""  # a rank on it slower than the others' now, as the agent found ("" = none)


def _health(node: Node | None, has_slurmd: bool, running: bool) -> str:
    if not has_slurmd:
        return "healthy" if running else "unknown"
    if node is None:
        return "unknown"
    if node.available:
        return "healthy"
    return f"unhealthy: {node.reason}" if node.reason else "unhealthy"


def list_nodes(name: str, home: Path) -> list[NodeRow]:
    state = load(name, home)
    keeper.revive(home, name, "`hyperscope cluster list-nodes`")
    running = _running(state)
    live: dict[str, Node] = {}
    if running:
        try:
            live = {n.name: n for n in _slurm(state).nodes()}
        except SlurmError:
            live = {}
        _sync_quietly(name, home)
    rows = []
    for n in state.nodes:
        s = live.get(n.name)
        rows.append(
            NodeRow(
                node=n.name,
                group=n.group,
                role=n.role,
                spare=n.spare,
                status=n.status,
                slurm_state=s.display_state if s else ("-" if not n.slurm else "unknown"),
                health=_health(s, n.slurm, running and n.status == "Running"),
                since=dt.datetime.fromtimestamp(n.since, dt.UTC).isoformat(timespec="seconds"),
                replacements=n.replacements,
                last_action=n.last_action,
                straggler=n.straggler,
            )
        )
    return rows


#: What ``replace-node`` / ``reboot-node`` set, as HyperPod users do with ``scontrol``; the agent acts on it.
MARKS = {"replace": "Action:Replace", "reboot": "Action:Reboot"}


def mark_node(name: str, home: Path, node: str, action: str, *, now: bool = False) -> str:
    """Ask the agent to replace or reboot ``node`` with the reason ``Action:Replace`` /
    ``Action:Reboot``, as HyperPod users mark nodes: Slurm state FAIL, so the node takes no new
    job and the agent acts once its running jobs end; ``now``: state DOWN, so its jobs are
    requeued at once and the agent acts at once. The command run."""
    state = load(name, home)
    n = state.node(node)
    if not n.slurm:
        raise ClusterError(f"node {node} of cluster {name!r} runs no slurmd ({n.role}); nothing to {action}")
    if action not in MARKS:
        raise ClusterError(f"unknown node action {action!r}; use replace or reboot")
    argv = (
        "scontrol",
        "update",
        f"nodename={node}",
        f"state={'down' if now else 'fail'}",
        f"reason={MARKS[action]}",
    )
    _slurm(state).run(*argv)
    return " ".join(argv)


def jobs_on(name: str, home: Path, node: str) -> list[int]:
    """Ids of the jobs running (or starting, or ending) on ``node`` now."""
    state = load(name, home)
    running = [j for j in _slurm(state).jobs() if j.state in ("RUNNING", "CONFIGURING", "COMPLETING")]
    return [j.id for j in running if j.nodes and node in jobs.expand_hostlist(j.nodes)]


def shell_env(name: str, home: Path, node: str | None = None) -> tuple[dict[str, str], Path]:
    """The environment and folder of a shell "on" a node (the login node by default, else the
    controller), as HyperPod users log in through Session Manager: ``SLURM_CONF`` set, so plain
    ``sinfo``/``sbatch``/``srun`` reach this cluster, and the node's facts, as its lifecycle script saw."""
    state = load(name, home)
    if state.status != "InService":
        raise ClusterError(
            f"cluster {name!r} is {state.status}, not InService; see `hyperscope cluster describe {name}`"
        )
    if state.provider == "ssh":
        host = state.node(node or state.controller).host
        raise ClusterError(
            f"`cluster shell` opens a shell on this machine; log in to {host} with ssh and "
            f"export SLURM_CONF={state.slurm_conf}"
        )
    logins = [n for n in state.nodes if n.role == "login"]
    target = state.node(node) if node else (logins[0] if logins else state.node(state.controller))
    env = {
        **os.environ,
        "SLURM_CONF": state.slurm_conf,
        "HYPERSCOPE_CLUSTER": state.name,
        "HYPERSCOPE_NODE": target.name,
        "HYPERSCOPE_GROUP": target.group,
        "HYPERSCOPE_ROLE": target.role,
        "HYPERSCOPE_CONTROLLER": state.controller,
        "HYPERSCOPE_SHARED_DIR": state.shared_dir,
    }
    return env, Path(state.shared_dir)


#: a user's own settings of these win over submit's defaults
_USER_OVERRIDES = ("HYPERSCOPE_HEARTBEAT_DIR", "HYPERSCOPE_CHECKPOINT_DIR")


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: int  # Slurm's
    catalog_job: str  # the entry in the shared store's jobs catalog (HYPERSCOPE_JOB in the job)
    store: Path  # HYPERSCOPE_HOME in the job: where its profiles land
    output: str  # Slurm's StdOut path; "" when slurmctld did not say
    status: JobStatus  # in the catalog, just after sbatch returned (the end, with --wait)


def submit(name: str, home: Path, sbatch_args: list[str]) -> Submitted:
    """``sbatch`` against the cluster, the job's entry in the shared store's catalog reserved first
    so the job's own profiles join it (plain ``sbatch`` with SLURM_CONF works too; its job gets an
    entry at the next sync)."""
    state = load(name, home)
    if state.status != "InService":
        raise ClusterError(f"cluster {name!r} is {state.status}, not InService; nothing submitted")
    keeper.revive(home, name, "`hyperscope cluster submit`")
    slurm = _slurm(state)
    reserved = jobs.reserve(state, jobs.submit_name(state.name, sbatch_args))
    env = {
        "HYPERSCOPE_HOME": str(jobs.store_home(state)),
        "HYPERSCOPE_JOB": reserved.name,
        # progress for the agent's hang detection, and where hyperscope.checkpoint saves
        "HYPERSCOPE_HEARTBEAT_DIR": str(Path(state.shared_dir) / "hyperscope" / "heartbeats"),
        "HYPERSCOPE_CHECKPOINT_DIR": str(Path(state.shared_dir) / "checkpoints" / reserved.name),
        **{k: v for k, v in os.environ.items() if k in _USER_OVERRIDES},
    }
    try:
        job_id = slurm.submit(*sbatch_args, env=env)
    except BaseException:
        with Store(jobs.store_home(state)) as store:
            store.catalog.remove(reserved.name)
        raise
    calm.nudge(state.dir)  # the agent watches the job from its next pass on
    try:
        synced = jobs.sync(state, slurm, link=(job_id, reserved.name))
    except HyperscopeError:  # the job is in; the next sync records it
        return Submitted(job_id, reserved.name, jobs.store_home(state), "", JobStatus.IN_PROGRESS)
    live = synced.live.get(job_id)
    output = live.fields.get("StdOut", "") if live else ""
    status = next(j.status for j in synced.catalog if j.name == reserved.name)
    return Submitted(job_id, reserved.name, jobs.store_home(state), output, status)


def sync_jobs(name: str, home: Path) -> list[CatalogJob]:
    """Bring the cluster's Slurm jobs into the shared store's catalog; [] when Slurm is not running
    (nothing can be asked). Runs at submit, describe, list-nodes, jobs and delete."""
    state = load(name, home)
    if not _running(state):
        return []
    return jobs.sync(state, _slurm(state)).catalog


def _sync_quietly(name: str, home: Path) -> tuple[list[CatalogJob], str]:
    """A view of the cluster is still worth showing when its catalog cannot be written."""
    try:
        return sync_jobs(name, home), ""
    except HyperscopeError as exc:
        return [], f"jobs not synced to the catalog: {exc}"
