"""What a local cluster needs for resilience beyond plain Slurm: the ``--auto-resume`` SPANK plugin
(PlugStackConfig) and ``hyperscope health --drain`` as Slurm's HealthCheckProgram, and its quick
form as the Prolog (run on every node of a job before its first step: a node that fails it is
drained and the job goes elsewhere instead of starting on a sick node).

Slurm runs the HealthCheckProgram with nothing but ``SLURMD_NODENAME`` in its environment
(notes/local-slurm.md, pitfall 16), so it is a generated wrapper that knows the cluster: its
slurm.conf, the node's spool and the shared directory, this very Python, and the node's fault
file (``<cluster dir>/faults/<node>.json``, the seam to rehearse a GPU fault on one node).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import spank

WRAPPER = "healthcheck.sh"


def faults_dir(state: ClusterState) -> Path:
    """``<node>.json`` here is the node's ``HYPERSCOPE_HEALTH_FAULTS`` (absent: the real hardware)."""
    return Path(state.dir) / "faults"


def auto_resume_log(state: ClusterState) -> Path:
    return Path(state.dir) / "log" / "auto-resume.log"


def healthcheck_wrapper(spec: ClusterSpec, state: ClusterState, python: str = sys.executable) -> str:
    q = shlex.quote
    spool = Path(state.run_dir) / "spool"
    return f"""#!/bin/bash
# Written by hyperscope for cluster {state.name}: Slurm's HealthCheckProgram. Slurm gives it only
# SLURMD_NODENAME, so everything else is set here.
node=${{SLURMD_NODENAME:?SLURMD_NODENAME is not set}}
export SLURM_CONF={q(state.slurm_conf)}
export HYPERSCOPE_CLUSTER={q(state.name)} HYPERSCOPE_SHARED_DIR={q(state.shared_dir)}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
faults={q(str(faults_dir(state)))}/$node.json
if [ -e "$faults" ]; then export HYPERSCOPE_HEALTH_FAULTS="$faults"; else unset HYPERSCOPE_HEALTH_FAULTS; fi
# As the Prolog (Slurm sets SLURM_JOB_ID) only the quick checks: it runs before every job.
quick=""; [ -n "${{SLURM_JOB_ID:-}}" ] && quick=--quick
exec {q(python)} -m hyperscope health --drain --node "$node" $quick \\
    --path {q(str(spool))}/"$node" --min-free-gib 0.1 --shared {q(state.shared_dir)} >/dev/null
"""


def install(spec: ClusterSpec, state: ClusterState) -> list[str]:
    """Write the wrapper and plugstack.conf, build the plugin; the slurm.conf lines that use them.
    A machine without libslurm-dev or gcc gets a cluster without ``--auto-resume`` and a note that
    ``describe`` shows, never a failed create."""
    etc = Path(state.dir) / "etc"
    faults_dir(state).mkdir(parents=True, exist_ok=True)
    wrapper = etc / WRAPPER
    wrapper.write_text(healthcheck_wrapper(spec, state))
    wrapper.chmod(0o755)
    lines = [
        f"HealthCheckProgram={wrapper}",
        f"HealthCheckInterval={spec.recovery.health_check_interval}",
        "HealthCheckNodeState=ANY",
        f"Prolog={wrapper}",
    ]
    try:
        plugin = spank.build(Path(state.dir) / "lib")
    except spank.SpankBuildError as exc:
        state.notes.append(f"srun --auto-resume is not available: {exc}")
        return lines
    plugstack = etc / "plugstack.conf"
    plugstack.write_text(
        spank.plugstack_line(plugin, slurm_conf=Path(state.slurm_conf), log=auto_resume_log(state))
    )
    return [*lines, f"PlugStackConfig={plugstack}"]
