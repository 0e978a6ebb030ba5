"""Issue 14, "right defaults", on a real local cluster: the periodic health check expects each
group's GPU count (a node that lost one is drained and replaced, and comes back with all of
them), runs the spec's folder of user checks, and ``delete`` leaves no health check behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperscope.cluster import manage
from hyperscope.cluster.local import MARKER
from hyperscope.cluster.state import ClusterState, processes_with_env
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import wait_for

pytestmark = pytest.mark.slurm


def _replaced(state: ClusterState, node: str) -> list[dict[str, Any]]:
    return [r for r in read_log(Path(state.dir)) if r["kind"] == "replace" and r["nodes"][0] == node]


def test_a_missing_gpu_and_a_failing_user_check_drain_the_node_and_it_is_replaced(
    local_cluster: Callable[..., ClusterState], tmp_path: Path
) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    once = tmp_path / "ib-down-once"
    script = checks / "ib-links"
    # fails once on workers-1 once the marker file is there (its "broken link"), passes elsewhere
    script.write_text(
        f'#!/bin/bash\nif [ "$SLURMD_NODENAME" = workers-1 ] && rm {once} 2>/dev/null; then\n'
        '  echo "mlx5_0 down"; exit 2\nfi\necho ok\n'
    )
    script.chmod(0o755)
    state = local_cluster(gpus=2, health_checks_dir=str(checks), health_check_interval=2)
    wrapper = (Path(state.dir) / "etc" / "healthcheck.sh").read_text()
    assert "workers-1|workers-2|workers-3) gpus=2" in wrapper and f"--checks-dir {checks}" in wrapper
    once.touch()

    wait_for(
        "the user check's replacement",
        lambda: [r for r in _replaced(state, "workers-1") if r["phase"] == "done"],
    )
    decided = _replaced(state, "workers-1")[0]
    assert decided["reason"] == "drained by its health check: hyperscope: user:ib-links: mlx5_0 down"

    gone = Path(state.dir) / "dev" / "workers-2" / "nvidia1"
    gone.unlink()  # a GPU fell off the bus
    wait_for(
        "the GPU's replacement", lambda: [r for r in _replaced(state, "workers-2") if r["phase"] == "done"]
    )
    decided = _replaced(state, "workers-2")[0]
    assert decided["reason"].startswith(
        "drained by its health check: hyperscope: gpu.count: 1 GPUs visible, 2 expected"
    )
    assert gone.exists()  # new hardware: both GPUs again

    home = Path(state.dir).parents[1]
    assert manage.delete(state.name, home)
    assert processes_with_env([f"{MARKER}={state.dir}"]) == []  # no daemon, task or health check left
