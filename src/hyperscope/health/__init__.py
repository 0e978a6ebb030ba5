"""Node health: checks that answer pass / warn / fail with a reason and a remedy, run by
``hyperscope health``, by Slurm as its ``HealthCheckProgram`` and by the agent."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
from pathlib import Path

from hyperscope.health import checks, sources
from hyperscope.health.checks import HealthConfig
from hyperscope.health.model import Action, CheckResult, HealthReport, Status

__all__ = [
    "Action",
    "CheckResult",
    "HealthConfig",
    "HealthReport",
    "Status",
    "configure",
    "drain",
    "node_name",
    "run",
]


def node_name() -> str:
    """Slurm's name for this node (several local slurmds share one hostname), else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def configure(
    *,
    expect_gpus: int | None = None,
    paths: tuple[Path, ...] = (),
    min_free_gib: float = 1.0,
    shared: Path | None = None,
    checks_dir: Path | None = None,
    quick: bool = False,
    dcgm_every_s: float = 0.0,
    dcgm_record: Path | None = None,
    gpu_devices: Path = Path("/dev"),
    system_disks: bool = True,
    probe_every_s: float = 0.0,
) -> HealthConfig:
    """The options of ``hyperscope health`` (and of ``python -m hyperscope.health``) as a config;
    ``quick`` (Slurm's Prolog, before every job) leaves out DCGM's diagnostic and the user's checks."""
    return HealthConfig(
        expect_gpus=expect_gpus,
        paths=paths,
        min_free_bytes=int(min_free_gib * (1 << 30)),
        shared=shared,
        checks_dir=None if quick else checks_dir,
        dcgm=not quick,
        dcgm_every_s=dcgm_every_s,
        dcgm_record=dcgm_record,
        gpu_devices=gpu_devices,
        system_disks=system_disks,
        probe_every_s=probe_every_s,
    )


def run(config: HealthConfig | None = None, *, node: str | None = None) -> HealthReport:
    config = config or HealthConfig()
    if not config.faults:
        config = dataclasses.replace(config, faults=sources.load_faults())
    results: list[CheckResult] = []
    for check in (
        checks.gpu_checks,
        checks.dcgm_check,
        checks.disk_checks,
        checks.system_disk_checks,
        checks.shared_check,
        checks.memory_check,
        checks.user_checks,
        checks.injected_failures,
    ):
        try:
            results.extend(check(config))
        except Exception as exc:  # a broken check is itself a finding, never a crash
            results.append(
                CheckResult(
                    check.__name__.removesuffix("_check").removesuffix("_checks"),
                    Status.WARN,
                    f"the check could not run: {exc}",
                )
            )
    return HealthReport(node or node_name(), results)


def drain(report: HealthReport, *, scontrol: str = "scontrol") -> str | None:
    """Drain this node in Slurm with the first failure as the reason; the command run, or None.
    A node an operator already took out of service (DOWN, DRAIN or FAIL with a reason of their
    own) keeps their reason: it is theirs to act on, and the agent leaves such a node alone."""
    if report.status is not Status.FAIL:
        return None
    from hyperscope.cluster.slurm import operator_reason, parse_show_node

    shown = subprocess.run(
        [scontrol, "show", "node", report.node, "-o"], capture_output=True, text=True, timeout=60
    )
    for n in parse_show_node(shown.stdout) if shown.returncode == 0 else []:
        out = {"DOWN", "DRAIN", "FAIL"}.intersection((n.state, *n.flags))
        if out and operator_reason(n.reason):
            return None
    argv = [scontrol, "update", f"nodename={report.node}", "state=drain", f"reason={report.drain_reason()}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {done.stderr.strip() or done.returncode}")
    return " ".join(argv)
