"""The agent's side of ``straggler_action: replace``: a straggler's node replaced by a spare once
its job allows. What to do is :func:`hyperscope.recovery.decide.decide_straggler_replace`'s (pure);
here is only what it is shown — the node and the spares as Slurm sees them, the job's checkpoint
folder, when the rank was first named on that node — and the action handed to the agent's own
``apply``, the path every replacement takes: the node is set DOWN with the reason (Slurm requeues
the job now), the spare joins the partition, the slow node is re-created as the group's spare,
and the job resumes from its checkpoint on the healthy nodes and the spare.

Waiting, holding and leaving are logged once per node and reason, as the node rules' are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from hyperscope.checkpoint import _layout
from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.slurm import SlurmError
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery.decide import PASSIVE, Action, CheckpointView, NodeView, decide_straggler_replace
from hyperscope.recovery.stragglers import Straggler

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent


def replace(self: Agent, state: ClusterState, slow: Iterable[Straggler]) -> list[Action]:
    """Each straggler's node: waited on, held, left or replaced (see the module's docstring)."""
    now = self.clock()
    named = [s for s in slow if s.node]
    for s in named:
        self.straggler_seen.setdefault((s.job, s.rank, s.node), now)
    keep = {(s.job, s.rank, s.node) for s in named}
    for key in [k for k in self.straggler_seen if k not in keep]:
        del self.straggler_seen[key]
    for node in [n for n in self.straggler_noted if n not in {s.node for s in named}]:
        del self.straggler_noted[node]
    if not named:
        return []
    try:
        live = {n.name: n for n in self._ops(state).slurm().nodes()}
    except SlurmError:
        return []  # slurmctld busy: the next pass looks again
    views = {
        n.name: NodeView(n.name, n.group, seen.state, seen.flags, seen.reason, n.spare)
        for n in state.nodes
        if (seen := live.get(n.name)) is not None and n.status == "Running" and n.name not in self.acting
    }
    spares = [v for v in views.values() if v.spare]
    actions = []
    for s in named:
        if s.node in self.acting:
            continue  # being replaced already
        since = self.straggler_seen[(s.job, s.rank, s.node)]
        action = decide_straggler_replace(
            s, views.get(s.node), spares, checkpoints(state, s.job), since, self.policy,
            recent_replacements=self.recent_replacements(),
        )  # fmt: skip
        if action is None:
            continue
        if action.kind in PASSIVE:
            if self.straggler_noted.get(s.node) != str(action):
                self.straggler_noted[s.node] = str(action)
                self.log({"kind": action.kind.value, "nodes": list(action.nodes), "job": s.job,
                          "phase": "decided", "reason": action.reason})  # fmt: skip
            continue
        if len(action.nodes) > 1:
            spares = [v for v in spares if v.name != action.nodes[1]]
        assert self.replaced_at is not None  # recent_replacements() read the log
        self.replaced_at.append(self.clock())
        self.apply(action)
        actions.append(action)
    return actions


def checkpoint_dirs(state: ClusterState, job: str) -> list[Path]:
    """Where ``job`` checkpoints: the folder the cluster's TaskProlog gives every job
    (``hooks.task_prolog``), and the one ``hyperscope submit`` gives its jobs (named after the
    catalog's entry)."""
    root = Path(state.shared_dir) / "checkpoints"
    out = [root / f"{state.name}-{int(state.created)}-job{job}"]
    with contextlib.suppress(Exception):  # no catalog yet, or one being written: the prolog's only
        from hyperscope.schema.layout import CATALOG_FILE
        from hyperscope.store.catalog import Catalog

        db = catalog_jobs.store_home(state) / CATALOG_FILE
        if db.is_file() and job.isdigit():
            cat = Catalog(db, read_only=True)
            try:
                entry = cat.slurm_jobs(catalog_jobs.cluster_key(state)).get(int(job))
            finally:
                cat.close()
            if entry is not None:
                out.append(root / entry.name)
    return out


def checkpoints(state: ClusterState, job: str) -> CheckpointView:
    """The newest complete checkpoint in the job's folders, or in a folder of each rank's in them
    (ranks that train apart checkpoint apart)."""
    dirs = checkpoint_dirs(state, job)
    newest: tuple[float, str] | None = None
    for d in dirs:
        for marker in [*d.glob(f"step-*/{_layout.COMPLETE}"), *d.glob(f"*/step-*/{_layout.COMPLETE}")]:
            with contextlib.suppress(OSError):
                at = marker.stat().st_mtime
                if newest is None or at > newest[0]:
                    newest = (at, str(marker.parent.relative_to(d)))
    shown = " or ".join(str(d) for d in dirs)
    return CheckpointView(shown, None) if newest is None else CheckpointView(shown, *newest)
