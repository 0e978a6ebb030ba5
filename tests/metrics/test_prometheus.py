"""``hyperscope metrics`` scraped by a real Prometheus (Debian's ``prometheus``, started here on a
private port with its own config and storage) on a real local Slurm cluster: a 2-rank job beating
through ``hyperscope.recovery.heartbeat``, requeued once, and a node an operator drained; the series
are read back through Prometheus's HTTP API."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperscope.capture._nvml import NvmlMissing, NvmlSeam
from hyperscope.cluster import manage
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.state import ClusterState
from tests.recovery.conftest import wait_for

pytestmark = pytest.mark.slurm

#: two ranks, each calling the heartbeat hs.step() calls, 20 steps a second, until cancelled
BEATING = (
    f"srun -N 2 -n 2 {sys.executable} -c "
    "'import time; from hyperscope.recovery import heartbeat as h\n"
    "while True: h.beat(); time.sleep(0.05)'"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _home(state: ClusterState) -> Path:
    return Path(state.dir).parents[1]


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Callable[[ClusterState], int]]:
    """``start(state)``: ``hyperscope metrics --cluster`` on a free port; the port. Stopped after."""
    procs: list[subprocess.Popen[str]] = []

    def start(state: ClusterState) -> int:
        argv = [sys.executable, "-m", "hyperscope", "metrics", "--cluster", state.name, "--port", "0",
                "--home", str(_home(state)), "--no-gpus"]  # fmt: skip
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert m, f"hyperscope metrics did not start: {line}{p.stdout.read() if p.poll() is not None else ''}"
        return int(m.group(1))

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], str]]:
    """``start(port)``: a Prometheus scraping 127.0.0.1:port every second; its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's prometheus is not installed (./dev installs it when run as root)")
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: int) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: hyperscope\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
        )
        port = _free_port()
        log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=log, cwd=tmp_path,
            )
        )  # fmt: skip
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except OSError:
        return []  # not listening yet
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _values(base: str, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(
            sorted((k, v) for k, v in r["metric"].items() if k not in ("instance", "job", "__name__"))
        ): float(r["value"][1])
        for r in _query(base, promql)
    }


def test_prometheus_scrapes_nodes_jobs_goodput_and_agent_actions(
    local_cluster: Callable[..., ClusterState],
    exporter: Callable[[ClusterState], int],
    prometheus: Callable[[int], str],
) -> None:
    state = local_cluster()
    home = _home(state)
    slurm = Slurm(Path(state.slurm_conf))
    submitted = manage.submit(state.name, home, ["--wrap", BEATING, "-N", "2", "-n", "2", "-o", os.devnull])
    job = str(submitted.job_id)
    base = prometheus(exporter(state))
    c = state.name

    # the job beats on both ranks: step numbers, their step time (~0.05 s), its attempt
    wait_for("the scrape", lambda: _values(base, 'up{job="hyperscope"}') == {(): 1.0}, timeout=60)
    steps = wait_for(
        "both ranks' step time",
        lambda: (
            (v := _values(base, f'hyperscope_job_rank_step_seconds{{slurm_job="{job}"}}'))
            and len(v) == 2
            and v
        ),
        timeout=60,
    )
    assert isinstance(steps, dict) and all(0.04 <= s <= 1.0 for s in steps.values()), steps
    ranks = _values(base, f'hyperscope_job_rank_step{{slurm_job="{job}"}}')
    assert {dict(k)["rank"] for k in ranks} == {"0", "1"} and all(v > 0 for v in ranks.values())
    # each rank's straggler score (against the other's step time) and the agent's verdict: none
    scores = wait_for(
        "both ranks' straggler scores",
        lambda: (
            len(v := _values(base, f'hyperscope_job_rank_straggler_score{{slurm_job="{job}"}}')) == 2 and v
        ),
        timeout=60,
    )
    assert isinstance(scores, dict) and {dict(k)["node"] for k in scores} == {"workers-1", "workers-2"}
    assert all(-0.9 < v < 9.0 for v in scores.values()), scores  # same script, same pace: no outlier
    named = _values(base, f'hyperscope_job_rank_straggler{{slurm_job="{job}"}}')
    assert sorted(named.values()) == [0.0, 0.0]
    assert _values(base, f'hyperscope_job_state{{slurm_job="{job}"}}') == {
        (("cluster", c), ("name", submitted.catalog_job), ("slurm_job", job), ("state", "RUNNING")): 1.0
    }
    wait_for(
        "its first attempt",
        lambda: _values(base, f'hyperscope_job_attempts{{slurm_job="{job}"}}'),
        timeout=30,
    )

    # every node: Slurm's state, health, spare; an operator drains one: its reason, the agent's "leave"
    nodes = _values(base, "hyperscope_node_healthy")
    assert {dict(k)["node"] for k in nodes} == {"workers-1", "workers-2", "workers-3"}
    assert _values(base, 'hyperscope_node_spare{node="workers-3"}') == {
        (("cluster", c), ("group", "workers"), ("node", "workers-3")): 1.0
    }
    slurm.run("scontrol", "update", "nodename=workers-3", "state=drain", "reason=disk swap, ticket 42")
    wait_for(
        "the drained node unhealthy, with its reason",
        lambda: (
            _values(base, 'hyperscope_node_healthy{node="workers-3"}').get(
                (("cluster", c), ("group", "workers"), ("node", "workers-3"))
            )
            == 0.0
            and _values(base, 'hyperscope_node_reason_info{node="workers-3"}')
        ),
        timeout=60,
    )
    assert [dict(k)["reason"] for k in _values(base, 'hyperscope_node_reason_info{node="workers-3"}')] == [
        "disk swap, ticket 42"
    ]
    assert _values(base, 'hyperscope_node_slurm_state{node="workers-3"}') == {
        (("cluster", c), ("group", "workers"), ("node", "workers-3"), ("state", "idle+drain")): 1.0
    }
    left = wait_for(
        "the agent's decision to leave it",
        lambda: _values(base, 'hyperscope_agent_actions_total{kind="leave"}'),
        timeout=60,
    )
    assert left == {(("cluster", c), ("kind", "leave"), ("phase", "decided")): 1.0}
    reasons = _values(base, 'hyperscope_agent_last_decision_timestamp_seconds{kind="leave"}')
    assert [dict(k)["target"] for k in reasons] == ["workers-3"]
    assert "taken out of service by an operator" in dict(next(iter(reasons)))["reason"]

    # a requeue: a second attempt, one restart, time lost between the two; goodput below 1
    slurm.run("scontrol", "requeue", job)
    wait_for(
        "the second attempt beating",
        lambda: (
            _values(base, f'hyperscope_job_attempts{{slurm_job="{job}"}}')
            == {(("cluster", c), ("slurm_job", job)): 2.0}
            and _values(base, f'hyperscope_job_state{{slurm_job="{job}",state="RUNNING"}}')
        ),
        timeout=90,
    )
    assert _values(base, f'hyperscope_job_restarts{{slurm_job="{job}"}}') == {
        (("cluster", c), ("slurm_job", job)): 1.0
    }
    assert _values(base, 'hyperscope_agent_actions_total{kind="release"}')  # it lifted the hold
    good = _values(base, f'hyperscope_job_goodput_ratio{{slurm_job="{job}"}}')
    lost = _values(base, f'hyperscope_job_lost_seconds{{slurm_job="{job}"}}')
    train = _values(base, f'hyperscope_job_training_seconds{{slurm_job="{job}"}}')
    wall = _values(base, f'hyperscope_job_wall_seconds{{slurm_job="{job}"}}')
    (g,), (lo,), (t,), (w,) = good.values(), lost.values(), train.values(), wall.values()
    assert 0 < g < 1 and lo > 0 and t > 0 and abs(t + lo - w) < 0.01, (g, lo, t, w)
    assert _values(base, "hyperscope_slurm_up") == {(("cluster", c),): 1.0}
    # this host's GPUs through the real NVML: none here means no GPU series at all, not zeros
    gpus = _values(base, "hyperscope_gpu_temperature_celsius")
    assert {dict(k)["gpu"] for k in gpus} == {str(i) for i in range(_gpu_count())}
    if not gpus:
        assert _query(base, '{__name__=~"hyperscope_gpu_.*"}') == []


def _gpu_count() -> int:
    seam = NvmlSeam()
    try:
        seam.init()
    except (NvmlMissing, RuntimeError):
        return 0
    try:
        return seam.device_count()
    finally:
        seam.shutdown()
