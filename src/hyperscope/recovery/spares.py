"""A spare that must be prepared before it joins a partition: an adopted cluster whose spec names
``recovery.spare_script`` (:mod:`hyperscope.cluster.existing_ops`). The failed node is fenced at
once as always; the script then runs on the spare's host on the node's recovery thread (it may
take minutes: never under the state's lock), and only a spare it passed on is swapped in. A spare
it fails on stays out of the partition and becomes a ticket (``list-nodes``, agent.log, the
spec's ``ticket_command``); the failed node is then dealt with as if there were no spare."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperscope.cluster import nodeops
from hyperscope.cluster.operate import NodeOperator
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery.decide import Action, Kind

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent


def late(ops: NodeOperator, action: Action) -> bool:
    """True when ``action`` swaps in a spare that the provider prepares first."""
    script = getattr(ops, "spare_script", None)
    return action.kind is Kind.REPLACE and len(action.nodes) > 1 and callable(script) and script() is not None


def prepare_and_swap(agent: Agent, ops: NodeOperator, action: Action) -> None:
    failed, spare = action.nodes[:2]
    agent.acting.add(spare)
    try:
        state = ClusterState.load(agent.dir)
        why: str = getattr(ops, "prepare_spare")(state.node(spare))  # noqa: B009 - only some providers
        if not why:
            with agent._update() as fresh:
                nodeops.swap_in(ops.slurm(), fresh, fresh.node(failed), fresh.node(spare))
            joined = f"recovery.spare_script passed on {spare}: it joined {failed}'s partition"
            record = {"kind": "spare", "nodes": [spare, failed], "job": None, "phase": "done"}
            agent.log({**record, "reason": joined})
            return
        with agent._update() as fresh:
            node = fresh.node(spare)
            node.status, node.since = "NeedsHardware", agent.clock()
            node.last_action = f"left out of the partition; ticket: {why}"
        from hyperscope.recovery.act import _ticket

        hook = _ticket(agent, fresh, fresh.node(spare), why)
        agent.log({"kind": "ticket", "nodes": [spare], "job": None, "phase": "opened", "reason": why,
                   "hook": hook})  # fmt: skip
    finally:
        agent.acting.discard(spare)
