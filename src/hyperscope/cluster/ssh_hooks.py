"""``srun --auto-resume`` on an ssh cluster's hosts: hyperscope's SPANK plugin, built once here
(gcc and libslurm-dev on the machine that runs ``hyperscope cluster create``) and copied with
slurm.conf into ``REMOTE_DIR/NAME/etc`` on every host, so slurmd, slurmstepd and srun load it at
the same path everywhere (``PlugStackConfig``). Nodes that ``cluster update`` adds and hosts the
agent re-provisions get it as they get slurm.conf: it is a file of that folder.

A plugin is machine code for one architecture and one Slurm's ``spank.h``: every host is asked
for both (``uname -m``, ``slurmd -V``, one ssh step each) and the plugin is used only when all of
them match this machine; otherwise the cluster runs without ``--auto-resume`` and ``describe``
says which host differs (building on each host is not done). Its decisions go to a folder on the
shared directory (:func:`hooks.auto_resume_log`): one requeue per job attempt is an exclusive
marker file there, whichever node's task fails first.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from hyperscope.cluster import hooks
from hyperscope.cluster.ssh_hosts import Hosts
from hyperscope.cluster.state import ClusterError, ClusterState

PROBE = "uname -m; slurmd -V 2>/dev/null || echo 'no slurmd'"


def local_build() -> tuple[str, str]:
    """This machine's architecture and Slurm (the plugin is built against them)."""
    try:
        slurm = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        slurm = "no slurmd"
    return platform.machine(), slurm


def mismatch(here: tuple[str, str], seen: dict[str, tuple[str, str]]) -> str | None:
    """Why the plugin built here cannot run on every host (None: it can). Pure: tested on its own."""
    for host, (arch, slurm) in seen.items():
        if arch != here[0]:
            return f"host {host} is {arch}, the plugin was built here for {here[0]}"
        if slurm != here[1]:
            return f"host {host} runs {slurm!r}, the plugin was built here against {here[1]!r}"
    return None


def install(state: ClusterState, hosts: Hosts, every: Iterable[str]) -> list[str]:
    """Build the plugin, check every host can load it, put it and plugstack.conf in the cluster's
    ``etc`` (copied to every host); the PlugStackConfig line, or none and a note."""
    etc = Path(state.dir) / "etc"
    for old in etc.glob("hyperscope_auto_resume-*.so"):
        old.unlink()  # a plugin of an earlier build: not loaded, not copied
    (etc / "plugstack.conf").unlink(missing_ok=True)
    seen: dict[str, tuple[str, str]] = {}
    for host in every:
        try:
            out = hosts.run(host, PROBE).splitlines()
        except ClusterError as exc:
            return _without(state, f"could not ask {host} for its architecture and Slurm: {exc}")
        seen[host] = (out[0].strip() if out else "", out[1].strip() if len(out) > 1 else "no slurmd")
    why = mismatch(local_build(), seen)
    if why:
        return _without(state, why + " (built only on this machine)")
    log = hooks.auto_resume_log(state)
    log.parent.mkdir(parents=True, exist_ok=True)
    at = f"{state.run_dir}/etc"
    line = hooks.plugin_line(state, etc, at=at, log=str(log), scontrol="scontrol", copy=True)
    return [line] if line else []


def _without(state: ClusterState, why: str) -> list[str]:
    note = f"srun --auto-resume is not available: {why}"
    if note not in state.notes:
        state.notes.append(note)
    return []


def remove_log(state: ClusterState) -> None:
    """``delete``: the plugin's folder on the shared directory goes with the cluster."""
    shutil.rmtree(hooks.auto_resume_log(state).parent, ignore_errors=True)
