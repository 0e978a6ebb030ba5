"""The row tree's labels on a generated trace: global instants (no thread) get a row that says so."""

from __future__ import annotations

import json
from pathlib import Path

from hyperscope import Store
from hyperscope import timeline as tl


def _walk(row: dict[str, object]) -> list[dict[str, object]]:
    kids = row.get("children") or []
    assert isinstance(kids, list)
    return [row, *(r for k in kids for r in _walk(k))]


def test_global_instants_row_is_named_not_thread_minus_one(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": 500,
        },
        {
            "ph": "i",
            "s": "g",
            "name": "Iteration Start: PyTorch Profiler",
            "pid": "Spans",
            "tid": "x",
            "ts": 1000,
        },
    ]
    trace = tmp_path / "rank0.json"
    header = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}
    trace.write_text(json.dumps(header))
    with Store(tmp_path / "home") as store:
        store.import_traces([trace], "globals")
        profile = store.profile("globals")
        root = tl.tree(tl.load(profile), profile.connect(), "globals").to_json()
    labels = {str(r["id"]): str(r["label"]) for r in _walk(root)}
    assert labels["host/0/-1/-1"] == "host · global instants (no thread)"
    assert labels["host/0/1/1"] == "host · thread 1"
    assert "thread -1" not in " ".join(labels.values())
