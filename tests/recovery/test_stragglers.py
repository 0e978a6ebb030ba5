"""Straggler detection on step times (pure): thresholds, consecutive steps, recovery, the actions
each policy decides, and the spec's settings."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from hyperscope.cluster.spec import SpecError, load_spec
from hyperscope.recovery import straggler_watch
from hyperscope.recovery.decide import Kind, Policy, decide_stragglers
from hyperscope.recovery.heartbeat import Beat
from hyperscope.recovery.stragglers import Straggler, StragglerPolicy, StragglerTracker

MS = 1_000_000
RECORDED = Path(__file__).parents[1] / "data" / "ondemand" / "straggler_beats.json"


def _pass(
    steps: dict[int, int], times_ms: dict[int, float], nodes: dict[int, str] | None = None
) -> list[Beat]:
    nodes = nodes or {}
    return [Beat(r, steps[r], 0, int(times_ms[r] * MS), nodes.get(r, f"n{r + 1}")) for r in steps]


def test_a_rank_slow_for_k_consecutive_steps_is_named_with_its_median_neighbour() -> None:
    t = StragglerTracker(StragglerPolicy(threshold_pct=10, steps=20))
    assert t.observe("7", _pass({0: 10, 1: 10, 2: 10}, {0: 100, 1: 100, 2: 100})) == []
    # rank 2 at 115 ms against a median of 100 ms: 15 % over, 10 steps per pass
    assert t.observe("7", _pass({0: 20, 1: 20, 2: 20}, {0: 100, 1: 101, 2: 115})) == []
    (s,) = t.observe("7", _pass({0: 30, 1: 30, 2: 30}, {0: 99, 1: 101, 2: 116}))
    assert (s.job, s.rank, s.node, s.slow_steps, s.median_ns) == ("7", 2, "n3", 20, 100 * MS)
    assert s.median_rank in (0, 1) and round(s.over_pct) == 16
    assert "rank 2 on n3 of job 7 is a straggler" in s.reason(t.policy)
    assert "16% over the median of the other ranks (100.0 ms), for 20 consecutive steps" in s.reason(t.policy)


def test_a_window_at_speed_starts_the_count_again_and_a_repeated_beat_counts_once() -> None:
    t = StragglerTracker(StragglerPolicy(threshold_pct=10, steps=20))
    t.observe("1", _pass({0: 0, 1: 0}, {0: 100, 1: 100}))
    t.observe("1", _pass({0: 15, 1: 15}, {0: 100, 1: 130}))  # 15 slow steps
    t.observe("1", _pass({0: 15, 1: 15}, {0: 100, 1: 130}))  # the same files again: still 15
    assert t.observe("1", _pass({0: 25, 1: 25}, {0: 100, 1: 105})) == []  # 5 %: not slow, count 0
    assert t.observe("1", _pass({0: 40, 1: 40}, {0: 100, 1: 130})) == []  # 15 again, not 30
    assert [s.rank for s in t.observe("1", _pass({0: 50, 1: 50}, {0: 100, 1: 130}))] == [1]
    # one window at speed is not enough on a noisy machine, nor a pass with too few beats ...
    assert [s.rank for s in t.observe("1", _pass({0: 60, 1: 60}, {0: 100, 1: 100}))] == [1]
    assert [s.rank for s in t.observe("1", _pass({0: 61}, {0: 100}))] == [1]
    # ... the same count of steps at speed as it took to be named is
    assert t.observe("1", _pass({0: 70, 1: 70}, {0: 100, 1: 100})) == []


def test_unknown_times_single_ranks_and_finished_jobs_decide_nothing() -> None:
    t = StragglerTracker(StragglerPolicy(steps=1))
    assert t.observe("2", [Beat(0, 5, 0, 100 * MS, "n1")]) == []  # no one to compare with
    assert t.observe("2", [Beat(0, 5, 0, 100 * MS, "n1"), Beat(1, 5, 0, 0, "n2")]) == []  # 0: unknown
    t.observe("3", _pass({0: 1, 1: 1}, {0: 100, 1: 500}))
    t.forget({"2"})
    assert all(job == "2" for job, _ in t._counts)


def test_recorded_step_times_of_a_slowed_node_find_it_and_only_it() -> None:
    """Heartbeats recorded once a second from two real ranks (Slurm nodes n1, n2) of
    tests/data/ondemand/train_until.py at 50 ms per step, with 50 ms more injected on n2 from
    the 6th second on."""
    passes = json.loads(RECORDED.read_text())
    t = StragglerTracker(StragglerPolicy(threshold_pct=30, steps=20))
    first = None
    for i, beats in enumerate(passes):
        found = t.observe("5", [Beat(**b) for b in beats])
        assert {s.node for s in found} <= {"n2"}
        if found and first is None:
            first = i
    assert first is not None and first >= 6  # not before the delay began


def test_each_policy_decides_its_actions() -> None:
    t = StragglerTracker(StragglerPolicy(steps=1))
    t.observe("9", _pass({0: 0, 1: 0}, {0: 10, 1: 10}))
    found = t.observe("9", _pass({0: 5, 1: 5}, {0: 10, 1: 50}))
    notify = decide_stragglers(found, Policy())
    assert [(a.kind, a.nodes, a.job) for a in notify] == [(Kind.STRAGGLER, ("n2",), "9")]
    profile = decide_stragglers(found, Policy(stragglers=StragglerPolicy(action="profile", profile_steps=7)))
    assert [a.kind for a in profile] == [Kind.STRAGGLER, Kind.PROFILE]
    assert profile[1].reason.endswith("capture of 7 steps of ranks 1 and 0 (median)")
    assert decide_stragglers(found, Policy(stragglers=StragglerPolicy(action="off"))) == []


def _spec(tmp_path: Path, recovery: str) -> Path:
    (tmp_path / "lifecycle").mkdir(exist_ok=True)
    (tmp_path / "lifecycle" / "on_create.sh").write_text("#!/bin/sh\n")
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "name: s\nprovider: local\nlifecycle_scripts: lifecycle\nshared_dir: shared\n"
        "instance_groups:\n  - {name: c, role: controller, count: 1}\n  - {name: w, role: worker, count: 2}\n"
        f"recovery: {recovery}\n"
    )
    return spec


def test_the_spec_sets_the_thresholds_and_refuses_bad_ones(tmp_path: Path) -> None:
    r = load_spec(_spec(tmp_path, "{}")).recovery
    assert (r.straggler_threshold_pct, r.straggler_steps, r.straggler_action) == (10, 20, "notify")
    r = load_spec(
        _spec(tmp_path, "{straggler_threshold_pct: 25, straggler_steps: 5, straggler_action: profile}")
    ).recovery
    assert (r.straggler_threshold_pct, r.straggler_steps, r.straggler_action) == (25, 5, "profile")
    with pytest.raises(
        SpecError,
        match=r"recovery.straggler_action: must be one of notify, profile, replace, off \(got 'drain'\)",
    ):
        load_spec(_spec(tmp_path, "{straggler_action: drain}"))
    with pytest.raises(SpecError, match=r"recovery\.straggler_steps"):
        load_spec(_spec(tmp_path, "{straggler_steps: 0}"))


def test_a_rank_is_named_on_its_node_before_the_log_says_so_and_cleared_after() -> None:
    """The Cluster page reads agent.log, then the state: a rank the log names is then always
    shown on its node too (CI once saw the log's verdict with the node's cell still empty)."""
    node = SimpleNamespace(name="n2", straggler="")
    seen: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def update() -> Iterator[Any]:
        yield SimpleNamespace(nodes=[node])
        seen.append(("state", node.straggler))

    agent = SimpleNamespace(log=lambda r: seen.append(("log", r["phase"])), _update=update)
    s = Straggler("7", 1, "n2", 300 * MS, 100 * MS, 8, 0)
    straggler_watch._name(cast(Any, agent), s, "slow", "slow")
    straggler_watch._name(cast(Any, agent), s, "", "back at speed")
    assert seen == [("state", "slow"), ("log", "decided"), ("log", "recovered"), ("state", "")]
