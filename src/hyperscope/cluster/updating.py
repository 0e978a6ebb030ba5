"""An update under way, for every provider: the cluster ``Updating`` with the update recorded and
the nodes it acts on published (:class:`Updating`), so the recovery agent keeps running and skips
only those; nodes drained and their jobs waited for; and the software update's batches
(:func:`in_batches`), whose step and slurmd restart each provider supplies
(:mod:`hyperscope.cluster.update`, :mod:`hyperscope.cluster.update_ssh`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

from hyperscope.cluster import conf, jobs, nodeops
from hyperscope.cluster.local import spec_digest
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    NodeState,
    Progress,
    cluster_lock,
    clusters_dir,
    start_time,
    update_running,
)

#: the reason on a node drained by an update, so an operator's ``sinfo -R`` says why; not
#: "hyperscope: ..." (the health check's prefix, which the agent acts on): a node left drained by
#: an update that gave up is the operator's to resume
REMOVING = "Removed by cluster update"
UPDATING = "Software update (cluster update-software)"
#: how long an update waits for the agent to finish a recovery it began on a node the update wants
AGENT_WAIT_S = 900.0
#: how long an updated node's new slurmd may take to register
REGISTER_TIMEOUT_S = 120.0


def wait_until(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)


def busy_nodes(slurm: Slurm, nodes: Collection[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j in slurm.jobs():
        if j.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED") and j.nodes:
            for n in jobs.expand_hostlist(j.nodes):
                if n in nodes:
                    out.setdefault(n, []).append(j.id)
    return out


class Updating:
    """Status Updating for as long as the block runs, with this command recorded as the update (its
    pid and start time) and the nodes it acts on published (:meth:`act_on`): the agent keeps
    running and recovering every other node, and leaves those alone. Every change to the state is
    made on a fresh copy under the cluster's lock (:meth:`edit`), so what the agent records
    meanwhile is kept. InService again at the end, also when the update failed (the cluster still
    runs), and the agent started again if it died meanwhile."""

    def __init__(self, home: Path, name: str, start_agent: Callable[[ClusterState], object] | None) -> None:
        self.home, self.name, self.start_agent = home, name, start_agent
        self.dir = clusters_dir(home) / name

    def __enter__(self) -> Updating:
        with cluster_lock(self.home, self.name):
            state = ClusterState.load(self.dir)
            if (work := _recovering(state)) or (
                state.status != "InService" and not (state.status == "Updating" and state.update_pid)
            ):
                why = f" (the agent is recovering {', '.join(work)})" if work else ""
                raise ClusterError(
                    f"cluster {self.name!r} is {state.status}{why}; an update needs it InService"
                )
            if update_running(state):
                raise ClusterError(f"cluster {self.name!r}: another update runs (pid {state.update_pid})")
            state.status, state.update_pid = "Updating", os.getpid()
            state.update_start, state.updating = start_time(os.getpid()) or 0, []
            state.save()
        self.state = state
        return self

    @contextlib.contextmanager
    def edit(self) -> Iterator[ClusterState]:
        """The state, fresh, for one short change, saved at the end (the agent's way too)."""
        with cluster_lock(self.home, self.name):
            state = ClusterState.load(self.dir)
            yield state
            state.save()
        self.state = state

    def act_on(self, nodes: Iterable[str]) -> None:
        """Publish the nodes the update acts on now (the agent leaves them alone); the agent may
        have begun a recovery of one of them just before: it is waited for."""
        with self.edit() as state:
            state.updating = list(dict.fromkeys(nodes))
        wait_until(
            "the agent to finish its recovery of " + ", ".join(self.state.updating),
            lambda: not set(_recovering(ClusterState.load(self.dir))) & set(self.state.updating),
            AGENT_WAIT_S,
        )

    def __exit__(self, *exc: object) -> None:
        with self.edit() as state:
            state.update_pid = state.update_start = 0
            state.updating = []
            state.status = "Updating" if _recovering(state) else "InService"
            if self.start_agent is not None:
                self.start_agent(state)  # None when it runs (it kept running: the usual case)


def _recovering(state: ClusterState) -> list[str]:
    return [n.name for n in state.nodes if n.status in ("Replacing", "Rebooting")]


def drain(slurm: Slurm, nodes: Collection[str], reason: str, say: Progress) -> None:
    """Drain ``nodes`` (their jobs go on; nothing new lands there) and say which jobs hold them."""
    for n in nodes:
        slurm.run("scontrol", "update", f"nodename={n}", "state=drain", f"reason={reason}", check=False)
    if held := busy_nodes(slurm, nodes):
        say(
            "*",
            "waiting for the jobs on "
            + ", ".join(f"{n} ({', '.join(map(str, j))})" for n, j in held.items()),
        )


def in_batches(
    up: Updating,
    slurm: Slurm,
    say: Progress,
    step: Callable[[NodeState], None],
    restart: Callable[[ClusterState, NodeState], None] | None,
    *,
    batch: int,
    drain_timeout_s: float,
) -> list[str]:
    """The update step on the nodes without a slurmd, then on the Slurm nodes ``batch`` at a time,
    each batch published (the agent leaves it alone), drained, its jobs waited for, updated,
    ``restart``-ed (a new slurmd, recorded under the lock) and resumed once it registered. A failed
    node stays drained with a reason of its own and the update stops there."""
    done: list[str] = []
    for node in [n for n in up.state.nodes if not n.slurm]:
        up.act_on([node.name])
        say(node.name, "running the update step")
        step(node)
        done.append(node.name)
    workers = [n.name for n in up.state.nodes if n.slurm]
    for i in range(0, len(workers), batch):
        group = workers[i : i + batch]
        restarted: dict[str, float] = {}
        up.act_on(group)
        drain(slurm, group, UPDATING, say)
        wait_drained(slurm, group, drain_timeout_s, "run `cluster update-software` again once they end")
        for n in group:
            node = up.state.node(n)
            say(n, "running the update step")
            try:
                step(node)
            except ClusterError as exc:  # the node's own reason: neither the agent nor we resume it
                why = f"Software update failed: {str(exc).splitlines()[0]}"[:200]
                slurm.run("scontrol", "update", f"nodename={n}", "state=drain", f"reason={why}", check=False)
                with up.edit() as state:
                    mine = state.node(n)
                    mine.output, mine.status, mine.since = node.output, "Failed", time.time()
                raise
            with up.edit() as state:
                mine = state.node(n)
                if restart is not None:
                    restarted[n] = time.time()
                    restart(state, mine)
                mine.output, mine.status, mine.since = node.output, "Running", time.time()
        try:
            for n, t0 in restarted.items():  # the new slurmd, not the old one's last word
                nodeops.wait_registered(slurm, n, t0, timeout=REGISTER_TIMEOUT_S)
            wait_until(
                f"{', '.join(group)} to answer again",
                functools.partial(_back, slurm, group),
                REGISTER_TIMEOUT_S,
            )
        except ClusterError as exc:  # left drained, the operator's: say what Slurm says of them
            shown = ", ".join(f"{n.name} {n.display_state}" for n in slurm.nodes() if n.name in group)
            raise ClusterError(f"{exc} (Slurm: {shown}); they stay drained") from None
        for n in group:
            slurm.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
            say(n, "updated and resumed")
            done.append(n)
    up.act_on([])
    return done


def finish(
    up: Updating, slurm: Slurm, spec: ClusterSpec, say: Progress, added: list[str], promoted: Iterable[str]
) -> None:
    """The end of a grown update, on every provider: wait for the new Slurm nodes (and the spares
    moved into the partition) to be idle, then keep ``spec`` as the cluster's spec (what the next
    update is compared with)."""
    wanted = {n for n in added if up.state.node(n).slurm} | set(promoted)
    wait_until(
        "the new nodes to be idle",
        lambda: wanted <= {x.name for x in slurm.nodes() if x.state == "IDLE" and not x.flags},
        60,
    )
    for name in added:
        say(name, "idle")
    with up.edit() as state:
        conf.keep_spec(spec, state)
        state.spec_path, state.spec_digest = str(spec.source or ""), spec_digest(spec)


def wait_drained(slurm: Slurm, nodes: list[str], timeout: float, then: str) -> None:
    """Wait for the jobs on drained ``nodes`` to end; past ``timeout`` say which jobs hold them."""
    try:
        wait_until(f"the jobs on {', '.join(nodes)} to end", lambda: not busy_nodes(slurm, nodes), timeout)
    except ClusterError:
        held = busy_nodes(slurm, nodes)
        jobs_ = ", ".join(f"{n}: job {', '.join(map(str, j))}" for n, j in held.items())
        raise ClusterError(
            f"jobs still run after {timeout:g} s ({jobs_}); those nodes stay drained: {then}, or "
            f"`scontrol update nodename={','.join(held)} state=resume` to give up the change"
        ) from None


def _back(slurm: Slurm, nodes: list[str]) -> bool:
    """Answering after its update: registered and not NOT_RESPONDING. A node that Slurm set DOWN
    meanwhile (its slurmd was away longer than SlurmdTimeout) is resumed with the others."""
    up = {x.name for x in slurm.nodes() if "NOT_RESPONDING" not in x.flags}
    return set(nodes) <= up
