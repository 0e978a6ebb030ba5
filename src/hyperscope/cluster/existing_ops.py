"""What an adopted cluster's spec may ask hyperscope to do on the operator's nodes, over ssh
(``ssh:`` in an existing provider's spec; nothing of it by default):

* ``recovery.health_loops: true``: one ``python -m hyperscope.health --loop`` per node, started
  at adopt on the node's host (Slurm's ``NodeAddr``), which drains its node when a check fails
  (the agent then acts on the drain). Nothing is written to the operator's slurm.conf: the loop is
  hyperscope's own process, recorded with its host, PID and start time, and stopped by
  ``delete``. A loop that dies is started again by the agent (it looks every few seconds, one
  ssh step per host), since no slurmd of the operator's runs a wrapper of ours. Its Slurm
  configuration and the node's spool are the ones ``scontrol show config`` reports
  (``SLURM_CONF``, ``SlurmdSpoolDir``), at the same paths on the node.
* ``recovery.spare_script: FILE``: run over ssh on a spare before it joins a partition in a
  failed node's place. A spare it fails on (or whose host does not answer) is left out of the
  partition and becomes a ticket; the failed node is dealt with as without a spare.

On each host only ``ssh.remote_dir/NAME`` is written (the script, its log, the loops' fault
files); ``delete`` removes it.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Collection
from pathlib import Path

from hyperscope.cluster import ssh_ctld
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.ssh_hosts import _START_TIME, Hosts, settings, stop_command, with_env
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Proc

HEALTH = "health"  # the role of a health loop among an adopted cluster's recorded processes
SPARE_TIMEOUT_S = 600.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def remote_root(state: ClusterState) -> str:
    return f"{state.ssh['remote_dir']}/{state.name}"


def faults_file(state: ClusterState, node: str) -> str:
    """On the node's host: the loop's fault file (the seam to rehearse a failure)."""
    return f"{remote_root(state)}/faults/{node}.json"


def loop_argv(spec: ClusterSpec, state: ClusterState, node: str, config: dict[str, str]) -> list[str]:
    python = str(state.ssh.get("python") or "") or sys.executable
    spool = config.get("SlurmdSpoolDir", "/var/spool/slurmd").replace("%n", node)
    return [
        python, "-m", "hyperscope.health", "--loop", str(spec.recovery.health_check_interval),
        "--drain", "--node", node, "--path", spool, "--min-free-gib", "0.1",
        "--shared", state.shared_dir, "--faults-file", faults_file(state, node),
        "--dcgm-every", str(spec.recovery.dcgm_interval_s),
        *(["--checks-dir", str(spec.recovery.health_checks_dir)] if spec.recovery.health_checks_dir else []),
    ]  # fmt: skip


def start_health_loops(
    spec: ClusterSpec, state: ClusterState, config: dict[str, str], only: Collection[str] | None = None
) -> list[str]:
    """A loop per node (or per node named in ``only``) on its host, recorded in ``state.procs``;
    what failed, one line per host (a host that does not answer ssh gets no loop; adopting goes
    on)."""
    hosts, root, problems = Hosts(settings(state)), remote_root(state), []
    conf = config.get("SLURM_CONF", "") or str(spec.slurm_conf)
    for node in state.nodes:
        if only is not None and node.name not in only:
            continue
        if not node.host:
            problems.append(f"{node.name}: Slurm reports no NodeAddr; no health loop")
            continue
        argv = loop_argv(spec, state, node.name, config)
        q = shlex.quote(root)
        try:
            hosts.run(node.host, f"mkdir -p {q}/log {q}/faults")
            command = with_env({"SLURM_CONF": conf, "PATH": PATH}, argv)
            pid, start = hosts.run(node.host, _start(root, f"health-{node.name}.out", command)).split()
        except (ClusterError, ValueError) as exc:
            problems.append(f"{node.name}: no health loop: {exc}")
            continue
        state.procs.append(Proc(HEALTH, int(pid), int(start), node.name, node.host))
    return problems


def dead_loops(state: ClusterState) -> list[Proc]:
    """The recorded loops no longer running on their hosts (one ssh step per host; a host that
    does not answer is left for the next look): the agent starts them again
    (:mod:`hyperscope.recovery.supervise`), as slurmd's HealthCheckProgram does on ssh nodes."""
    mine = [p for p in state.procs if p.role == HEALTH and p.host]
    return ssh_ctld.gone(Hosts(settings(state)), mine) if mine else []


def _start(root: str, log: str, command: str) -> str:
    """As :func:`ssh_hosts.start_command`, for a command line already quoted (``env K=V … ARGV``)."""
    q = shlex.quote
    out = q(f"{root}/log/{log}")
    return f"cd {q(root)} || exit 1; setsid {command} > {out} 2>&1 < /dev/null & p=$!; echo $p {_START_TIME}"


def stop_health_loops(state: ClusterState) -> list[str]:
    """Stop the loops and remove ``remote_dir/NAME`` on every host; the hosts that did not answer."""
    if not state.ssh:
        return []
    hosts, failed = Hosts(settings(state)), []
    mine = [p for p in state.procs if p.role == HEALTH]
    for host in dict.fromkeys([p.host for p in mine] + [n.host for n in state.nodes if n.host]):
        try:
            hosts.run(host, stop_command([p for p in mine if p.host == host]))
            hosts.run(host, f"rm -rf {shlex.quote(remote_root(state))}")
        except ClusterError as exc:
            failed.append(str(exc))
        hosts.close(host)
    state.procs = [p for p in state.procs if p.role != HEALTH]
    return failed


def run_spare_script(state: ClusterState, spare: NodeState, script: Path) -> str:
    """The spec's spare script on the spare's host, as a lifecycle script runs (the node's facts
    in ``HYPERSCOPE_*``); "" when it passed, else why (its status and last output)."""
    hosts, root = Hosts(settings(state)), remote_root(state)
    q = shlex.quote
    env = {
        "HYPERSCOPE_CLUSTER": state.name, "HYPERSCOPE_NODE": spare.name, "HYPERSCOPE_GROUP": spare.group,
        "HYPERSCOPE_SPARE": "1", "HYPERSCOPE_SHARED_DIR": state.shared_dir, "SLURM_CONF": state.slurm_conf,
    }  # fmt: skip
    log = f"{root}/log/spare-{spare.name}.log"
    try:
        copy = f"mkdir -p {q(root)}/log && cat > {q(root)}/spare.sh"
        hosts.run(spare.host, copy, stdin=script.read_bytes())
        cmd = f"cd {q(root)} && {with_env(env, ['bash', 'spare.sh'])} > {q(log)} 2>&1; echo $?"
        rc = hosts.run(spare.host, cmd, timeout=SPARE_TIMEOUT_S).strip()
        if rc == "0":
            return ""
        tail = hosts.run(spare.host, f"tail -c 2000 {q(log)}", check=False).strip() or "(no output)"
    except (ClusterError, OSError) as exc:
        return f"recovery.spare_script could not run on {spare.name} ({spare.host}): {exc}"
    return f"recovery.spare_script {script} exited with status {rc} on {spare.name} ({spare.host}): {tail}"
