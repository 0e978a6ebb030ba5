"""Recovery decisions as data: every rule of recovery/decide.py on small, explicit situations."""

from __future__ import annotations

from hyperscope.cluster.slurm import operator_reason
from hyperscope.health.model import Action as Remedy
from hyperscope.health.model import CheckResult, HealthReport, Status
from hyperscope.recovery.decide import (
    Action,
    JobView,
    Kind,
    NodeView,
    Policy,
    decide_daemons,
    decide_jobs,
    decide_nodes,
)


def _failing(
    node: str, remedy: Remedy, check: str = "gpu0.ecc", reason: str = "2 uncorrectable ECC error(s)"
) -> HealthReport:
    return HealthReport(node, [CheckResult(check, Status.FAIL, reason, remedy)])


def test_healthy_nodes_and_warnings_need_nothing() -> None:
    nodes = [NodeView("w1", "workers", "IDLE"), NodeView("w2", "workers", "ALLOCATED")]
    warn = HealthReport("w2", [CheckResult("memory", Status.WARN, "3% available", Remedy.REBOOT)])
    assert decide_nodes(nodes, {"w2": warn}) == []


def test_operator_marks_win() -> None:
    nodes = [
        NodeView("w1", "workers", "IDLE", ("DRAIN",), reason="Action:Replace"),
        NodeView("w2", "workers", "IDLE", ("DRAIN",), reason="action:reboot please"),
    ]
    actions = decide_nodes(nodes, {"w1": HealthReport("w1", [])})
    assert actions == [
        Action(Kind.REPLACE, ("w1",), "operator marked it: Action:Replace"),
        Action(Kind.REBOOT, ("w2",), "operator marked it: action:reboot please"),
    ]


def test_a_silent_node_is_replaced_by_an_idle_spare_of_its_group() -> None:
    nodes = [
        NodeView("w1", "workers", "DOWN", ("NOT_RESPONDING",)),
        NodeView("g1", "gpu", "IDLE", ("NOT_RESPONDING",), not_responding_s=31.0),
        NodeView("s1", "workers", "IDLE", spare=True),
        NodeView("s2", "other", "IDLE", spare=True),
    ]
    actions = decide_nodes(nodes, {})
    assert actions[0] == Action(Kind.REPLACE, ("w1", "s1"), "not responding (Slurm: down+not_responding)")
    assert actions[1].nodes == ("g1",)  # no spare in its group: re-created under its own name
    assert str(actions[0]) == "replace w1 -> s1: not responding (Slurm: down+not_responding)"


def test_a_spare_that_is_itself_sick_is_not_used_and_is_repaired_in_place() -> None:
    nodes = [NodeView("w1", "workers", "DOWN"), NodeView("s1", "workers", "IDLE", spare=True)]
    actions = decide_nodes(nodes, {"s1": _failing("s1", Remedy.REPLACE)})
    assert actions == [
        Action(Kind.REPLACE, ("w1",), "not responding (Slurm: down)"),
        Action(Kind.REPLACE, ("s1",), "hyperscope: gpu0.ecc: 2 uncorrectable ECC error(s)"),
    ]


def test_health_failures_follow_their_remedy_and_reboots_are_not_repeated_forever() -> None:
    reboot = _failing("w1", Remedy.REBOOT, "gpu0.retire", "pending retirement")
    first = decide_nodes([NodeView("w1", "workers", "IDLE")], {"w1": reboot})
    assert first == [Action(Kind.REBOOT, ("w1",), "hyperscope: gpu0.retire: pending retirement")]
    again = decide_nodes(
        [NodeView("w1", "workers", "IDLE", reboots=1)], {"w1": reboot}, Policy(max_reboots=1)
    )
    assert again[0].kind is Kind.REPLACE and again[0].reason.endswith("(still failing after 1 reboot(s))")
    replace = decide_nodes([NodeView("w2", "workers", "MIXED")], {"w2": _failing("w2", Remedy.REPLACE)})
    assert replace == [Action(Kind.REPLACE, ("w2",), "hyperscope: gpu0.ecc: 2 uncorrectable ECC error(s)")]


def test_a_node_its_health_check_drained_is_replaced() -> None:
    node = NodeView("w3", "workers", "IDLE", ("DRAIN",), reason="hyperscope: disk:/tmp: not writable")
    assert decide_nodes([node], {}) == [
        Action(Kind.REPLACE, ("w3",), "drained by its health check: hyperscope: disk:/tmp: not writable")
    ]


def test_hung_jobs_are_requeued_then_stopped_after_the_last_attempt() -> None:
    policy = Policy(hang_timeout_s=60, max_attempts=2)
    jobs = [
        JobView("11", ("w1", "w2"), silent_s=5, attempts=0),
        JobView("12", ("w1",), silent_s=None, attempts=0),  # has not reached its first step yet
        JobView("13", ("w2",), silent_s=61, attempts=1),
        JobView("14", ("w3",), silent_s=600, attempts=2),
    ]
    actions = decide_jobs(jobs, policy)
    assert [(a.kind, a.job) for a in actions] == [(Kind.REQUEUE, "13"), (Kind.STOP, "14")]
    assert actions[0].reason == "no progress for 61 s (hang timeout 60 s); attempt 2 of 2"
    assert actions[1].reason.endswith("2 attempts made, at most 2: stopped")


def test_a_node_whose_slurmd_is_gone_is_replaced_before_slurm_notices() -> None:
    nodes = [
        NodeView("w1", "workers", "ALLOCATED", daemon_alive=False),
        NodeView("s1", "workers", "IDLE", spare=True, daemon_alive=False),  # a dead spare is no spare
        NodeView("s2", "workers", "IDLE", spare=True),
    ]
    assert decide_nodes(nodes, {}) == [
        Action(Kind.REPLACE, ("w1", "s2"), "not responding (its slurmd is gone)"),
        Action(Kind.REPLACE, ("s1",), "not responding (its slurmd is gone)"),  # re-created in place
    ]


def test_a_node_an_operator_took_out_is_left_alone_whatever_else_is_wrong() -> None:
    reason = "maintenance: reseat NIC, do not use"
    nodes = [
        NodeView("w1", "workers", "DOWN", reason=reason, daemon_alive=False),
        NodeView("w2", "workers", "IDLE", ("DRAIN",), reason="bad fan"),
        NodeView("w3", "workers", "MIXED", ("FAIL",), reason="RMA 1234"),
    ]
    sick = {n.name: _failing(n.name, Remedy.REPLACE) for n in nodes}
    actions = decide_nodes(nodes, sick)
    assert [(a.kind, a.nodes) for a in actions] == [(Kind.LEAVE, (n.name,)) for n in nodes]
    assert actions[0].reason == f"taken out of service by an operator (down: {reason}): left alone"
    # Slurm's own reasons and hyperscope's are not an operator's
    assert not any(
        operator_reason(r)
        for r in ("", "Not responding", "Node unexpectedly rebooted", "Kill task failed",
                  "hyperscope: gpu: x", "hyperscope agent: replacing: y", "Action:Replace",
                  "batch job complete failure")
    )  # fmt: skip
    slurms = NodeView("w4", "workers", "DOWN", reason="Not responding")
    assert decide_nodes([slurms], {})[0].kind is Kind.REPLACE


def test_a_not_responding_flicker_is_not_a_failure_but_a_lasting_silence_is() -> None:
    policy = Policy(flicker_s=5.0)
    flicker = NodeView("w1", "workers", "IDLE", ("NOT_RESPONDING",), not_responding_s=1.5)
    assert decide_nodes([flicker], {}, policy) == []
    lasting = NodeView("w1", "workers", "IDLE", ("NOT_RESPONDING",), not_responding_s=5.0)
    assert decide_nodes([lasting], {}, policy)[0].kind is Kind.REPLACE


def test_an_operators_mark_on_a_busy_node_waits_for_its_jobs_unless_set_down() -> None:
    busy = NodeView("w1", "workers", "MIXED", ("FAIL",), reason="Action:Replace")
    assert decide_nodes([busy], {}) == [
        Action(Kind.WAIT, ("w1",), "operator marked it: Action:Replace; waits for its jobs to end")
    ]
    draining = NodeView("w1", "workers", "ALLOCATED", ("DRAIN",), reason="Action:Replace")
    assert decide_nodes([draining], {})[0].kind is Kind.WAIT
    done = NodeView("w1", "workers", "IDLE", ("FAIL",), reason="Action:Reboot")
    assert decide_nodes([done], {})[0].kind is Kind.REBOOT
    now = NodeView("w1", "workers", "DOWN", ("COMPLETING",), reason="Action:Replace")  # --now
    assert decide_nodes([now], {})[0].kind is Kind.REPLACE


def test_replacements_past_the_rate_limit_are_held_but_operators_are_not_braked() -> None:
    policy = Policy(max_replacements=2, replacement_window_s=600)
    dead = [NodeView(f"w{i}", "workers", "DOWN") for i in range(1, 5)]
    marked = NodeView("w9", "workers", "IDLE", ("FAIL",), reason="Action:Replace")
    actions = decide_nodes([*dead, marked], {}, policy, recent_replacements=1)
    assert [(a.kind, a.nodes[0]) for a in actions] == [
        (Kind.REPLACE, "w1"), (Kind.HOLD, "w2"), (Kind.HOLD, "w3"), (Kind.HOLD, "w4"), (Kind.REPLACE, "w9"),
    ]  # fmt: skip
    assert actions[1].reason.startswith("rate limit: 2 replacement(s) already in the last 600 s")
    assert actions[1].reason.endswith("held: not responding (Slurm: down)")


def test_dead_controller_daemons_are_restarted() -> None:
    assert decide_daemons([]) == []
    assert decide_daemons([("munged", 7), ("slurmctld", 9)]) == [
        Action(
            Kind.RESTART,
            ("munged", "slurmctld"),
            "munged (pid 7) is gone, slurmctld (pid 9) is gone: started again",
        )
    ]
