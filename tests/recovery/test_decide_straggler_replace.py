"""``straggler_action: replace`` as data: when a straggler's node is waited on, left, held or
replaced (``decide.decide_straggler_replace``), on small explicit situations. On real Slurm:
test_straggler_replace.py."""

from __future__ import annotations

from hyperscope.recovery.decide import CheckpointView, Kind, NodeView, Policy, decide_straggler_replace
from hyperscope.recovery.stragglers import Straggler, StragglerPolicy

POLICY = Policy(stragglers=StragglerPolicy(threshold_pct=30, steps=8, action="replace"))
SLOW = Straggler("7", 1, "w2", step_ns=300_000_000, median_ns=100_000_000, slow_steps=12, median_rank=0)
BUSY = NodeView("w2", "workers", "ALLOCATED")
SPARE = NodeView("w3", "workers", "IDLE", spare=True)
NAMED_AT = 1000.0
AFTER = CheckpointView("/shared/checkpoints/rs-1-job7", NAMED_AT + 5, "rank1/step-00000050")


def _decide(**kw: object) -> object:
    args: dict[str, object] = {"s": SLOW, "node": BUSY, "spares": [SPARE], "checkpoint": AFTER,
                               "named_at": NAMED_AT, "policy": POLICY}  # fmt: skip
    args.update(kw)
    return decide_straggler_replace(**args)  # type: ignore[arg-type]


def test_replaced_by_a_spare_of_its_group_once_the_job_checkpointed_since_it_was_named() -> None:
    a = _decide()
    assert a is not None and a.kind is Kind.REPLACE and a.nodes == ("w2", "w3") and a.job is None
    assert a.reason.startswith("straggler: rank 1 on w2 of job 7 is a straggler")
    assert "checkpointed since (rank1/step-00000050 in /shared/checkpoints/rs-1-job7)" in a.reason
    other_group = NodeView("g1", "gpus", "IDLE", spare=True)
    busy_spare = NodeView("w4", "workers", "ALLOCATED", spare=True)
    a = _decide(spares=[other_group, busy_spare])
    assert a is not None and a.kind is Kind.REPLACE and a.nodes == ("w2",)  # re-created in place


def test_it_waits_for_a_checkpoint_written_after_it_was_named() -> None:
    for ck in (CheckpointView("/ck", None), CheckpointView("/ck", NAMED_AT - 1, "step-00000040")):
        a = _decide(checkpoint=ck)
        assert a is not None and a.kind is Kind.WAIT and a.nodes == ("w2",)
        assert "replaced after job 7's next checkpoint (none written in /ck since it was named)" in a.reason


def test_an_operators_node_is_left_alone_and_their_mark_waits_for_the_job() -> None:
    theirs = NodeView("w2", "workers", "MIXED", flags=("DRAIN",), reason="bad fan, ticket 9")
    a = _decide(node=theirs)
    assert a is not None and a.kind is Kind.LEAVE and "bad fan, ticket 9" in a.reason
    marked = NodeView("w2", "workers", "ALLOCATED", flags=("DRAIN",), reason="Action:Replace")
    a = _decide(node=marked)
    assert a is not None and a.kind is Kind.WAIT and "operator marked it" in a.reason


def test_the_rate_limit_holds_it_and_nothing_is_done_once_the_rank_is_at_speed() -> None:
    a = _decide(recent_replacements=POLICY.max_replacements)
    assert a is not None and a.kind is Kind.HOLD and "rate limit" in a.reason
    at_speed = Straggler("7", 1, "w3", 105_000_000, 100_000_000, 12, 0)  # still named, fast again
    assert _decide(s=at_speed) is None
    assert _decide(node=None) is None  # a node Slurm does not describe now
    gone = NodeView("w2", "workers", "DOWN", reason="Not responding")
    assert _decide(node=gone) is None  # the node rules replace it as any dead node
