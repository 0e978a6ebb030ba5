"""Any valid JSON with a trace's shape imports, whatever its whitespace; what cannot be read is
refused naming the file (and the event), never with a traceback or an internal path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.errors import TraceFormatError
from hyperscope.store import _tracefile
from hyperscope.store.synth import SynthSpec, write_rank
from tests.tracejson import load, normalized_events


def _trace(tmp_path: Path, steps: int = 3) -> dict[str, Any]:
    source = tmp_path / "source.json"
    write_rank(source, SynthSpec(ranks=1, steps=steps, ops_per_step=12), 0)
    return load(source)


def _numbers(text: str) -> str:
    """json.dumps writes the loader's Decimal timestamps as strings: numbers again."""
    return re.sub(r'"(ts|dur)": ?"(-?[0-9.]+)"', r'"\1": \2', text)


def _round_trip(tmp_path: Path, path: Path) -> None:
    with Store(tmp_path / "home") as store:
        report = store.import_traces([path], "shapes")
        exported = store.export_chrome("shapes", tmp_path / "back.json")
    original = load(path)
    assert report.files[0].events == len(original["traceEvents"])
    assert normalized_events(load(exported[0])) == normalized_events(original)


@pytest.mark.usefixtures("both_readers")  # the compiled reader and DuckDB's SQL alone
@pytest.mark.parametrize("chunk_bytes", [3_000, 16 << 20])
def test_events_separated_by_different_whitespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    trace = _trace(tmp_path)
    seps = [",\n  ", ",", " , ", ",\n", ",\t\r\n\n"]
    body = "".join(
        (seps[i % len(seps)] if i else "") + json.dumps(e, default=str)
        for i, e in enumerate(trace["traceEvents"])
    )
    path = tmp_path / "mixed.json"
    path.write_text(_numbers('{"schemaVersion": 1, "traceEvents": [\n  ' + body + '\n], "traceName": "x"}'))
    monkeypatch.setattr(_tracefile, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(_tracefile, "READ_BYTES", min(chunk_bytes, 1 << 20))
    _round_trip(tmp_path, path)


@pytest.mark.usefixtures("both_readers")  # the compiled reader and DuckDB's SQL alone
@pytest.mark.parametrize("chunk_bytes", [2_000, 16 << 20])
def test_indent_0_with_lists_of_objects_in_args(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    """``json.dumps(trace, indent=0)``: every '},\\n{' of a list in args looks like a separator."""
    trace = _trace(tmp_path)
    for i, event in enumerate(trace["traceEvents"]):
        if event.get("ph") == "X":
            event.setdefault("args", {})["inputs"] = [{"shape": [i, 2]}, {"shape": [3]}, {"k": "},\n{"}]
    trace["trailer"] = [{"a": 1}, {"b": 2}]
    path = tmp_path / "indent0.json"
    path.write_text(_numbers(json.dumps(trace, default=str, indent=0)))
    monkeypatch.setattr(_tracefile, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(_tracefile, "READ_BYTES", min(chunk_bytes, 1 << 20))
    _round_trip(tmp_path, path)


@pytest.mark.parametrize("where", ["first", "middle", "last", "an array event"])
def test_args_nested_too_deep_name_the_file(tmp_path: Path, where: str) -> None:
    trace = _trace(tmp_path, steps=1)
    events = trace["traceEvents"]
    deep = "[" * 1500 + "]" * 1500
    texts = [json.dumps(e, default=str) for e in events]
    at = {"first": 0, "middle": len(texts) // 2, "last": len(texts) - 1, "an array event": 1}[where]
    if where == "an array event":
        texts[at] = deep
    else:
        texts[at] = texts[at][:-1] + ', "deep": {"x": ' + deep + "}}"
    path = tmp_path / "deep.json"
    path.write_text(_numbers('{"traceEvents": [\n  ' + ",\n  ".join(texts) + "\n]}"))
    with Store(tmp_path / "home") as store, pytest.raises(TraceFormatError) as caught:
        store.import_traces([path], "deep")
    assert str(path) in str(caught.value) and "deeper" in str(caught.value)
    assert caught.value.event_index == at
    with Store(tmp_path / "home") as store:
        assert store.jobs() == []


def test_one_string_over_16_mb_is_refused_naming_the_event_and_the_limit(tmp_path: Path) -> None:
    for big in (7 << 20, 17 << 20):
        trace = _trace(tmp_path, steps=1)
        trace["traceEvents"][3].setdefault("args", {})["big"] = "x" * big
        path = tmp_path / "big.json"
        path.write_text(_numbers(json.dumps(trace, default=str)))
        with Store(tmp_path / f"home{big}") as store:
            if big < _tracefile.EVENT_LIMIT:
                store.import_traces([path], "big")
                con = store.profile("big").connect()
                assert con.sql("SELECT max(length(args)) FROM events").fetchall()[0][0] > big
                continue
            with pytest.raises(TraceFormatError) as caught:
                store.import_traces([path], "big")
            message = str(caught.value)
            assert str(path) in message and "larger than 8 MB" in message and ".staging" not in message
            assert caught.value.event_index == 3 and store.jobs() == []


def test_an_event_over_the_limit_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tracefile, "EVENT_LIMIT", 1 << 20)
    monkeypatch.setattr(_tracefile, "CHUNK_BYTES", 100_000)
    monkeypatch.setattr(_tracefile, "READ_BYTES", 50_000)
    for at in (3, -1):  # in a chunk, and the last event
        trace = _trace(tmp_path, steps=2)
        trace["traceEvents"][at].setdefault("args", {})["big"] = "y" * (2 << 20)
        path = tmp_path / "big.json"
        path.write_text(_numbers(json.dumps(trace, default=str, indent=1)))
        with Store(tmp_path / "home") as store, pytest.raises(TraceFormatError) as caught:
            store.import_traces([path], "big")
        message = str(caught.value)
        assert str(path) in message and "larger than 1 MB" in message and ".staging" not in message
        assert caught.value.event_index == at % len(trace["traceEvents"])


def test_leading_whitespace_costs_one_pass(tmp_path: Path) -> None:
    """Whitespace before the document, before the first event and after the last one is dropped as
    it is read: 64 MB of it imports (it took 5.7 s, growing with its square, before)."""
    trace = _trace(tmp_path, steps=1)
    text = _numbers(json.dumps(trace, default=str))
    pad = " \n\t" * ((22 << 20) // 3)
    body = text.replace('"traceEvents": [', '"traceEvents":' + pad + "[" + pad, 1)
    path = tmp_path / "spaces.json"
    path.write_bytes(pad.encode() + body.encode() + pad.encode())
    _round_trip(tmp_path, path)


def test_whitespace_is_dropped_block_by_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Skipping whitespace never joins blocks: what is held stays one block, whatever it skips."""
    monkeypatch.setattr(_tracefile, "READ_BYTES", 1000)
    path = tmp_path / "ws.json"
    path.write_bytes(b" " * 200_000 + b"{}")
    held: list[int] = []
    original = _tracefile._Blocks.read

    def read(self: _tracefile._Blocks, size: int = 1000) -> bytes:
        data = original(self, size)
        held.append(len(data))
        return data

    monkeypatch.setattr(_tracefile._Blocks, "read", read)
    with path.open("rb") as fh:
        blocks = _tracefile._Blocks(path, fh, fh, None)
        assert blocks.skip(b" ") == b"{}"
    assert len(held) == 201 and max(held) == 1000
