"""``hyperscope cluster hooks NAME``: the TaskProlog and ``--auto-resume`` for a cluster someone
else runs (the existing provider). hyperscope changes nothing of an adopted cluster, so this is an
opt-in of its operator: the files are written to the shared directory (mounted at the same path
on every node, as heartbeats need), and the slurm.conf lines that use them are printed for the
operator to add. With them, a job submitted with plain ``sbatch`` writes heartbeats where the
agent reads them (hang detection) and gets a checkpoint folder of its own, and
``srun --auto-resume`` requeues a failed step.

The plugin is built here (gcc, libslurm-dev) against this machine's Slurm and architecture: the
nodes must match (it is a ``required`` line: a node that cannot load it runs no step). The Prolog
check is not written: an adopted cluster's Prolog is its operator's, and the quick check is one
line to add to it (``hyperscope health --quick --drain``: the node is ``$SLURMD_NODENAME``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hyperscope.cluster import hooks, ssh_hooks
from hyperscope.cluster.state import ClusterError, ClusterState


@dataclass
class Written:
    folder: Path
    lines: list[str]  # slurm.conf's
    plugstack: str = ""  # the plugin's line, for an operator's own plugstack.conf
    notes: list[str] = field(default_factory=list)


def folder(state: ClusterState) -> Path:
    """On the shared directory, of this adoption (a new adoption writes a new folder)."""
    return Path(state.shared_dir) / "hyperscope" / "hooks" / f"{state.name}-{int(state.created)}"


def write(state: ClusterState) -> Written:
    if state.provider != "existing":
        raise ClusterError(
            f"cluster {state.name} ({state.provider} provider): `create` installed its Prolog, "
            "TaskProlog and --auto-resume already; `hooks` is for adopted (existing) clusters"
        )
    d = folder(state)
    d.mkdir(parents=True, exist_ok=True)
    prolog = d / hooks.TASK_PROLOG
    prolog.write_text(hooks.task_prolog(state))
    prolog.chmod(0o755)
    lines = [f"TaskProlog={prolog}"]
    log = hooks.auto_resume_log(state)
    log.parent.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []  # said here, never kept in the state: nothing of the cluster changes
    plug = hooks.plugin_line(state, d, at=str(d), log=str(log), scontrol="scontrol", copy=True, notes=notes)
    if plug is None:
        return Written(d, lines, notes=notes)
    arch, slurm = ssh_hooks.local_build()
    notes.append(f"the plugin was built here for {arch} against {slurm!r}: every node must match")
    return Written(d, [*lines, plug], (d / "plugstack.conf").read_text().strip(), notes)
