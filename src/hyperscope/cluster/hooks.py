"""What a cluster's nodes need for resilience beyond plain Slurm (the builders serve every
provider: :func:`install` is the local provider's, ``ssh_health``/``ssh_hooks`` put the same
files on an ssh cluster's hosts, ``adopted_hooks`` on an adopted cluster's shared directory):
the ``--auto-resume`` SPANK plugin (PlugStackConfig) and ``hyperscope health --drain`` as
Slurm's HealthCheckProgram, and its quick form as the Prolog (run on every node of a job before
its first step: a node that fails it is drained and the job goes elsewhere instead of starting
on a sick node); the TaskProlog that gives plain-``sbatch`` jobs heartbeats and checkpoints.

Slurm runs the HealthCheckProgram with nothing but ``SLURMD_NODENAME`` in its environment
(notes/local-slurm.md, pitfall 16), so it is a generated wrapper that knows the cluster: its
slurm.conf, the node's spool and the shared directory, this very Python, and the node's fault
file (``<cluster dir>/faults/<node>.json``, the seam to rehearse a GPU fault on one node).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import spank

WRAPPER = "healthcheck.sh"


def faults_dir(state: ClusterState) -> Path:
    """``<node>.json`` here is the node's ``HYPERSCOPE_HEALTH_FAULTS`` (absent: the real hardware)."""
    return Path(state.dir) / "faults"


def auto_resume_log(state: ClusterState) -> Path:
    """The plugin's decisions, one line each, and its one-requeue-per-attempt markers beside them:
    a folder every node of the cluster shares. A local cluster's own folder; on hosts (ssh), the
    shared directory, in a folder of this cluster's creation (a re-created cluster's job 1 is not
    an old job 1), removed by ``delete``; an adopted cluster's (``cluster hooks``) too."""
    if state.provider != "local":
        return (
            Path(state.shared_dir)
            / "hyperscope"
            / "auto-resume"
            / f"{state.name}-{int(state.created)}"
            / "auto-resume.log"
        )
    return Path(state.dir) / "log" / "auto-resume.log"


#: at most how often slurmd runs the wrapper: the node's loop checks every
#: ``recovery.health_check_interval`` s by itself; the wrapper only starts a loop that is gone. Each
#: run is a fork of slurmd and a bash start, which every 5 s on 32 local nodes was more than half
#: of an idle cluster's CPU (bench/cluster_lifecycle.py)
KEEPER_INTERVAL_S = 30


#: the loop writes to the node's spool and the shared directory at most this often once they
#: were found writable (free space is still checked every pass): a probe's fsync and unlink were
#: most of a healthy pass's CPU, times every node
PROBE_EVERY_S = 30


def keeper_interval(spec: ClusterSpec) -> int:
    """slurm.conf's HealthCheckInterval: a loop that died comes back within this many seconds (a
    node's first loop starts with its slurmd, which runs the wrapper at its start)."""
    return max(int(spec.recovery.health_check_interval), KEEPER_INTERVAL_S)


def healthcheck_wrapper(
    spec: ClusterSpec, state: ClusterState, python: str = sys.executable, *, remote: bool = False
) -> str:
    """Slurm's HealthCheckProgram and Prolog. The periodic check is one long-lived
        ``python -m hyperscope.health --loop`` per node, started by the first run and holding the
        node's lock (``flock -n``) and naming itself in a pid file: every later run, while that loop
    lives, exits at once on bash builtins alone (no fork, no exec: it runs on every node every
    interval), since a Python start per node every
        few seconds kept two cores busy at 32 nodes on one machine. The Prolog runs the quick checks
        before every job (Prologs of one node wait their turn, so every job's nodes are checked). Each
        node's expected GPU count comes from its group; the spec's folder of user checks; DCGM's
        diagnostic at most once per ``recovery.dcgm_interval_s``. It carries the cluster's marker, so
        ``delete`` stops a check still running. It is also the agent's watchdog: run by every slurmd
        every few seconds, it starts the agent again when none holds the agent's lock (the agent, in
        turn, restarts slurmctld and munged). ``remote`` (the ssh provider): for a host, everything
        under the cluster's folder there (``run_dir``: faults, locks, spool), the host's own GPU
        devices, and no agent watchdog (the agent runs on the machine that created the cluster)."""
    q = shlex.quote
    spool = Path(state.run_dir) / "spool"
    r = spec.recovery
    groups = {g.name: g for g in spec.groups}
    by_gpus: dict[int, list[str]] = {}
    for n in state.nodes:
        if n.slurm and groups[n.group].gpus_per_node:
            by_gpus.setdefault(groups[n.group].gpus_per_node, []).append(n.name)
    watch_agent = r.agent and not remote
    cdir = state.run_dir if remote else state.dir
    agent = f" --agent-watchdog {q(state.dir)}" if watch_agent else ""
    cases = "".join(f"  {'|'.join(names)}) gpus={k} ;;\n" for k, names in sorted(by_gpus.items()))
    checks = f" --checks-dir {q(str(r.health_checks_dir))}" if r.health_checks_dir else ""
    devices = "/dev" if remote else q(str(Path(state.dir) / "dev")) + "/$node"
    home = Path(state.dir).parents[1]
    watchdog = (
        f"""# the agent's watchdog: none holds its lock (it died) -> start one (a second one exits at once)
d={q(state.dir)}
if grep -qsE '"status": "(InService|Updating)"' "$d/cluster.json" && flock -n "$d/agent.lock" true; then
    setsid {q(python)} -m hyperscope agent --cluster {q(state.name)} --home {q(str(home))} \\
        >>"$d/log/agent.out" 2>&1 </dev/null &
fi
"""
        if watch_agent
        else ""
    )
    locks = Path(state.run_dir) / "locks"
    return f"""#!/bin/bash
# Written by hyperscope for cluster {state.name}: Slurm's HealthCheckProgram. Slurm gives it only
# SLURMD_NODENAME, so everything else is set here.
node=${{SLURMD_NODENAME:?SLURMD_NODENAME is not set}}
spool={q(str(spool))}/"$node"
locks={q(str(locks))}
# fast path, bash builtins only (no process started): the periodic run while this node's loop
# lives (its pid file names a process whose command line is this node's loop, started by this
# slurmd); the loop is the agent's watchdog meanwhile. One started by an earlier slurmd of this
# node would end at its next pass: it is ended below and a fresh one started now.
stale="" parent=${{HYPERSCOPE_SLURMD_PID:-$PPID}}
if [ -z "${{SLURM_JOB_ID:-}}" ] && read -r pid 2>/dev/null <"$locks/loop-$node.pid" &&
    mapfile -d '' argv 2>/dev/null <"/proc/$pid/cmdline" &&
    [[ " ${{argv[*]}} " == *" --loop "*" --path $spool "* ]]; then
    [[ " ${{argv[*]}} " == *" --parent $parent "* ]] && exit 0
    stale=$pid
fi
export SLURM_CONF={q(state.slurm_conf)}
export HYPERSCOPE_CLUSTER={q(state.name)} HYPERSCOPE_SHARED_DIR={q(state.shared_dir)}
export HYPERSCOPE_CLUSTER_DIR={q(cdir)}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
{watchdog}# never two periodic checks of one node at once: a second one exits at once, the one running now
# answers for both. Prologs (SLURM_JOB_ID set) queue up instead: each job's nodes are checked.
if [ -n "${{SLURM_JOB_ID:-}}" ]; then
    mkdir -p "$locks" && exec 9>>"$locks/prolog-$node" && flock -w 120 9
else
    mkdir -p "$locks" && exec 9>>"$locks/healthcheck-$node" || exit 0
    if ! flock -n 9; then
        [ -n "$stale" ] || exit 0
        kill "$stale" 2>/dev/null
        flock -w 30 9 || exit 0
    fi
fi
faults={q(str(Path(cdir) / "faults"))}/$node.json
if [ -e "$faults" ]; then export HYPERSCOPE_HEALTH_FAULTS="$faults"; else unset HYPERSCOPE_HEALTH_FAULTS; fi
gpus=0
case "$node" in
{cases}esac
expect=""; [ "$gpus" -gt 0 ] && expect="--expect-gpus $gpus --gpu-devices {devices}"
common=(--drain --node "$node" $expect{checks} --dcgm-every {r.dcgm_interval_s} \\
    --dcgm-record "$spool/.dcgm-diag.json" --path "$spool" --min-free-gib 0.1 --shared {q(state.shared_dir)})
if [ -z "${{SLURM_JOB_ID:-}}" ]; then
    # periodic: one long-lived check per node, every {r.health_check_interval} s, holding this lock (fd 9)
    # for its life; it ends with this node's slurmd or when this script is rewritten
    setsid -f {q(python)} -m hyperscope.health --loop {r.health_check_interval} --parent "$parent" \\
        --watch "$0" --faults-file "$faults" --pid-file "$locks/loop-$node.pid" \\
        --probe-every {PROBE_EVERY_S}{agent} \\
        "${{common[@]}}" </dev/null >/dev/null 2>&1 &
    exit 0
fi
# As the Prolog (Slurm sets SLURM_JOB_ID) only the quick checks: it runs before every job.
exec {q(python)} -m hyperscope.health --quick "${{common[@]}}" >/dev/null
"""


def start_loop(state: ClusterState, node: str, slurmd_pid: int) -> None:
    """Start ``node``'s health loop beside the slurmd just started (slurmd itself first runs the
    wrapper only at its first HealthCheckInterval, up to :data:`KEEPER_INTERVAL_S` later): the
    wrapper, as slurmd would run it, told which slurmd the loop ends with. A node without the
    wrapper (a cluster created before it) is left to slurmd."""
    wrapper = Path(state.dir) / "etc" / WRAPPER
    if not wrapper.is_file():
        return
    env = {"SLURMD_NODENAME": node, "HYPERSCOPE_SLURMD_PID": str(slurmd_pid)}
    try:  # not waited for here (a create starts every node's): reaped by a thread of its own
        started = subprocess.Popen(
            [str(wrapper)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    except OSError:
        return  # then slurmd's own first run starts it
    threading.Thread(target=started.wait, daemon=True).start()


TASK_PROLOG = "taskprolog.sh"


def task_prolog(state: ClusterState) -> str:
    """Slurm's TaskProlog: what it prints as ``export NAME=value`` is set in every task, so a job
    submitted with plain sbatch gets what ``hyperscope submit`` gives its jobs (unless the job set
    them itself): heartbeats where the agent watches them (hang detection for every job that calls
    ``hyperscope.step()``) and a checkpoint folder of its own on the shared directory, the same
    across its requeues (the job id stays; the cluster's creation time keeps a re-created
    cluster's job 1 from resuming an old job 1's checkpoints)."""
    shared = Path(state.shared_dir)
    beats = shared / "hyperscope" / "heartbeats"
    ckpt = shared / "checkpoints" / f"{state.name}-{int(state.created)}-job"
    return f"""#!/bin/bash
# Written by hyperscope for cluster {state.name}: Slurm's TaskProlog (runs before every task).
[ -n "${{HYPERSCOPE_HEARTBEAT_DIR:-}}" ] || echo "export HYPERSCOPE_HEARTBEAT_DIR={beats}"
[ -n "${{HYPERSCOPE_CHECKPOINT_DIR:-}}" ] || echo "export HYPERSCOPE_CHECKPOINT_DIR={ckpt}${{SLURM_JOB_ID:-}}"
exit 0
"""


def write_scripts(spec: ClusterSpec, state: ClusterState, etc: Path, *, python: str, remote: bool) -> None:
    """The wrapper (HealthCheckProgram and Prolog) and the TaskProlog into ``etc``: the folder that
    is, or is copied to, ``etc`` of the cluster's folder on every node (any provider)."""
    for name, text in (
        (WRAPPER, healthcheck_wrapper(spec, state, python, remote=remote)),
        (TASK_PROLOG, task_prolog(state)),
    ):
        (etc / name).write_text(text)
        (etc / name).chmod(0o755)


def conf_lines(spec: ClusterSpec, at: str) -> list[str]:
    """slurm.conf's lines for the scripts of :func:`write_scripts`, found in ``at`` on every node."""
    return [
        f"HealthCheckProgram={at}/{WRAPPER}",
        f"HealthCheckInterval={keeper_interval(spec)}",  # the wrapper: it starts a loop that is gone
        "HealthCheckNodeState=ANY",
        f"Prolog={at}/{WRAPPER}",
        f"TaskProlog={at}/{TASK_PROLOG}",
    ]


def plugin_line(
    state: ClusterState,
    etc: Path,
    *,
    at: str,
    log: str,
    scontrol: str,
    copy: bool,
    notes: list[str] | None = None,
) -> str | None:
    """Build the ``--auto-resume`` plugin here (cached in the cluster's ``lib``) and write
    plugstack.conf into ``etc``; ``copy``: the plugin goes into ``etc`` too, to travel with it (to
    every host). The PlugStackConfig line naming plugstack.conf in ``at``, or None with a note
    (no libslurm-dev or gcc here: a cluster without ``--auto-resume``, never a failed create).
    The note goes to ``notes``, by default the cluster's own (``describe`` shows them); an
    adopted cluster's ``hooks`` passes a list of its own, since nothing of that cluster changes."""
    said = state.notes if notes is None else notes
    try:
        built = spank.build(Path(state.dir) / "lib")
    except spank.SpankBuildError as exc:
        note = f"srun --auto-resume is not available: {exc}"
        if note not in said:
            said.append(note)
        return None
    plugin = f"{at}/{built.name}" if copy else str(built)
    if copy:
        shutil.copyfile(built, etc / built.name)
    (etc / "plugstack.conf").write_text(
        f"required {plugin} scontrol={scontrol} conf={state.slurm_conf} log={log}\n"
    )
    return f"PlugStackConfig={at}/plugstack.conf"


def install(spec: ClusterSpec, state: ClusterState) -> list[str]:
    """The local provider's: write the wrapper and plugstack.conf, build the plugin; the
    slurm.conf lines that use them (every node is on this machine, so every path is this one's)."""
    etc = Path(state.dir) / "etc"
    faults_dir(state).mkdir(parents=True, exist_ok=True)
    write_scripts(spec, state, etc, python=sys.executable, remote=False)
    lines = conf_lines(spec, str(etc))
    scontrol = shutil.which("scontrol") or "scontrol"
    plug = plugin_line(
        state, etc, at=str(etc), log=str(auto_resume_log(state)), scontrol=scontrol, copy=False
    )
    return [*lines, plug] if plug else lines
