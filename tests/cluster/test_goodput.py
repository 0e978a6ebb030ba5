"""Goodput from a job's recorded attempts: training is each attempt's start to its last beat; the
rest of the span (the hang before it was noticed, the requeue, the hold) is lost."""

from __future__ import annotations

from hyperscope.cluster.goodput import goodput
from hyperscope.store.attempts import Attempt

S = 1_000_000_000


def test_a_job_that_never_failed_trained_all_its_time_up_to_its_last_beat() -> None:
    g = goodput([Attempt(1, 0, 100 * S, None, "", None)], now_ns=160 * S, newest_beat_ns=159 * S)
    assert (g.attempts, g.restarts, g.wall_s, g.training_s, g.lost_s) == (1, 0, 60.0, 59.0, 1.0)
    assert g.ratio == 59 / 60


def test_a_hang_and_a_requeue_are_lost_time() -> None:
    tried = [
        Attempt(1, 0, 100 * S, 400 * S, "REQUEUED", 200 * S),  # hung at 200, requeued at 400
        Attempt(1, 1, 410 * S, 500 * S, "COMPLETED", 500 * S),
    ]
    g = goodput(tried, now_ns=900 * S)
    assert (g.restarts, g.wall_s, g.training_s, g.lost_s) == (1, 400.0, 190.0, 210.0)
    assert g.to_dict()["goodput"] == 0.475


def test_an_attempt_that_never_beat_or_was_never_seen_running_trained_nothing() -> None:
    tried = [
        Attempt(1, 0, None, 150 * S, "REQUEUED", None),  # ended before a sync saw it run
        Attempt(1, 1, 160 * S, 170 * S, "REQUEUED", None),  # never beat
        Attempt(1, 2, 180 * S, None, "", None),
    ]
    g = goodput(tried, now_ns=200 * S, newest_beat_ns=190 * S)
    # the span starts at the first start seen: the unseen attempt's time is not known
    assert (g.attempts, g.restarts, g.wall_s, g.training_s) == (3, 2, 40.0, 10.0)


def test_a_job_slurm_forgot_ends_where_the_catalog_last_heard_of_it() -> None:
    g = goodput([Attempt(1, 0, 100 * S, None, "", 150 * S)], now_ns=10_000 * S, ended_ns=160 * S)
    assert (g.wall_s, g.training_s) == (60.0, 50.0)


def test_nothing_started_yet_has_no_ratio() -> None:
    g = goodput([], now_ns=5 * S)
    assert g.ratio is None and g.to_dict()["goodput"] is None
