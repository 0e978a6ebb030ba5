"""The local provider: every node of the spec is its own Slurm daemon on this machine.

What tests, the demo and a laptop user run. Follows the measured recipe of notes/local-slurm.md: a
private munged (own key and socket), one slurmctld, one ``slurmd -N NODE`` per worker on its own
port, fake GPUs as character devices in gres.conf. Controller and login nodes are roles (they run
their lifecycle script but no slurmd). Spares run a slurmd in no partition: warm standbys.

Creation either ends InService or ends Failed with nothing left running: every start is recorded
before the next one, and every failure path goes through :meth:`LocalProvider._teardown`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hyperscope.cluster import conf, hooks, operate
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import (
    BACKUP_CTLD,
    ClusterError,
    ClusterState,
    NodeState,
    Proc,
    Progress,
    adopt,
    alive,
    cluster_lock,
    clusters_dir,
    mark_deleting,
    processes_with_env,
    start_time,
    stop,
)

#: Set in every daemon's environment; slurmstepds inherit it, which is how delete finds them.
MARKER = "HYPERSCOPE_CLUSTER_DIR"
#: Set in a slurmd's environment: its slurmstepds inherit it, which is how one node's are found.
NODE_MARKER = "HYPERSCOPE_SLURMD_NODE"
BACKUP = BACKUP_CTLD
ON_CREATE_TIMEOUT_S = 600.0
IDLE_TIMEOUT_S = 30.0
_OUTPUT_TAIL = 4000


def missing_requirements() -> str | None:
    """Why this machine cannot run a local cluster, or None: root (slurmd) and the Debian packages."""
    if os.geteuid() != 0:
        return "the local provider needs root (slurmd runs as root)"
    missing = [b for b in ("munged", "slurmctld", "slurmd", "scontrol") if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} not found: apt-get install --no-install-recommends slurm-wlm munge"
    return None


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def runtime_dir(cluster_dir: Path) -> Path:
    """A short folder for the cluster's sockets (munge, slurmstepd), one per cluster folder: under
    /run when we may write there, else the temp folder. Spool paths of a deep ``$HYPERSCOPE_HOME``
    would pass the 108-byte limit of a unix socket path (slurmstepd then fails every task launch)."""
    root = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    tag = hashlib.sha256(str(cluster_dir.resolve()).encode()).hexdigest()[:12]
    return root / "hyperscope" / f"{cluster_dir.name[:20]}-{tag}"


def spec_digest(spec: ClusterSpec) -> str:
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:16]


class LocalProvider:
    def __init__(self, home: Path) -> None:
        self.home = home

    def cluster_dir(self, name: str) -> Path:
        return clusters_dir(self.home) / name

    # --- create ------------------------------------------------------------------------------------

    def create(self, spec: ClusterSpec, progress: Progress | None = None) -> ClusterState:
        """Bring ``spec`` up; a second call on a running cluster with the same spec changes nothing."""
        with cluster_lock(self.home, spec.name):
            return self._create(spec, progress)

    def _create(self, spec: ClusterSpec, progress: Progress | None) -> ClusterState:
        say = progress or (lambda node, step: None)
        d = self.cluster_dir(spec.name)
        if (d / "cluster.json").is_file():
            old = ClusterState.load(d)
            if old.provider != "local":  # never tear down (kill the jobs of) an adopted cluster
                raise ClusterError(f"cluster {spec.name!r} exists with the {old.provider} provider")
            if old.spec_digest != spec_digest(spec) and old.status != "Failed":
                raise ClusterError(
                    f"cluster {spec.name!r} exists with another spec ({old.spec_path}); "
                    f"`hyperscope cluster delete {spec.name}` first, or `create --replace`"
                )
            if old.status == "InService" and all(alive(p) for p in old.procs):
                say("*", "already in service")
                return old
            dead = sorted({p.role for p in old.procs if not alive(p)})
            if old.status != "Failed" and any(alive(p) for p in old.procs):
                # never tear down a cluster that still runs (and may run jobs) without being asked
                raise ClusterError(
                    f"cluster {spec.name!r} exists ({old.status}"
                    + (f"; not running: {', '.join(dead)}" if dead else "")
                    + "): the agent restarts its dead daemons by itself; "
                    "`hyperscope cluster create --replace` tears it down and creates it anew, "
                    "stopping its running jobs"
                )
            self._teardown(old)
        why = missing_requirements()
        if why:
            raise ClusterError(f"cannot create {spec.name!r} with the local provider: {why}")
        state = self._prepare(spec, d)
        try:
            self._start(spec, state, say)
        except ClusterError as exc:
            self._teardown(state, remove=False)
            state.status, state.error = "Failed", str(exc)
            state.save()
            raise
        except BaseException:
            self._teardown(state, remove=False)
            state.status, state.error = "Failed", "interrupted during create"
            state.save()
            raise
        state.status = "InService"
        state.save()
        return state

    def _prepare(self, spec: ClusterSpec, d: Path) -> ClusterState:
        if d.exists():
            shutil.rmtree(d)
        for sub in ("etc", "state", "log", "dev"):
            (d / sub).mkdir(parents=True)
        ports = (
            free_ports(len(spec.slurm_nodes()) + 1)
            if spec.slurm.port_base == 0
            else list(range(spec.slurm.port_base, spec.slurm.port_base + len(spec.slurm_nodes()) + 1))
        )
        controller = spec.groups_with("controller")[0].node_names()[0]
        state = ClusterState(
            name=spec.name,
            provider="local",
            status="Creating",
            dir=str(d),
            spec_path=str(spec.source or ""),
            spec_digest=spec_digest(spec),
            slurm_conf=str(d / "etc" / "slurm.conf"),
            shared_dir=str(spec.shared_dir),
            controller=controller,
            partition=spec.slurm.partition,
            ctld_port=ports[0],
            run_dir=str(runtime_dir(d)),
            backup_controller=f"{controller}-backup" if spec.slurm.backup_controller else "",
        )
        shutil.rmtree(state.run_dir, ignore_errors=True)
        node_ports = iter(ports[1:])
        for group, name in spec.all_nodes():
            is_slurm = group.role == "worker"
            state.nodes.append(
                NodeState(
                    name=name,
                    group=group.name,
                    role=group.role,
                    spare=group.is_spare(name),
                    slurm=is_slurm,
                    port=next(node_ports) if is_slurm else None,
                )
            )
        conf.write_files(spec, state)
        conf.keep_spec(spec, state)
        with open(state.slurm_conf, "a") as f:  # the health check and --auto-resume
            f.write("\n".join(hooks.install(spec, state)) + "\n")
        spec.shared_dir.mkdir(parents=True, exist_ok=True)
        state.save()
        return state

    def _popen(
        self,
        state: ClusterState,
        role: str,
        argv: list[str],
        log: str,
        node: str = "",
        *,
        save: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> Proc:
        env = {**os.environ, "SLURM_CONF": state.slurm_conf, MARKER: state.dir, **(extra_env or {})}
        fds = tuple(int(v) for k, v in (extra_env or {}).items() if k == operate.AGENT_LOCK_FD_ENV)
        if node:  # inherited by the node's slurmstepds: how a node's own processes are found
            env[NODE_MARKER] = node
        with open(Path(state.dir) / "log" / log, "ab") as out:
            child = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, pass_fds=fds,
            )  # fmt: skip
        proc = adopt(child, role, node)
        state.procs.append(proc)
        if save:  # the agent records a restarted node's daemon itself (nodes recover in parallel)
            state.save()
        return proc

    def _start(self, spec: ClusterSpec, state: ClusterState, say: Progress) -> None:
        m = Path(state.run_dir) / "munge"
        say(state.controller, "starting munged")
        self._popen(
            state, "munged",
            ["munged", "-F", "--force", f"--socket={m / 'munge.sock'}", f"--key-file={m / 'munge.key'}",
             f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'munged.seed'}"],
            "munged.out",
        )  # fmt: skip
        self._wait(
            lambda: (m / "munge.sock").exists(), 10, "munged did not create its socket", state, "munged.out"
        )
        say(state.controller, "starting slurmctld")
        self._popen(state, "slurmctld", self._ctld_argv(state, clear=True), "slurmctld.out")
        slurm = Slurm(Path(state.slurm_conf))
        self._wait(slurm.ping, 15, "slurmctld does not answer `scontrol ping`", state, "slurmctld.log")
        if state.backup_controller:
            say(state.controller, "starting the backup slurmctld")
            self._popen(state, BACKUP, self._ctld_argv(state, backup=True), "slurmctld-backup.out")
            self._wait(
                lambda: slurm.controllers().get(state.backup_controller) == "UP", 30,
                "the backup slurmctld does not answer `scontrol ping`", state, "slurmctld-backup.out",
            )  # fmt: skip
        groups = {g.name: g for g in spec.groups}
        for node in state.nodes:
            say(node.name, "running on_create.sh")
            node.status = "Configuring"
            state.save()
            self._on_create(spec, state, node, groups[node.group].gpus_per_node)
            if node.slurm:
                say(node.name, "starting slurmd")
                self.start_slurmd(state, node)
            else:
                node.status, node.since = "Running", time.time()
        wanted = {n.name for n in state.nodes if n.slurm}

        def idle() -> bool:
            ready = {n.name for n in slurm.nodes() if n.state == "IDLE" and not n.flags}
            return wanted <= ready

        self._wait(idle, IDLE_TIMEOUT_S, "the nodes did not all become idle", state, "slurmctld.log")
        for node in state.nodes:
            if node.slurm:
                node.status, node.since = "Running", time.time()
                say(node.name, "idle")
        if spec.recovery.agent:
            say(state.controller, "starting the recovery agent")
            self.start_agent(state)

    def restart_controller(self, state: ClusterState) -> list[str]:
        """Start again whichever of munged and slurmctld has died (the agent's watchdog): slurmctld
        without ``-c``, so it recovers its jobs and nodes from StateSaveLocation and running jobs go
        on. The roles restarted."""
        dead = [p for p in state.procs if p.role in ("munged", "slurmctld", BACKUP) and not alive(p)]
        roles = [p.role for p in dead]
        state.procs = [p for p in state.procs if p not in dead]
        m = Path(state.run_dir) / "munge"
        if "munged" in roles:
            (m / "munge.sock").unlink(missing_ok=True)
            self._popen(
                state, "munged",
                ["munged", "-F", "--force", f"--socket={m / 'munge.sock'}", f"--key-file={m / 'munge.key'}",
                 f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'munged.seed'}"],
                "munged.out",
            )  # fmt: skip
            self._wait(lambda: (m / "munge.sock").exists(), 10, "munged did not restart", state, "munged.out")
        slurm = Slurm(Path(state.slurm_conf))
        if "slurmctld" in roles:
            self._popen(state, "slurmctld", self._ctld_argv(state), "slurmctld.out")
            self._wait(slurm.ping, 30, "slurmctld did not restart", state, "slurmctld.log")
        if BACKUP in roles:
            self._popen(state, BACKUP, self._ctld_argv(state, backup=True), "slurmctld-backup.out")
        return roles

    def _ctld_argv(self, state: ClusterState, *, backup: bool = False, clear: bool = False) -> list[str]:
        """slurmctld in the foreground (``clear``: a fresh cluster forgets old state). With a backup
        controller, each runs in its own UTS namespace under the host name slurm.conf gives it,
        and the backup in a mount namespace where the pid-file folder is its own."""
        core = ["slurmctld", "-D", *(["-c"] if clear else []), "-f", state.slurm_conf]
        if not state.backup_controller:
            return core
        ctld = conf.ctld_dir(state)
        own = ctld.with_name("ctld-backup") if backup else ctld
        own.mkdir(parents=True, exist_ok=True)
        ctld.mkdir(parents=True, exist_ok=True)
        # with NoCtldInAddrAny slurmctld resolves its own name: both names, in its own /etc/hosts
        hosts = ctld.with_name("hosts")
        system = Path("/etc/hosts").read_text() if Path("/etc/hosts").is_file() else ""
        hosts.write_text(system + f"\n127.0.0.1 {state.controller}\n127.0.0.2 {state.backup_controller}\n")
        name = state.backup_controller if backup else state.controller
        script = (
            'hostname "$1" && mount --bind "$4" /etc/hosts && '
            '{ [ "$2" = "$3" ] || mount --bind "$2" "$3"; } && shift 4 && exec "$@"'
        )
        return [
            "unshare", "--uts", "--mount", "--propagation", "private",
            "sh", "-c", script, "sh", name, str(own), str(ctld), str(hosts), *core,
        ]  # fmt: skip

    def start_agent(self, state: ClusterState) -> Proc | None:
        """``hyperscope agent`` on the controller: one more tracked daemon, stopped first by delete
        (None when a watchdog's agent was quicker: it records itself)."""
        argv = [
            sys.executable,
            "-m",
            "hyperscope",
            "agent",
            "--cluster",
            state.name,
            "--home",
            str(self.home),
        ]
        with operate.agent_lock(Path(state.dir)) as lock_env:
            if lock_env is None:
                return None
            return self._popen(state, "agent", argv, "agent.out", extra_env=lock_env)

    def start_slurmd(self, state: ClusterState, node: NodeState, *, save: bool = True) -> Proc:
        """The node's slurmd, and its health loop with it (``hooks.start_loop``)."""
        proc = self._popen(
            state, "slurmd", ["slurmd", "-D", "-N", node.name, "-f", state.slurm_conf],
            f"slurmd-{node.name}.out", node.name, save=save,
        )  # fmt: skip
        hooks.start_loop(state, node.name, proc.pid)
        return proc

    def run_on_create(
        self, spec: ClusterSpec, state: ClusterState, node: NodeState, *, update: bool = False
    ) -> None:
        """``on_create.sh`` for one node, as at create (a fresh node replacing a failed one);
        ``update``: the software update step, ``on_update.sh`` where the lifecycle folder has one,
        else ``on_create.sh`` again, with ``HYPERSCOPE_UPDATE=1``."""
        gpus = {g.name: g.gpus_per_node for g in spec.groups}[node.group]
        self._on_create(spec, state, node, gpus, update=update)

    def _on_create(
        self, spec: ClusterSpec, state: ClusterState, node: NodeState, gpus: int, *, update: bool = False
    ) -> None:
        script = spec.on_create
        if update and spec.lifecycle_dir is not None and (spec.lifecycle_dir / "on_update.sh").is_file():
            script = spec.lifecycle_dir / "on_update.sh"
        env = {
            **({"HYPERSCOPE_UPDATE": "1"} if update else {}),
            **os.environ,
            "SLURM_CONF": state.slurm_conf,
            "HYPERSCOPE_CLUSTER": state.name,
            "HYPERSCOPE_GROUP": node.group,
            "HYPERSCOPE_ROLE": node.role,
            "HYPERSCOPE_NODE": node.name,
            "HYPERSCOPE_SPARE": "1" if node.spare else "0",
            "HYPERSCOPE_GPUS": str(gpus),
            "HYPERSCOPE_CONTROLLER": state.controller,
            "HYPERSCOPE_SHARED_DIR": state.shared_dir,
            "HYPERSCOPE_RESOURCE_CONFIG": str(Path(state.dir) / "etc" / "resource_config.json"),
        }
        try:
            done = subprocess.run(
                ["bash", str(script)], cwd=spec.lifecycle_dir, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=ON_CREATE_TIMEOUT_S, check=False,
            )  # fmt: skip
            raw: bytes | None = done.stdout
            rc: int | None = done.returncode
        except subprocess.TimeoutExpired as exc:
            raw, rc = exc.stdout, None
        output = (raw or b"").decode(errors="replace")
        (Path(state.dir) / "log" / f"{script.stem}-{node.name}.log").write_text(output)
        node.output = output[-_OUTPUT_TAIL:]
        if rc != 0:
            node.status, node.since = "Failed", time.time()
            how = f"exited with status {rc}" if rc is not None else f"ran over {ON_CREATE_TIMEOUT_S:g} s"
            raise ClusterError(
                f"{script} {how} on node {node.name} (group {node.group}, role {node.role}):\n"
                + (node.output.rstrip() or "(no output)")
            )

    def _wait(
        self, ready: Callable[[], bool], timeout: float, what: str, state: ClusterState, log: str
    ) -> None:
        """Poll ``ready``; fail early, with the right log, when one of our daemons has exited."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except SlurmError:
                pass
            dead = [p for p in state.procs if not alive(p)]
            if dead or time.monotonic() > deadline:
                why, name = f"after {timeout:g} s", log
                if dead:
                    p = dead[0]
                    why, name = f"{p.role} {p.node} exited".replace("  ", " ").strip(), f"{p.role}.out"
                    if p.node:
                        name = f"{p.role}-{p.node}.out"
                tail = _tail(Path(state.dir) / "log" / name)
                raise ClusterError(f"{state.name}: {what} ({why}); last lines of its log:\n{tail}")
            time.sleep(0.05)

    # --- delete ------------------------------------------------------------------------------------

    def delete(self, name: str) -> bool:
        """Stop every daemon of ``name`` and remove its state; False when there was no such cluster."""
        with cluster_lock(self.home, name, remove=True):
            return self._delete(name)

    def _delete(self, name: str) -> bool:
        d = self.cluster_dir(name)
        state = mark_deleting(d)
        if state is None:
            if d.is_dir():
                shutil.rmtree(d)
            return False
        self._teardown(state)
        return True

    def _teardown(self, state: ClusterState, *, remove: bool = True) -> None:
        """The agent (so it replaces nothing meanwhile), slurmds, then their slurmstepds and job
        tasks, then slurmctld, then munged."""
        stop([p for p in state.procs if p.role == "agent"])
        by_role = {
            r: [p for p in state.procs if p.role == r] for r in ("slurmd", "slurmctld", BACKUP, "munged")
        }
        stop([*by_role["slurmd"], *self._strays(state)])
        # a health check or agent slurmd started while the first sweep ran: one more
        stop(self._strays(state))
        stop([*by_role["slurmctld"], *by_role[BACKUP]])
        stop(by_role["munged"])
        state.procs = []
        if state.run_dir:
            shutil.rmtree(state.run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # the shared parent, once no cluster uses it
                Path(state.run_dir).parent.rmdir()
        if remove:
            shutil.rmtree(state.dir, ignore_errors=True)
        else:
            state.save()

    def _strays(self, state: ClusterState) -> list[Proc]:
        """Everything that carries the cluster's marker (slurmstepds, job tasks, health checks, a
        restarted agent) but is not slurmctld, munged or their children (slurmscriptd stops with
        slurmctld)."""
        keep = {p.pid for p in state.procs if p.role in ("slurmctld", BACKUP, "munged")}
        found = processes_with_env([f"{MARKER}={state.dir}"]) + processes_with_env(
            [f"SLURM_CONF={state.slurm_conf}"], require="SLURM_JOB_ID"
        )
        return [
            Proc("stray", pid, t)
            for pid in set(found) - keep
            if (t := start_time(pid)) is not None and _parent(pid) not in keep and pid != os.getpid()
        ]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except OSError:
        return f"({path} is missing)"
