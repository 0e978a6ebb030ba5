"""What to do about each node and job, decided from what Slurm, the health checks and the
heartbeats say — as data, so every decision can be logged with its reason, shown in
``list-nodes``, and tested without a cluster.

The rules, in order of precedence for one node:

1. An operator's mark wins: a node set to ``fail``/``drain`` with the reason ``Action:Replace`` or
   ``Action:Reboot`` (as HyperPod users mark nodes), case-insensitive.
2. A node that does not respond (Slurm: ``DOWN`` or ``NOT_RESPONDING``, or the provider sees its
   slurmd gone — seconds before Slurm's own timeouts) is replaced: its daemon or machine is gone,
   and a reboot cannot be asked of it.
3. A failed health check: its suggested action (reboot or replace). A node already rebooted
   ``max_reboots`` times for a failure is replaced instead: reboots that do not help are not
   repeated forever.
4. A node drained by hyperscope's health check (reason ``hyperscope: ...``) with no fresher report
   is replaced.
Warnings never act. A sick spare is rebooted or re-created in place.
A replacement takes a spare of the same group when one is idle and healthy;
otherwise the node is re-created under its own name (the local provider) — ``Action.nodes`` says
which: ``(node,)`` or ``(node, spare)``.

For a job: one whose every rank has been silent past its hang timeout is requeued (auto-resume
then restarts it from its last checkpoint), at most ``max_attempts`` times; after that it is
stopped with the reason, so nothing loops.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperscope.health.model import Action as Remedy
from hyperscope.health.model import HealthReport, Status


class Kind(enum.StrEnum):
    REBOOT = "reboot"
    REPLACE = "replace"
    REQUEUE = "requeue"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Action:
    kind: Kind
    nodes: tuple[str, ...]  # (node,) or (node, spare); the job's nodes for job actions
    reason: str
    job: str | None = None

    def __str__(self) -> str:
        target = f"job {self.job} " if self.job else ""
        return f"{self.kind} {target}{' -> '.join(self.nodes)}: {self.reason}"


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the agent knows of one node (from ``scontrol show node`` and its own records)."""

    name: str
    group: str
    state: str  # Slurm's base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: tuple[str, ...] = ()  # DRAIN, NOT_RESPONDING, ...
    reason: str = ""
    spare: bool = False  # held out of service, ready to take a failed node's place
    reboots: int = 0  # reboots the agent already did for the current failure
    daemon_alive: bool = True  # the provider's own view: its slurmd process still runs


@dataclass(frozen=True, slots=True)
class Policy:
    max_reboots: int = 1
    hang_timeout_s: float = 300.0
    max_attempts: int = 3


def decide_nodes(
    nodes: Sequence[NodeView], health: Mapping[str, HealthReport], policy: Policy = Policy()
) -> list[Action]:
    spares = [n for n in nodes if n.spare and _healthy(n, health)]
    actions = []
    for node in nodes:
        decided = _decide(node, health.get(node.name), policy)
        if decided is None:
            continue
        kind, reason = decided
        if node.spare:  # a sick spare is repaired in place, never by another spare
            actions.append(Action(kind, (node.name,), reason))
            continue
        if kind is Kind.REPLACE:
            spare = next((s for s in spares if s.group == node.group), None)
            if spare is not None:
                spares.remove(spare)
                actions.append(Action(kind, (node.name, spare.name), reason))
                continue
        actions.append(Action(kind, (node.name,), reason))
    return actions


def _decide(node: NodeView, report: HealthReport | None, policy: Policy) -> tuple[Kind, str] | None:
    mark = node.reason.strip().lower()
    if mark.startswith("action:replace"):
        return Kind.REPLACE, f"operator marked it: {node.reason.strip()}"
    if mark.startswith("action:reboot"):
        return Kind.REBOOT, f"operator marked it: {node.reason.strip()}"
    if not node.daemon_alive:
        return Kind.REPLACE, "not responding (its slurmd is gone)"
    if node.state == "DOWN" or "NOT_RESPONDING" in node.flags:
        return Kind.REPLACE, f"not responding (Slurm: {'+'.join((node.state, *node.flags)).lower()})"
    if report is not None and report.status is Status.FAIL:
        reason = report.drain_reason()
        if report.action is Remedy.REBOOT and node.reboots < policy.max_reboots:
            return Kind.REBOOT, reason
        if report.action is Remedy.REBOOT:
            return Kind.REPLACE, f"{reason} (still failing after {node.reboots} reboot(s))"
        return Kind.REPLACE, reason
    if report is None and mark.startswith("hyperscope:") and "DRAIN" in node.flags:
        return Kind.REPLACE, f"drained by its health check: {node.reason.strip()}"
    return None


def _healthy(node: NodeView, health: Mapping[str, HealthReport]) -> bool:
    report = health.get(node.name)
    return (
        node.daemon_alive
        and node.state == "IDLE"
        and not {"DRAIN", "NOT_RESPONDING", "FAIL"}.intersection(node.flags)
        and (report is None or report.status is not Status.FAIL)
    )


@dataclass(frozen=True, slots=True)
class JobView:
    job: str
    nodes: tuple[str, ...]
    silent_s: float | None  # since the last heartbeat of its most recent rank; None: none yet
    attempts: int  # restarts already made


def decide_jobs(jobs: Sequence[JobView], policy: Policy = Policy()) -> list[Action]:
    actions = []
    for job in jobs:
        if job.silent_s is None or job.silent_s <= policy.hang_timeout_s:
            continue
        silent = f"no progress for {job.silent_s:.0f} s (hang timeout {policy.hang_timeout_s:.0f} s)"
        if job.attempts >= policy.max_attempts:
            actions.append(
                Action(
                    Kind.STOP,
                    job.nodes,
                    f"{silent}; {job.attempts} attempts made, at most {policy.max_attempts}: stopped",
                    job=job.job,
                )
            )
        else:
            actions.append(
                Action(
                    Kind.REQUEUE,
                    job.nodes,
                    f"{silent}; attempt {job.attempts + 1} of {policy.max_attempts}",
                    job=job.job,
                )
            )
    return actions
