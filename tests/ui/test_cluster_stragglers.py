"""The Cluster page's stragglers and its "profile now" button, in Debian's chromium on a live local
cluster (2 workers, the agent on, ``straggler_action: notify``): a plain sbatch job of two ranks
calling only ``hyperscope.step()``, one node's rank slowed by an injected delay. The page shows
each rank's straggler score and the agent's verdict (the same the exporter serves); the button
asks the job's ranks to profile their next steps, through ``hyperscope capture``'s channel, and
says which profile is being written, and the store then holds those steps of both ranks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.cluster import jobs
from hyperscope.cluster.state import ClusterState
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import local_cluster, wait_for
from tests.recovery.test_stragglers_slurm import _finished, submit_two_rank_job
from tests.ui.conftest import screenshot
from tests.ui.harness import ui_server

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.capture]
pytest.importorskip("torch", reason="the job trains with PyTorch (./dev test installs it)")

__all__ = ["local_cluster"]  # the fixture, used below


def _steps(store_home: Path, job: str, profile: str) -> list[tuple[int, list[str]]]:
    """Each rank's recorded steps, or [] while the profile cannot be read yet."""
    try:
        with Store(store_home) as store:
            con = store.profile(job, profile).connect()
            try:
                rows = con.sql("SELECT rank, list(name ORDER BY ts_ns) FROM events WHERE kind = 'step' "
                               "GROUP BY rank ORDER BY rank").fetchall()  # fmt: skip
            finally:
                con.close()
    except (HyperscopeError, OSError):
        return []
    return [(int(r), list(names)) for r, names in rows]


def test_straggler_scores_and_profile_now_on_a_live_cluster(
    local_cluster: Callable[..., ClusterState], tmp_path: Path, page: Any
) -> None:
    state = local_cluster(spares=0, straggler_threshold_pct=30, straggler_steps=8, straggler_action="notify")
    home = Path(state.dir).parents[1]
    submitted = submit_two_rank_job(state, tmp_path)
    job, stop, slow, out = submitted.id, submitted.stop, submitted.slow, submitted.out
    beats_dir = jobs.heartbeat_dir(state)
    try:
        beats = wait_for(
            "both ranks' step times",
            lambda: len(b := [x for x in heartbeat.job_beats(beats_dir, job, 2) if x.step_ns]) == 2 and b,
        )
        assert isinstance(beats, list)
        rank = next(b.rank for b in beats if b.node == "workers-2")
        slow.write_text("workers-2 0.2")  # its rank: 0.2 s more per step, 3x slower
        with ui_server(home) as url:
            page.goto(f"{url}/#/cluster")
            named = f'#cluster-stragglers tr[data-job="{job}"][data-rank="{rank}"]'
            page.wait_for_function(
                f"() => document.querySelector('#cluster-page').dataset.state === 'ready'"
                f" && document.querySelector('{named} td[data-col=named]')?.textContent === 'straggler'",
                timeout=120_000,
            )
            score = page.locator(f"{named} td[data-col=score]").inner_text()
            assert score.startswith("+") and int(score.strip("+ %")) >= 30, score  # 0.3 s against 0.1 s
            other = f'#cluster-stragglers tr[data-job="{job}"]:not([data-rank="{rank}"])'
            assert page.locator(f"{other} td[data-col=named]").inner_text() == ""
            node = page.locator(
                '#cluster-nodes tr[data-node="workers-2"] td[data-col=straggler]'
            ).inner_text()
            assert f"rank {rank} on workers-2 of job {job} is a straggler" in node
            api = page.request.get(f"{url}/api/clusters/{state.name}").json()
            shown = {(s["job"], s["rank"]): s for s in api["stragglers"]}
            assert shown[(job, rank)]["named"] is True and shown[(job, rank)]["score"] >= 0.3

            page.fill("#capture-steps", "3")
            page.click(f'button[data-profile-job="{job}"]')
            page.wait_for_function(
                "() => ['done', 'error'].includes(document.querySelector('#capture-status').dataset.state)",
                timeout=120_000,
            )
            status = page.locator("#capture-status")
            assert status.get_attribute("data-state") == "done", status.inner_text()
            screenshot(page, "cluster-profile-now")
            text = status.inner_text()
            assert f"Job {job}: recording profile " in text and "(ranks 0, 1, 3 steps from step" in text
            store_home = jobs.store_home(state)
            assert f"hyperscope ui --home {store_home}" in text  # this server's home is not that store
        logged = [r for r in read_log(Path(state.dir)) if r.get("kind") == "straggler"]
        assert logged and logged[0]["rank"] == rank
        profile = text.split("recording profile ", 1)[1].split(" ", 1)[0]
        catalog_job = text.split(f"{profile} of the store's job ", 1)[1].split(" (ranks", 1)[0]
        steps = wait_for("both ranks' 3 steps", lambda: (s := _steps(store_home, catalog_job, profile))
                         and all(len(n) == 3 for _, n in s) and len(s) == 2 and s)  # fmt: skip
        assert isinstance(steps, list)
        for _, names in steps:  # consecutive steps of each rank (they do not step together here)
            first = int(names[0].removeprefix("ProfilerStep#"))
            assert names == [f"ProfilerStep#{k}" for k in range(first, first + 3)]
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nagent.log:\n" + "\n".join(map(str, read_log(Path(state.dir))))
        ) from None
    finally:
        stop.touch()
    ended = wait_for("the job to end", lambda: _finished(state, int(job)), timeout=120)
    assert ended == "COMPLETED", out.read_text()[-2000:]
