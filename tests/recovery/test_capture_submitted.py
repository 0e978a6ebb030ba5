"""``hyperscope capture`` of a job started by ``hyperscope submit`` on a real local Slurm cluster:
found by its catalog name through the cluster's control folder (beside its heartbeats), both
ranks record the same number of consecutive steps, and the profile joins the job's catalog entry
in the cluster's store."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.capture import remote
from hyperscope.cluster import jobs, manage
from hyperscope.cluster.state import ClusterState
from tests.recovery.conftest import wait_for
from tests.recovery.test_stragglers_slurm import SCRIPT, _finished
from tests.ui.test_cluster_stragglers import _steps

pytestmark = [pytest.mark.slurm, pytest.mark.capture]


def test_a_job_started_by_submit_is_captured_by_its_catalog_name(
    local_cluster: Callable[..., ClusterState], tmp_path: Path
) -> None:
    state = local_cluster(spares=0)
    home = Path(state.dir).parents[1]
    stop = tmp_path / "stop"
    batch = tmp_path / "job.sbatch"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1\n"
        f"srun {sys.executable} {SCRIPT} --stop {stop} --step-time 0.05 --max-s 240\n"
    )
    submitted = manage.submit(state.name, home, ["-o", str(tmp_path / "job.out"), str(batch)])
    try:
        # both ranks announce themselves in the cluster's control folder once they step
        wait_for(
            "both ranks to be reachable",
            lambda: any(
                len(r.ranks) == 2 and submitted.catalog_job in r.names
                for r in remote.running(remote.controls(home))
            ),
            timeout=120,
        )
        done = remote.capture_running(submitted.catalog_job, home, steps=3, timeout_s=60)
        assert done.finished and done.ranks == (0, 1) and done.job == submitted.catalog_job
        assert done.store == jobs.store_home(state) == submitted.store
        steps = wait_for(
            "both ranks' 3 steps",
            lambda: (s := _steps(done.store, done.job, done.profile_id)) and len(s) == 2
            and all(len(n) == 3 for _, n in s) and s,
        )  # fmt: skip
        assert isinstance(steps, list)
        for _, names in steps:
            first = int(names[0].removeprefix("ProfilerStep#"))
            assert names == [f"ProfilerStep#{k}" for k in range(first, first + 3)]
    finally:
        stop.touch()
    ended = wait_for("the job to end", lambda: _finished(state, submitted.job_id), timeout=120)
    assert ended == "COMPLETED", (tmp_path / "job.out").read_text()[-2000:]
