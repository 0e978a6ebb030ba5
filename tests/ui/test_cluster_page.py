"""The Cluster page in Debian's chromium on a live local cluster (2 workers, 1 spare, the agent
on): a 2-rank job beating, requeued once; the spare drained by an operator. The page shows each
node's group, Slurm state, health and reason, the spare, the job's attempts, restarts and goodput,
and the agent's decisions with their reasons — the same numbers ``/api/clusters/{name}`` gives."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperscope.cluster import jobs, manage
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import heartbeat
from tests.metrics.test_prometheus import BEATING
from tests.recovery.conftest import local_cluster, wait_for
from tests.ui.conftest import screenshot
from tests.ui.harness import ui_server

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

__all__ = ["local_cluster"]  # the fixture, used below


def _cell(page: Any, table: str, row: str, col: int) -> str:
    return str(page.locator(f"#{table} tbody tr{row} td").nth(col).inner_text())


def test_cluster_page_on_a_live_cluster(local_cluster: Callable[..., ClusterState], page: Any) -> None:
    state = local_cluster()
    home = Path(state.dir).parents[1]
    slurm = Slurm(Path(state.slurm_conf))
    job = manage.submit(state.name, home, ["--wrap", BEATING, "-N", "2", "-n", "2", "-o", os.devnull]).job_id
    beats = jobs.heartbeat_dir(state)
    wait_for(
        "both ranks beating",
        lambda: len([b for b in heartbeat.read(beats) if b.job == str(job) and b.last_step >= 10]) == 2,
        timeout=90,
    )
    slurm.run("scontrol", "update", "nodename=workers-3", "state=drain", "reason=disk swap, ticket 42")
    slurm.run("scontrol", "requeue", str(job))
    wait_for(
        "the second attempt running",
        lambda: (j := {j.id: j for j in slurm.jobs()}[job]).state == "RUNNING" and j.restarts == 1,
        timeout=90,
    )
    with ui_server(home) as url:
        page.goto(f"{url}/#/cluster")
        page.wait_for_function(
            "() => document.querySelector('#cluster-page').dataset.state === 'ready'"
            " && document.querySelectorAll('#cluster-nodes tbody tr').length === 4"
            " && document.querySelector('#cluster-decisions tr[data-kind=leave]') !== null"
            " && [...document.querySelectorAll('#cluster-jobs td[data-col=attempts]')]"
            ".some(t => t.textContent === '2')",
            timeout=60_000,
        )
        assert page.locator(".tab.active").inner_text() == "Cluster"
        spare = '[data-node="workers-3"]'
        assert _cell(page, "cluster-nodes", spare, 1) == "workers"
        assert _cell(page, "cluster-nodes", spare, 2) == "worker (spare)"
        assert _cell(page, "cluster-nodes", spare, 4) == "idle+drain"
        assert _cell(page, "cluster-nodes", spare, 5) == "unhealthy"
        assert _cell(page, "cluster-nodes", spare, 6) == "disk swap, ticket 42"
        assert _cell(page, "cluster-nodes", '[data-node="workers-1"]', 5) == "healthy"
        assert (
            "workers-3 (workers, not ready: disk swap, ticket 42)"
            in page.locator("#cluster-spares").inner_text()
        )
        assert "3 nodes, 1 spare, 1 unhealthy" in page.locator("#cluster-summary").inner_text()

        row = f'[data-slurm-job="{job}"]'
        assert _cell(page, "cluster-jobs", row, 2) == "RUNNING"
        assert _cell(page, "cluster-jobs", row, 4) == "2"  # attempts
        assert _cell(page, "cluster-jobs", row, 5) == "1"  # restarts
        api = page.request.get(f"{url}/api/clusters/{state.name}").json()
        (shown,) = [j for j in api["jobs"] if j["id"] == job]
        assert shown["goodput"]["attempts"] == 2 and shown["restarts"] == 1
        goodput = _cell(page, "cluster-jobs", row, 8)
        assert goodput.endswith(" %") and 0 < float(goodput[:-2]) <= 100
        reasons = page.locator(
            '#cluster-decisions tr[data-kind="leave"] td[data-col=reason]'
        ).all_inner_texts()
        assert reasons == ["taken out of service by an operator (drain: disk swap, ticket 42): left alone"]
        assert page.locator('#cluster-decisions tr[data-kind="release"]').count() >= 1  # the hold it lifted
        screenshot(page, "cluster-page")
