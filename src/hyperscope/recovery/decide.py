"""What to do about each node and job, decided from what Slurm, the health checks and the
heartbeats say — as data, so every decision can be logged with its reason, shown in
``list-nodes``, and tested without a cluster.

The rules, in order of precedence for one node:

1. An operator's mark wins: a node set to ``fail``/``drain`` with the reason ``Action:Replace`` or
   ``Action:Reboot`` (as HyperPod users mark nodes), case-insensitive. On a node that still runs
   jobs (``fail``/``drain`` let them finish) the action waits for them to end; set ``down`` (what
   ``replace-node --now`` does) it acts at once.
2. A node an operator set ``DOWN``, ``DRAIN`` or ``FAIL`` with a reason of their own (neither
   hyperscope's nor one Slurm gives by itself) is left alone, whatever else is wrong with it: the
   operator is working on it.
3. A node that does not respond (Slurm: ``DOWN``, or ``NOT_RESPONDING`` for longer than
   ``flicker_s`` — a node just resumed shows it for a second —, or the provider sees its slurmd
   gone, seconds before Slurm's own timeouts) is replaced: its daemon or machine is gone, and a
   reboot cannot be asked of it.
4. A failed health check: its suggested action (reboot or replace). A node already rebooted
   ``max_reboots`` times for a failure is replaced instead: reboots that do not help are not
   repeated forever.
5. A node drained by hyperscope's health check (reason ``hyperscope: ...``) with no fresher report
   is replaced.
Warnings never act. Automatic replacements are rate-limited: at most ``max_replacements`` in
``replacement_window_s``; past that they are held (``Kind.HOLD``, logged) until the window
allows them, so a network blip cannot replace half the cluster. An operator's own
``Action:Replace`` is not braked. A sick spare is rebooted or re-created in place.
A replacement takes a spare of the same group when one is idle and healthy;
otherwise the node is re-created under its own name (the local provider) — ``Action.nodes`` says
which: ``(node,)`` or ``(node, spare)``.

For a job: one whose every rank has been silent past its hang timeout is requeued (auto-resume
then restarts it from its last checkpoint), at most ``max_attempts`` times; after that it is
stopped with the reason, so nothing loops. A straggler (``recovery.stragglers``) is named on its
node (``Kind.STRAGGLER``) and, under the ``profile`` policy, its job is captured on demand: the
slow rank and a median one (``Kind.PROFILE``). Under the ``replace`` policy its node is replaced
by a spare (``Kind.REPLACE``, :func:`decide_straggler_replace`) once its job allows: after the job
wrote a checkpoint since the rank was named, so the requeued job resumes from it and loses at most
the steps since; never a node an operator took out of service, and within the rate limit.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hyperscope.cluster.slurm import operator_reason
from hyperscope.health.model import Action as Remedy
from hyperscope.health.model import HealthReport, Status
from hyperscope.recovery.stragglers import Straggler, StragglerPolicy


class Kind(enum.StrEnum):
    REBOOT = "reboot"
    REPLACE = "replace"
    REQUEUE = "requeue"
    STOP = "stop"
    #: decisions to do nothing yet, logged once so an operator sees why nothing happens
    WAIT = "wait"  # an operator's Action:Replace/Reboot on a node whose jobs still run
    LEAVE = "leave"  # a node an operator took out of service with their own reason
    HOLD = "hold"  # a replacement held back by the rate limit
    RESTART = "restart"  # a cluster daemon (slurmctld, munged) that died
    STRAGGLER = "straggler"  # a rank slower than the others: named on its node (notify)
    PROFILE = "profile"  # ... and its job captured on demand: the slow rank beside a median one


#: the kinds that change nothing: the agent logs each once per node and reason
PASSIVE = frozenset({Kind.WAIT, Kind.LEAVE, Kind.HOLD})


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
    not_responding_s: float = 0.0  # how long Slurm has said NOT_RESPONDING without a break


@dataclass(frozen=True, slots=True)
class Policy:
    max_reboots: int = 1
    hang_timeout_s: float = 300.0
    max_attempts: int = 3
    #: NOT_RESPONDING shorter than this (on a node not DOWN) is a flicker, not a failure: a resumed
    #: node shows it for a second or two, for over 10 s on a loaded machine (measured at load 98).
    #: A node that really stopped answering is set DOWN by Slurm after SlurmdTimeout, and a dead
    #: slurmd is seen by the provider at once: this is only the backstop.
    flicker_s: float = 30.0
    #: at most this many automatic replacements in any ``replacement_window_s`` seconds
    max_replacements: int = 4
    replacement_window_s: float = 600.0
    stragglers: StragglerPolicy = field(default_factory=StragglerPolicy)


def decide_nodes(
    nodes: Sequence[NodeView],
    health: Mapping[str, HealthReport],
    policy: Policy = Policy(),
    *,
    recent_replacements: int = 0,
) -> list[Action]:
    """``recent_replacements``: automatic replacements already started in the last
    ``policy.replacement_window_s`` seconds (the agent counts them from its log)."""
    spares = [n for n in nodes if n.spare and _healthy(n, health)]
    budget = policy.max_replacements - recent_replacements
    actions = []
    for node in nodes:
        decided = _decide(node, health.get(node.name), policy)
        if decided is None:
            continue
        kind, reason = decided
        if kind is Kind.REPLACE and not _operator_mark(node):
            if budget <= 0:
                brake = (
                    f"rate limit: {policy.max_replacements} replacement(s) already in the last "
                    f"{policy.replacement_window_s:g} s (recovery.max_replacements); held: {reason}"
                )
                actions.append(Action(Kind.HOLD, (node.name,), brake))
                continue
            budget -= 1
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


#: Node states in which jobs still run on it (or are being cleaned up).
_BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def _operator_mark(node: NodeView) -> bool:
    return node.reason.strip().lower().startswith(("action:replace", "action:reboot"))


def _decide(node: NodeView, report: HealthReport | None, policy: Policy) -> tuple[Kind, str] | None:
    mark = node.reason.strip().lower()
    if _operator_mark(node):
        kind = Kind.REPLACE if mark.startswith("action:replace") else Kind.REBOOT
        if node.state != "DOWN" and (node.state in _BUSY or "COMPLETING" in node.flags):
            return Kind.WAIT, f"operator marked it: {node.reason.strip()}; waits for its jobs to end"
        return kind, f"operator marked it: {node.reason.strip()}"
    out = {"DOWN", "DRAIN", "FAIL"}.intersection((node.state, *node.flags))
    if out and operator_reason(node.reason):
        shown = "+".join(sorted(out)).lower()  # not the other flags: logged once, not at each change
        return Kind.LEAVE, f"taken out of service by an operator ({shown}: {node.reason.strip()}): left alone"
    if not node.daemon_alive:
        return Kind.REPLACE, "not responding (its slurmd is gone)"
    silent = "NOT_RESPONDING" in node.flags and node.not_responding_s >= policy.flicker_s
    if node.state == "DOWN" or silent:
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


def decide_daemons(dead: Sequence[tuple[str, int]]) -> list[Action]:
    """The controller's daemons (``(role, pid)`` of each one found dead: munged, slurmctld) are
    started again, in one action: munged first, since slurmctld needs it."""
    if not dead:
        return []
    why = ", ".join(f"{role} (pid {pid}) is gone" for role, pid in dead)
    return [Action(Kind.RESTART, tuple(role for role, _ in dead), f"{why}: started again")]


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


def decide_stragglers(found: Sequence[Straggler], policy: Policy = Policy()) -> list[Action]:
    """A straggler is named (``notify``); under ``profile`` its job is also captured: the slow
    rank and the rank whose step time is the median's, in one profile, side by side."""
    p = policy.stragglers
    if p.action == "off":
        return []
    actions = []
    for s in found:
        reason = s.reason(p)
        actions.append(Action(Kind.STRAGGLER, (s.node,) if s.node else (), reason, job=s.job))
        if p.action == "profile":
            ranks = f"ranks {s.rank} and {s.median_rank} (median)"
            why = f"{reason}: capture of {p.profile_steps} steps of {ranks}"
            actions.append(Action(Kind.PROFILE, (s.node,) if s.node else (), why, job=s.job))
    return actions


@dataclass(frozen=True, slots=True)
class CheckpointView:
    """A job's checkpoint folder as the agent last looked at it."""

    directory: str  # where the job's checkpoints are looked for ("" when nowhere is known)
    newest_at: float | None  # when its newest complete checkpoint was written; None: none yet
    newest: str = ""  # that checkpoint's folder name (step-00000042), for the reason


def decide_straggler_replace(
    s: Straggler,
    node: NodeView | None,
    spares: Sequence[NodeView],
    checkpoint: CheckpointView,
    named_at: float,
    policy: Policy = Policy(),
    *,
    recent_replacements: int = 0,
) -> Action | None:
    """What to do now about a straggler's node under the ``replace`` policy: nothing (None: the
    node is unknown, or the rank is no longer slow in its last window), leave it (an operator's),
    wait (for a checkpoint written after ``named_at``), hold (rate limit) or replace it, by a
    healthy idle spare of its group when there is one (``(node, spare)``), else in place."""
    p = policy.stragglers
    if node is None or s.over_pct < p.threshold_pct:
        return None
    why = s.reason(p)
    decided = _decide(node, None, policy)
    if decided is not None and decided[0] in (Kind.LEAVE, Kind.WAIT):
        return Action(decided[0], (node.name,), f"{decided[1]} (a straggler's node: {why})")
    if decided is not None or node.spare:
        return None  # already failing on its own: the node rules above act on it
    if checkpoint.newest_at is None or checkpoint.newest_at <= named_at:
        # a requeue before a checkpoint would lose every step since the last one (or all of them)
        return Action(Kind.WAIT, (node.name,), f"{why}; replaced after job {s.job}'s next checkpoint "
                      f"(none written in {checkpoint.directory or '?'} since it was named)")  # fmt: skip
    if recent_replacements >= policy.max_replacements:
        brake = (
            f"rate limit: {policy.max_replacements} replacement(s) already in the last "
            f"{policy.replacement_window_s:g} s (recovery.max_replacements); held: {why}"
        )
        return Action(Kind.HOLD, (node.name,), brake)
    reason = (f"straggler: {why}; job {s.job} checkpointed since ({checkpoint.newest} in "
              f"{checkpoint.directory}): replaced, the job is requeued and resumes from it")  # fmt: skip
    spare = next((n for n in spares if n.spare and n.group == node.group and _healthy(n, {})), None)
    return Action(Kind.REPLACE, (node.name, spare.name) if spare else (node.name,), reason)
