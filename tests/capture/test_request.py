"""The request files and the agreement arithmetic of on-demand capture (pure, no processes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hyperscope.capture import remote
from hyperscope.capture import request as rq
from hyperscope.errors import UsageError

S = 1_000_000_000  # ns


def _answer(rank: int, step: int, ts_ns: int, step_ns: int) -> rq.Answer:
    return rq.Answer(id="r1", rank=rank, phase=rq.ACK, step=step, ts_ns=ts_ns, step_ns=step_ns)


def test_the_start_is_past_where_the_fastest_rank_will_be_when_every_rank_has_read_it() -> None:
    now = 100 * S
    answers = [
        _answer(0, 50, now - S // 2, S // 100),  # 100 steps/s, answered half a second ago
        _answer(1, 48, now, S // 100),
    ]
    start = rq.plan_start(answers, now, lead_s=1.0)
    # rank 0 is at 50 + 150 = 200 one second from now; rank 1 at 148
    assert start == 201
    assert all(rq.predicted_step(a, now + S) < start for a in answers)


def test_slow_steps_still_start_at_least_two_steps_ahead_of_every_rank() -> None:
    now = 100 * S
    answers = [_answer(0, 7, now, 30 * S), _answer(1, 8, now, 30 * S)]  # 30 s per step
    assert rq.plan_start(answers, now, lead_s=1.0) == 10
    # a rank that has not finished a step in the last second says step_ns 0: no guess made
    assert rq.plan_start([_answer(0, 3, now, 0)], now, lead_s=5.0) == 5


def test_ranks_that_do_not_step_together_each_get_their_own_start() -> None:
    now = 100 * S
    together = [_answer(0, 50, now, S // 10), _answer(1, 49, now, S // 10)]
    assert rq.plan_starts(together, now, lead_s=1.0) == (61, {})  # one step for both
    # in lockstep, answered 0.8 s apart at 100 steps/s: 80 steps apart, one start all the same
    late = [_answer(0, 100, now - 8 * S // 10, S // 100), _answer(1, 180, now, S // 95)]
    assert rq.in_lockstep(late) and rq.plan_starts(late, now, lead_s=2.0)[1] == {}
    apart = [_answer(0, 400, now, S // 10), _answer(1, 150, now, S // 4)]  # a straggler, far behind
    assert rq.plan_starts(apart, now, lead_s=1.0) == (-1, {0: 411, 1: 155})
    go = rq.Request(id="x", phase="go", ranks=None, steps=3, cpu_ops=False, job="j", home="", created_ns=0,
                    start_step=-1, starts={"0": 411, "1": 155})  # fmt: skip
    assert (go.start_for(0), go.start_for(1)) == (411, 155)
    assert rq.Request.from_json(go.to_json()) == go


def test_a_duration_becomes_steps_at_the_slowest_ranks_pace() -> None:
    answers = [_answer(0, 1, 0, S // 10), _answer(1, 1, 0, S // 5)]
    assert rq.steps_for_duration(answers, 2.0) == 10  # 0.2 s per step on rank 1
    assert rq.steps_for_duration(answers, 0.01) == 1
    assert rq.steps_for_duration([_answer(0, 1, 0, 0)], 5.0) == 1


def test_ranks_parse_lists_and_ranges_and_refuse_the_rest() -> None:
    assert rq.parse_ranks("0,3") == (0, 3)
    assert rq.parse_ranks("2-4,0, 3") == (0, 2, 3, 4)
    for bad in ("", "a", "3-1", "1,,2", "-1"):
        with pytest.raises(UsageError, match="--ranks"):
            rq.parse_ranks(bad)


def test_files_round_trip_and_a_request_knows_its_ranks(tmp_path: Path) -> None:
    req = rq.Request(id="x", phase="ask", ranks=(1,), steps=3, cpu_ops=True, job="j", home="/h",
                     created_ns=5)  # fmt: skip
    assert rq.Request.from_json(req.to_json()) == req
    assert req.wants(1) and not req.wants(0)
    p = rq.Presence(key="k", rank=0, world_size=2, node="n1", pid=9, names=("j", "42"), step=3, ts_ns=1,
                    step_ns=2, home="", job="j")  # fmt: skip
    assert rq.Presence.from_json(p.to_json()) == p
    paths = rq.Paths(tmp_path)
    rq.write_atomic(paths.live("k", 0), p.to_json())
    (tmp_path / rq.LIVE_DIR / "junk.1.json").write_text("{not json")
    assert rq.read_presences(tmp_path) == [p]
    assert rq.safe_key("host/with spaces:1") == "host_with_spaces_1"


def _presence(tmp_path: Path, key: str, rank: int, names: tuple[str, ...], age_s: float) -> None:
    p = rq.Presence(key=key, rank=rank, world_size=2, node="n1", pid=1, names=names, step=10,
                    ts_ns=time.time_ns() - int(age_s * S), step_ns=S // 100, home="", job="")  # fmt: skip
    rq.write_atomic(rq.Paths(tmp_path / "control").live(key, rank), p.to_json())


def test_finding_a_job_tells_running_from_stopped_from_unknown_and_ambiguous(tmp_path: Path) -> None:
    places = [remote.Control(tmp_path / "control", tmp_path)]
    _presence(tmp_path, "run-a", 0, ("train", "41"), age_s=0)
    _presence(tmp_path, "run-a", 1, ("train", "41"), age_s=0)
    found = remote.find("41", places)
    assert found.key == "run-a" and sorted(found.ranks) == [0, 1] and found.world_size == 2
    assert remote.find("run-a", places).key == "run-a"

    _presence(tmp_path, "run-b", 0, ("old",), age_s=60)
    with pytest.raises(
        remote.CaptureError, match=r"job 'old' is not running: its ranks last answered 60 s ago"
    ):
        remote.find("old", places)
    with pytest.raises(remote.CaptureError, match=r"no running job 'nope'.*hyperscope capture --list"):
        remote.find("nope", places)

    _presence(tmp_path, "run-c", 0, ("train",), age_s=0)
    with pytest.raises(UsageError, match=r"'train' names 2 running jobs: run-a .*; run-c"):
        remote.find("train", places)


def test_bad_lengths_and_ranks_are_refused_before_anything_is_asked(tmp_path: Path) -> None:
    places = [remote.Control(tmp_path / "control", tmp_path)]
    _presence(tmp_path, "run-a", 0, ("train",), age_s=0)
    with pytest.raises(UsageError, match="--steps N or --duration S"):
        remote.capture_running("train", tmp_path, places=places)
    with pytest.raises(UsageError, match="not both"):
        remote.capture_running("train", tmp_path, steps=2, duration_s=1.0, places=places)
    with pytest.raises(UsageError, match=r"--ranks names rank\(s\) 5; job run-a has ranks 0 to 1"):
        remote.capture_running("train", tmp_path, steps=2, ranks=[5], places=places)
    assert not (tmp_path / "control" / rq.REQUESTS_DIR).exists()


def test_the_askers_module_says_what_it_offers() -> None:
    assert sorted(remote.__all__) == [
        "CaptureError", "CaptureResult", "Control", "RunningJob", "capture_running", "controls", "running",
    ]  # fmt: skip
