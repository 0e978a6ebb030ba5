"""The shipped examples produce the profiles the README promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from tests.conftest import REPO

pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


def test_transformer_example(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_example(
        "train_transformer.py", "--tiny", "--steps", "6", "--cpu-ops", "--job", "tt", "--home", str(home)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(home) as store:
        assert store.job("tt").status is JobStatus.COMPLETED
        con = store.profile("tt").connect()
        kinds = dict(con.sql("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
        marks = dict(
            con.sql(
                "SELECT name, count(*) FROM events WHERE kind = 'annotation' "
                "AND args LIKE '{\"step\":%' GROUP BY name"
            ).fetchall()
        )
        metrics = {m for (m,) in con.sql("SELECT DISTINCT metric FROM samples").fetchall()}
    assert kinds["step"] == 6 and kinds["cpu_op"] > 500
    assert marks == {"data": 6, "forward": 6, "backward": 6, "optimizer": 6}
    assert {
        "cpu_util_pct",
        "cpu_core_util_pct",
        "process_cpu_util_pct",
        "process_rss_bytes",
        "host_mem_used_bytes",
    } <= metrics


def test_transformer_example_that_raises_is_a_failed_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_example(
        "train_transformer.py",
        "--tiny",
        "--steps",
        "6",
        "--fail-at",
        "3",
        "--job",
        "boom",
        "--home",
        str(home),
    )
    assert done.returncode == 1 and "failing on purpose at step 3" in done.stderr
    with Store(home) as store:
        job = store.job("boom")
        steps = store.profile("boom").connect().sql("SELECT count(*) FROM events WHERE kind = 'step'")
        assert steps.fetchall() == [(3,)]
    assert job.status is JobStatus.FAILED and "RuntimeError: failing on purpose at step 3" in job.message


def test_two_rank_ddp_example_shows_both_ranks_and_their_all_reduces(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_example("ddp_gloo.py", "--steps", "4", "--job", "ddp", "--home", str(home))
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(home) as store:
        job = store.job("ddp")
        con = store.profile("ddp").connect()
        rows = con.sql(
            "SELECT rank, count(*) FILTER (WHERE name = 'gloo:all_reduce'), "
            "count(*) FILTER (WHERE kind = 'step') FROM events GROUP BY rank ORDER BY rank"
        ).fetchall()
        ranks = store.profile("ddp").meta.ranks
    assert job.status is JobStatus.COMPLETED and job.ranks == 2
    assert [r[0] for r in rows] == [0, 1]
    assert all(r[1] >= 4 and r[2] == 4 for r in rows), rows
    assert [r.world_size for r in ranks] == [2, 2]
