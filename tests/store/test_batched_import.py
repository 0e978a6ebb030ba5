"""Small files are read several to a DuckDB statement; each keeps its own rank, node and events.

A batch falls back to one chunk at a time when one of its files needs the exact path (an unknown
top-level field, a value the fast reader would take leniently), and what is stored does not
depend on which files happened to share a batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.store import importer
from tests.tracejson import load, normalized_events


def _rank_file(folder: Path, rank: int, events: list[dict[str, object]]) -> Path:
    path = folder / f"rank{rank}.json"
    header = {"distributedInfo": {"rank": rank}, "hostname": f"node-{rank % 2}"}
    path.write_text(json.dumps({**header, "traceEvents": events}))
    return path


def _events(rank: int) -> list[dict[str, object]]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{rank}.{i}",
            "pid": rank,
            "tid": 1,
            "ts": 10 * i + 0.5,
            "dur": 3,
            "args": {"External id": i, "note": f"r{rank}"},
        }
        for i in range(5)
    ]


@pytest.mark.parametrize("batch_bytes", [1, 1 << 20])  # one file a batch, or all in one
def test_small_files_in_one_batch_keep_their_ranks_and_events(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int
) -> None:
    monkeypatch.setattr(importer, "BATCH_BYTES", batch_bytes)
    sources = [_events(r) for r in range(5)]
    sources[2][0]["args"] = {"big": 12345678901234567890}  # read leniently by DuckDB: alone, exact
    sources[3][2]["flow_hint"] = {"kept": True}  # unknown top-level field: its batch falls back
    files = [_rank_file(tmp_path, r, events) for r, events in enumerate(sources)]

    report = store.import_traces(files, "batched")

    expected = [(r, f"node-{r % 2}", 5) for r in range(5)]
    assert sorted((m.rank, m.node, m.events) for m in report.ranks) == expected
    con = store.profile("batched").connect()
    assert (
        con.sql("SELECT rank, node, count(*) FROM events GROUP BY ALL ORDER BY rank").fetchall() == expected
    )
    extra = con.sql("SELECT extra FROM events WHERE name = 'op3.2'").fetchall()
    assert extra == [('{"flow_hint":{"kept":true}}',)]
    written = store.export_chrome("batched", tmp_path / "out.json")
    for rank, source in enumerate(files):
        out = next(p for p in written if f".rank{rank}." in p.name)
        assert normalized_events(load(out)) == normalized_events(load(source))
