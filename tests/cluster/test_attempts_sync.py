"""What the catalog sync records of each attempt, fed the ``scontrol show job -o`` lines a real
Slurm 22.05 printed for one job run, requeued (COMPLETING with the new restart count and the
requeue's time as StartTime, then PENDING on BeginTime), started again by the agent and
cancelled (tests/data/metrics/requeue_show_job.txt)."""

from __future__ import annotations

from pathlib import Path

from hyperscope.cluster import jobs
from hyperscope.cluster.slurm import parse_show_job
from hyperscope.store import attempts
from hyperscope.store.attempts import Attempt
from hyperscope.store.catalog import Catalog

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def test_each_attempt_gets_its_own_start_and_the_requeue_ends_the_one_before(tmp_path: Path) -> None:
    lines = (DATA / "requeue_show_job.txt").read_text().splitlines()
    states = [parse_show_job(line)[0] for line in lines]
    assert [(j.state, j.restarts) for j in states] == [
        ("RUNNING", 0), ("COMPLETING", 1), ("PENDING", 1), ("RUNNING", 1), ("COMPLETING", 1),
    ]  # fmt: skip
    t = lambda text: jobs.slurm_time_ns(text) or 0  # noqa: E731
    beats = tmp_path / "beats"
    beats.mkdir()
    cat = Catalog(tmp_path / "catalog.sqlite")
    for job in states:  # each seen well after it was printed: every time in it is in the past
        jobs._record_attempts(cat, "rs:1", job, beats, t("2026-12-01T13:12:30"))
    assert attempts.read(cat, "rs:1") == {
        1: [
            Attempt(1, 0, t("2026-12-01T13:12:00"), t("2026-12-01T13:12:04"), "REQUEUED", None),
            Attempt(1, 1, t("2026-12-01T13:12:05"), None, "", None),
        ]
    }
    cat.close()
