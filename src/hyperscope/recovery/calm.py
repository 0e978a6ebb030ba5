"""When the agent need not ask Slurm this second. Each ``scontrol`` the agent runs is a process,
a munge credential and an RPC to slurmctld; at 1 Hz, on an idle cluster of 32 local nodes, that
was the largest part of its idle cost. So once a pass finds the cluster calm (no job that is not
finished, nothing under way, no node being watched), Slurm is asked again only after
:data:`CALM_POLL_S`, unless one of the cheap looks made every second finds a reason sooner:

- a node's slurmd gone (the provider's ``daemon_alive``, a /proc read where it is cheap);
- the cluster's state file changed (a node re-created, an update, a delete);
- the events file touched (:func:`nudge`): a health check drained a node, a job was submitted.

An operator's own change in Slurm (``scontrol update state=down``, an ``Action:Replace``) is
seen within :data:`CALM_POLL_S`. Light on purpose: the health loop imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

#: ``<cluster dir>/events``: its mtime changing is "look now"
EVENTS = "events"
#: how long a calm cluster goes without a look at Slurm at most (a dead node still acts at once)
CALM_POLL_S = 5.0
#: job states after which a job needs nothing of the agent (``scontrol show job``'s JobState)
FINISHED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
     "OUT_OF_MEMORY"}
)  # fmt: skip


def nudge(cluster_dir: str | Path | None) -> None:
    """Ask the cluster's agent to look at Slurm at its next pass (at most a second away)
    instead of after :data:`CALM_POLL_S`. Never fails: a missed nudge costs that wait only."""
    if not cluster_dir:
        return
    path = Path(cluster_dir) / EVENTS
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError:
        pass


def events_stamp(cluster_dir: Path) -> int | None:
    try:
        return os.stat(cluster_dir / EVENTS).st_mtime_ns
    except OSError:
        return None


def quiet(job_states: Iterable[str], *, busy: bool, watching: bool, acted: bool) -> bool:
    """A pass after which Slurm need not be asked again for a while: every job finished (or
    none), no recovery under way (``busy``), no node watched (settling, not responding,
    rebooted, acted on) and nothing but passive decisions taken."""
    return not busy and not watching and not acted and all(s in FINISHED for s in job_states)


@dataclass
class Calm:
    """Until when, and for which cheap-look key (state file, events file), Slurm is not asked."""

    until: float = 0.0
    key: tuple[object, ...] | None = None

    def holds(self, now: float, key: tuple[object, ...], daemons_alive: Callable[[], bool]) -> bool:
        """``daemons_alive`` is asked last, only when the rest holds: a full pass looks at every
        node's slurmd anyway, so it costs nothing then."""
        return now < self.until and key == self.key and daemons_alive()

    def after_pass(self, now: float, key: tuple[object, ...], is_quiet: bool) -> None:
        self.until, self.key = (now + CALM_POLL_S if is_quiet else 0.0), key
