"""The fleet snapshot's pure views and agent.log's incremental reader."""

from __future__ import annotations

from pathlib import Path

from hyperscope.cluster import fleet
from tests.metrics.test_families import recorded


def test_log_tail_reads_only_whole_new_lines_and_starts_again_on_a_new_log(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    tail = fleet.LogTail(path)
    assert tail.read() == []
    path.write_text('{"kind": "start", "phase": "done"}\n{"kind": "repl')
    assert tail.read() == [{"kind": "start", "phase": "done"}]
    with open(path, "a") as f:
        f.write('ace", "phase": "decided"}\nnot json\n')
    assert [r["kind"] for r in tail.read()] == ["start", "replace"]
    path.write_text('{"kind": "new"}\n')  # replaced by a shorter one
    assert tail.read() == [{"kind": "new"}]


def test_views_of_the_recorded_cluster() -> None:
    snap = recorded()
    rows = {n.node: n for n in fleet.nodes(snap)}
    assert rows["workers-3"].spare and rows["workers-3"].healthy is False
    assert (
        rows["workers-3"].reason == "disk swap, ticket 42" and rows["workers-3"].slurm_state == "idle+drain"
    )
    assert rows["controller-1"].healthy is None and rows["controller-1"].slurm_state == ""
    newest = fleet.decisions(snap)
    assert [d.kind for d in newest] == ["release", "leave", "start"] and newest[0].job == "1"
    (job,) = fleet.jobs(snap)
    assert (job.id, job.name, job.state, job.restarts, len(job.attempts)) == (1, "rs-wrap", "RUNNING", 1, 2)
    assert job.goodput.ratio is not None and 0.9 < job.goodput.ratio < 1
