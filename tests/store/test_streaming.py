"""Large files are read chunk by chunk; the result does not depend on where chunks are cut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.store import _tracefile
from hyperscope.store.synth import SynthSpec, write_rank
from tests.tracejson import load, normalized_events


def _events(store: Store, job: str) -> list[tuple[object, ...]]:
    con = store.profile(job).connect()
    return con.sql("SELECT * EXCLUDE (args), json(args)::VARCHAR FROM events ORDER BY ALL").fetchall()


@pytest.mark.parametrize("chunk_bytes", [4096, 65536])
def test_small_chunks_give_the_same_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    trace = tmp_path / "rank0.json"
    write_rank(trace, SynthSpec(ranks=1, steps=4, ops_per_step=30), 0)
    with Store(tmp_path / "a") as whole:
        whole.import_traces([trace], "t")
        expected = _events(whole, "t")
    monkeypatch.setattr(_tracefile, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(_tracefile, "READ_BYTES", 1000)
    with Store(tmp_path / "b") as chunked:
        report = chunked.import_traces([trace], "t")
        assert _events(chunked, "t") == expected
        assert report.files[0].events == len(expected)


@pytest.mark.parametrize("layout", ["compact", "one-per-line", "array"])
def test_other_json_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """Files not written by Kineto: compact JSON, nested objects in args, a bare event array."""
    source = tmp_path / "rank0.json"
    write_rank(source, SynthSpec(ranks=1, steps=2, ops_per_step=10), 0)
    trace = load(source)
    for i, event in enumerate(trace["traceEvents"]):
        if event.get("ph") == "X":
            event.setdefault("args", {})["nested"] = [{"a": i}, {"b": [1, {"c": "},{"}]}]
    out = tmp_path / "other.json"
    events = trace["traceEvents"]
    if layout == "compact":
        out.write_text(json.dumps(trace, default=str, separators=(",", ":")))
    elif layout == "one-per-line":
        body = ",\n".join(json.dumps(e, default=str) for e in events)
        out.write_text('{"traceEvents": [\n' + body + "\n]}")
    else:
        out.write_text(json.dumps(events, default=str))
    # json.dumps wrote Decimal timestamps as strings: make them numbers again
    out.write_text(re.sub(r'"(ts|dur)": ?"(-?[0-9.]+)"', r'"\1": \2', out.read_text()))
    monkeypatch.setattr(_tracefile, "CHUNK_BYTES", 20_000)
    monkeypatch.setattr(_tracefile, "READ_BYTES", 7_000)
    with Store(tmp_path / "h") as store:
        store.import_traces([out], "other")
        exported = store.export_chrome("other", tmp_path / "back.json")
    assert normalized_events(load(exported[0])) == normalized_events(load(out))


@pytest.mark.parametrize("event_bytes", [60, 20_000, 300_000])
@pytest.mark.parametrize("sep", [b",", b", \n  "])
def test_the_last_cut_candidates_are_those_of_the_whole_tail(event_bytes: int, sep: bytes) -> None:
    """Looked for in the last 64 KB first, then in the last MB: the same 4 candidates either way,
    whether the 64 KB hold hundreds of events, fewer than 4, or none."""
    event = b'{"ph": "X", "name": "' + b"n" * event_bytes + b'", "args": {"a": {"b": 1}}}'
    for events in (1, 3, 5, 400):
        pending = sep.join([event] * events)[: 2 << 20]
        start = max(0, len(pending) - _tracefile._TAIL)
        whole = [m.start() for m in list(_tracefile._BOUNDARY.finditer(pending, start))[-4:]]
        assert [m.start() for m in _tracefile._last_boundaries(pending)] == whole, (event_bytes, events)
