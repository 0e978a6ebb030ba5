"""Bad input must stop an import with a message that names the file, the event and the field, and
must leave nothing behind: no job, no profile directory, no staging directory, and a profile imported
earlier still reads the same.

Several cases were bugs found by these tests (reader-thread deadlock, values accepted by the fast
path alone, integers beyond 64 bits, ...); they stay as regression tests.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

from hyperscope import HyperscopeError, Store, StoreError, TraceFormatError, UsageError
from hyperscope.store import _staged, _tracefile
from hyperscope.store.importer import Importer
from hyperscope.store.synth import SynthSpec, write_rank

# -- building traces ----------------------------------------------------------------------------------

DROP = object()  #: as a field value in :func:`ev`: leave the field out


def ev(i: int, **fields: object) -> str:
    """A valid complete ('X') event as one compact JSON line; ``fields`` override or (DROP) remove."""
    event: dict[str, object] = {
        "ph": "X",
        "cat": "kernel",
        "name": f"op{i}",
        "pid": 0,
        "tid": 7,
        "ts": 1_000 + 10 * i + 0.5,
        "dur": 2.25,
        "args": {"stream": 7, "correlation": i},
    }
    for key, value in fields.items():
        if value is DROP:
            event.pop(key, None)
        else:
            event[key] = value
    return orjson.dumps(event).decode()


def events(n: int = 6) -> list[str]:
    return [ev(i) for i in range(n)]


def with_event(index: int, text: str, n: int = 6) -> list[str]:
    found = events(n)
    found[index] = text
    return found


HEADER: dict[str, object] = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
}


def kineto(
    event_texts: Sequence[str], *, header: dict[str, object] | None = None, trailer: bool = True
) -> bytes:
    """A file laid out the way torch.profiler writes it: header keys, traceEvents, trailer keys."""
    head = HEADER if header is None else header
    start = orjson.dumps(head, option=orjson.OPT_INDENT_2)[:-2] + b",\n" if head else b"{\n"
    body = ",\n  ".join(event_texts).encode()
    end = b'\n  ],\n  "traceName": "t.json",\n  "displayTimeUnit": "ms"\n}\n' if trailer else b"\n  ]\n}\n"
    return start + b'  "traceEvents": [\n  ' + body + end


# -- the store, and the check that nothing was stored -------------------------------------------------


@dataclass
class Baseline:
    """A store that already holds one good profile, and what it looked like before the bad import."""

    store: Store
    home: Path
    jobs: list[tuple[int, str, list[str]]]
    profile_dirs: list[str]
    events: int

    def snapshot(self) -> list[tuple[int, str, list[str]]]:
        return [(j.id, j.name, [p.id for p in j.profiles]) for j in self.store.jobs()]

    def dirs(self) -> list[str]:
        return sorted(p.name for p in (self.home / "profiles").iterdir())

    def count(self, job: str = "baseline") -> int:
        con = self.store.profile(job).connect()
        try:
            rows = con.execute("select count(*) from events").fetchall()
        finally:
            con.close()
        return int(rows[0][0])

    def assert_nothing_stored(self) -> None:
        assert self.snapshot() == self.jobs, "the catalog changed"
        leftovers = [d for d in self.dirs() if d.startswith(".staging-")]
        assert not leftovers, f"staging directories left behind: {leftovers}"
        assert self.dirs() == self.profile_dirs, "a profile directory was added or removed"
        assert self.count() == self.events, "the earlier profile no longer reads the same"
        with Store(self.home) as fresh:  # what another process sees
            assert [(j.id, j.name) for j in fresh.jobs()] == [(j[0], j[1]) for j in self.jobs]


@pytest.fixture
def base(tmp_path: Path) -> Baseline:
    home = tmp_path / "home"
    store = Store(home)
    good = tmp_path / "good" / "rank0.json"
    good.parent.mkdir()
    n = write_rank(good, SynthSpec(ranks=1, steps=2, ops_per_step=5), 0)
    store.import_traces([good], "baseline")
    b = Baseline(store, home, [], [], 0)
    b.jobs, b.profile_dirs, b.events = b.snapshot(), b.dirs(), b.count()
    assert b.events == n and len(b.profile_dirs) == 1
    return b


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


def import_fails(
    base: Baseline, paths: Sequence[Path], kind: type[HyperscopeError] = TraceFormatError, **kw: Any
) -> HyperscopeError:
    with pytest.raises(kind) as info:
        base.store.import_traces(list(paths), "bad-job", **kw)
    base.assert_nothing_stored()
    return info.value


def check_message(
    exc: HyperscopeError,
    path: Path,
    *,
    index: int | None = None,
    field: str | None = None,
    expected: str | None = None,
    words: Sequence[str] = (),
) -> None:
    text = str(exc)
    assert str(path) in text, text
    if isinstance(exc, TraceFormatError):
        assert exc.path == str(path)
        assert exc.event_index == index, text
        assert exc.field == field, text
        if expected is not None:
            assert exc.expected is not None and expected in exc.expected, text
    if index is not None:
        assert f"traceEvents[{index}]" in text
    if field is not None:
        assert f"field '{field}'" in text
    if expected is not None:
        assert f"(expected {expected}" in text
    rest = text.replace(str(path), "<path>")  # test names in tmp_path must not satisfy the checks below
    for word in words:
        assert word in rest, f"{word!r} not in {text!r}"


# -- one bad event ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    content: bytes
    index: int | None = None
    field: str | None = None
    expected: str | None = None
    words: tuple[str, ...] = ()


_FULL = kineto(events())
_NO_TRAILER = kineto(events(), trailer=False)
_EV3 = _FULL.index(ev(3).encode())

BAD_FILES: dict[str, Case] = {
    # truncated files
    "truncated-in-event": Case(_FULL[: _EV3 + 40], index=3),
    "truncated-in-event-after-comma": Case(_FULL[: _EV3 + len(ev(3)) // 2], index=3),
    "truncated-after-comma": Case(_FULL[:_EV3], index=3, words=("truncated",)),
    "truncated-after-comma-no-newline": Case(_FULL[:_EV3].rstrip(), index=3, words=("truncated",)),
    "truncated-before-closing-brace": Case(_FULL[: _FULL.rindex(b"}")], words=("after traceEvents",)),
    "truncated-before-closing-brace-no-trailer": Case(
        _NO_TRAILER[: _NO_TRAILER.rindex(b"}")], words=("after traceEvents", "truncated")
    ),
    "truncated-after-event-list": Case(_FULL[: _FULL.index(b"]") + 1], words=("truncated",)),
    # invalid JSON inside an event
    "invalid-json-double-comma": Case(
        kineto(with_event(2, '{"ph":"X","name":"op2",,"ts":1,"dur":1}')), index=2, words=("invalid JSON",)
    ),
    "invalid-json-missing-comma": Case(
        kineto(with_event(2, '{"ph":"X" "name":"op2","ts":1,"dur":1}')), index=2, words=("invalid JSON",)
    ),
    "invalid-json-in-last-event": Case(
        kineto(with_event(5, '{"ph":"X","name":op5,"ts":1,"dur":1}')), index=5, words=("invalid JSON",)
    ),
    "invalid-json-control-character": Case(
        kineto(with_event(2, '{"ph":"X","name":"op\x012","ts":1,"dur":1}')), index=2, words=("invalid JSON",)
    ),
    "not-utf8": Case(kineto(events()).replace(b'"op2"', b'"op\xff\xfe"'), index=2, words=("UTF-8",)),
    "event-is-a-list": Case(kineto(with_event(2, "[1, 2]")), index=2, expected="an object"),
    "missing-comma-between-events": Case(
        kineto(events()).replace(b",\n  " + ev(3).encode(), b"\n  " + ev(3).encode()),
        index=2,
        expected="','",
    ),
    # wrong types
    "ts-is-a-string": Case(
        kineto(with_event(2, ev(2, ts="abc"))), index=2, field="ts", expected="a number", words=("'abc'",)
    ),
    "ts-is-true": Case(kineto(with_event(2, ev(2, ts=True))), index=2, field="ts", expected="a number"),
    "ts-is-nan": Case(
        kineto(with_event(2, ev(2).replace('"ts":1020.5', '"ts":NaN'))),
        index=2,
        field="ts",
        expected="a number",
    ),
    "dur-is-a-list": Case(
        kineto(with_event(2, ev(2, dur=[1, 2]))), index=2, field="dur", expected="a number"
    ),
    "dur-is-an-object": Case(
        kineto(with_event(2, ev(2, dur={"us": 1}))), index=2, field="dur", expected="a number"
    ),
    "name-is-a-number": Case(
        kineto(with_event(2, ev(2, name=42))), index=2, field="name", expected="a string"
    ),
    "cat-is-a-list": Case(kineto(with_event(2, ev(2, cat=["k"]))), index=2, field="cat", expected="a string"),
    "ph-is-a-number": Case(kineto(with_event(2, ev(2, ph=1))), index=2, field="ph", expected="a string"),
    "pid-is-an-object": Case(
        kineto(with_event(2, ev(2, pid={"a": 1}))), index=2, field="pid", expected="an integer or a string"
    ),
    "pid-is-a-fraction": Case(
        kineto(with_event(2, ev(2, pid=1.5))), index=2, field="pid", expected="an integer or a string"
    ),
    "tid-is-true": Case(
        kineto(with_event(2, ev(2, tid=True))), index=2, field="tid", expected="an integer or a string"
    ),
    "args-is-a-list": Case(
        kineto(with_event(2, ev(2, args=[1, 2]))), index=2, field="args", expected="an object"
    ),
    # missing required fields
    "ph-missing": Case(
        kineto(with_event(2, ev(2, ph=DROP))), index=2, field="ph", expected="a Chrome-trace phase"
    ),
    "ts-missing-on-X": Case(kineto(with_event(2, ev(2, ts=DROP))), index=2, field="ts", expected="a number"),
    "ts-null-on-instant": Case(
        kineto(with_event(2, ev(2, ph="i", ts=None, dur=DROP))), index=2, field="ts", expected="a number"
    ),
    "dur-missing-on-X": Case(
        kineto(with_event(2, ev(2, dur=DROP))), index=2, field="dur", expected="a number"
    ),
    "name-missing-on-X": Case(
        kineto(with_event(2, ev(2, name=DROP))), index=2, field="name", expected="a string"
    ),
    # unknown phase
    "unknown-phase": Case(
        kineto(with_event(2, ev(2, ph="Q"))), index=2, field="ph", expected="one of", words=("'Q'",)
    ),
    # empty and non-trace files
    "empty-file": Case(b"", expected="a JSON trace", words=("empty",)),
    "only-whitespace": Case(b" \n\t\r\n   \n", expected="a JSON trace", words=("empty",)),
    "top-level-number": Case(b"42\n", expected="a JSON object or array"),
    "top-level-string": Case(b'"traceEvents"', expected="a JSON object or array"),
    "top-level-null": Case(b"null", expected="a JSON object or array"),
    "top-level-true": Case(b"  true  ", expected="a JSON object or array"),
    "trace-events-is-an-object": Case(b'{"traceEvents": {"a": 1}}', field="traceEvents", expected="a list"),
    "trace-events-is-a-string": Case(b'{"traceEvents": "[]"}', field="traceEvents", expected="a list"),
    "trace-events-is-null": Case(
        b'{"schemaVersion": 1, "traceEvents": null}', field="traceEvents", expected="a list"
    ),
    "trace-events-missing": Case(
        b'{"schemaVersion": 1, "events": []}', field="traceEvents", expected="a list"
    ),
    "invalid-json-in-header": Case(
        b'{"schemaVersion": [1,, "traceEvents": []}', words=("before traceEvents",)
    ),
    "garbage-after-document": Case(_FULL + b"garbage", words=("after traceEvents",)),
    "garbage-after-array": Case(
        b"[" + ",".join(events()).encode() + b"] xx", words=("after the event list",)
    ),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_file(name: str, base: Baseline, tmp_path: Path) -> None:
    case = BAD_FILES[name]
    path = write(tmp_path, "bad.json", case.content)
    exc = import_fails(base, [path])
    check_message(exc, path, index=case.index, field=case.field, expected=case.expected, words=case.words)
    if case.index is None:
        assert "traceEvents[" not in str(exc)


@pytest.mark.parametrize("cut", range(1, len(ev(3)), 3))
def test_truncated_anywhere_in_an_event(cut: int, base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "cut.json", _FULL[: _EV3 + cut])
    exc = import_fails(base, [path])
    check_message(exc, path, index=3)
    assert isinstance(exc, TraceFormatError)
    assert "truncated" in exc.problem or "invalid JSON" in exc.problem


def test_truncated_inside_a_string_says_truncated(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "cut.json", _FULL[: _EV3 + ev(3).index('"op3"') + 2])
    exc = import_fails(base, [path])
    check_message(exc, path, index=3, words=("truncated",))


# Files of several chunks are imported in a child process with small chunks: the importer's reader
# thread can deadlock after an error (see test_error_in_the_next_to_last_chunk_does_not_hang), and a
# deadlock inside pytest would stop the whole run instead of failing one test.

_CHILD = """
import faulthandler, gc, json, sys
from pathlib import Path
from hyperscope import HyperscopeError, Store
from hyperscope.store import _tracefile

faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)  # a hang ends the child, with stacks
_tracefile.READ_BYTES, _tracefile.CHUNK_BYTES = 1024, 4096
with Store(sys.argv[2]) as store:
    try:
        store.import_traces([Path(p) for p in sys.argv[3:]], "bad-job")
        print(json.dumps({"type": None}), flush=True)
    except HyperscopeError as exc:
        info = {"type": type(exc).__name__, "message": str(exc)}
        info.update(index=getattr(exc, "event_index", None), field=getattr(exc, "field", None))
        print(json.dumps(info), flush=True)
    gc.collect()
print("returned", flush=True)
"""

CHILD_SECONDS = 8.0
SMALL_CHUNK_EVENTS = 300  # with 4096-byte chunks: about ten chunks


def import_in_child(base: Baseline, paths: Sequence[Path]) -> dict[str, Any]:
    """Import with small chunks in a child process; fail (not hang) when the child does not return."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(CHILD_SECONDS), str(base.home), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert lines and lines[-1] == "returned" and proc.returncode == 0, (
        f"the import did not return within {CHILD_SECONDS} s (deadlock?): rc={proc.returncode}\n"
        f"stdout: {proc.stdout}\nstderr: {proc.stderr[-3000:]}"
    )
    result: dict[str, Any] = json.loads(lines[0])
    return result


def small_chunk_trace(tmp_path: Path, name: str, bad_index: int | None) -> Path:
    n = SMALL_CHUNK_EVENTS
    evs = with_event(bad_index, ev(bad_index, dur="abc"), n=n) if bad_index is not None else events(n)
    content = kineto(evs)
    assert len(content) > 8 * 4096
    return write(tmp_path, name, content)


def test_bad_event_index_counts_across_chunks(base: Baseline, tmp_path: Path) -> None:
    """Small chunks: the index of the bad event is counted over the whole file, not the chunk."""
    path = small_chunk_trace(tmp_path, "big.json", 100)
    result = import_in_child(base, [path])
    assert result["type"] == "TraceFormatError", result
    assert result["index"] == 100 and result["field"] == "dur", result
    assert str(path) in result["message"] and "traceEvents[100]" in result["message"]
    base.assert_nothing_stored()


def test_truncation_index_counts_across_chunks(base: Baseline, tmp_path: Path) -> None:
    content = kineto(events(SMALL_CHUNK_EVENTS))
    path = write(tmp_path, "big.json", content[: content.index(ev(270).encode()) + 30])
    result = import_in_child(base, [path])
    assert result["type"] == "TraceFormatError" and result["index"] == 270, result
    assert str(path) in result["message"]
    base.assert_nothing_stored()


def test_good_file_of_many_chunks_imports(base: Baseline, tmp_path: Path) -> None:
    path = small_chunk_trace(tmp_path, "big.json", None)
    result = import_in_child(base, [path])
    assert result["type"] is None, result
    assert base.count("bad-job") == SMALL_CHUNK_EVENTS


def test_error_in_the_next_to_last_chunk_does_not_hang(base: Baseline, tmp_path: Path) -> None:
    path = small_chunk_trace(tmp_path, "big.json", SMALL_CHUNK_EVENTS - 50)
    result = import_in_child(base, [path])
    assert result["type"] == "TraceFormatError" and result["index"] == SMALL_CHUNK_EVENTS - 50, result
    base.assert_nothing_stored()


def test_rank_conflict_after_the_first_chunk_does_not_hang(base: Baseline, tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", kineto(events(5)))
    b = write(tmp_path, "b.json", kineto(events(60)))  # two chunks; the same rank 0 as a.json
    result = import_in_child(base, [a, b])
    assert result["type"] == "UsageError" and "rank 0" in result["message"], result
    base.assert_nothing_stored()


# -- gzip -----------------------------------------------------------------------------------------------


@pytest.fixture(params=["isal", "zlib"])
def inflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """ISA-L, the import's gzip; and the standard library's, where isal will not import."""
    if request.param == "zlib":
        monkeypatch.setattr(_tracefile, "_gzip", gzip)
        monkeypatch.setattr(_tracefile, "_GZIP_ERRORS", (EOFError, gzip.BadGzipFile, zlib.error))
    else:
        assert _tracefile._gzip.__name__ == "isal.igzip", "isal is a dependency: the import's gzip"
    return str(request.param)


@pytest.mark.parametrize("where", ["header", "middle", "crc-trailer", "crc-mismatch"])
def test_truncated_gzip(where: str, inflater: str, base: Baseline, tmp_path: Path) -> None:
    data = gzip.compress(kineto(events(50)))
    if where == "crc-mismatch":  # whole, but its CRC-32 (the trailer's first 4 bytes) is wrong
        data = data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]
    else:
        data = data[: {"header": 5, "middle": len(data) // 2, "crc-trailer": len(data) - 3}[where]]
    path = write(tmp_path, "bad.json.gz", data)
    exc = import_fails(base, [path])
    check_message(exc, path, words=("gzip", "truncated"))


def test_gzip_imports_with_either_inflater(inflater: str, base: Baseline, tmp_path: Path) -> None:
    """Two gzip members (``cat a.gz b.gz``) are one stream to both, as to ``zcat``."""
    text = kineto(events(300))
    cut = len(text) // 3
    path = write(tmp_path, "ok.json.gz", gzip.compress(text[:cut]) + gzip.compress(text[cut:]))
    report = base.store.import_traces([path], "gz-job")
    assert report.profile.events == 300


def test_gzip_with_a_bad_event(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "bad.json.gz", gzip.compress(kineto(with_event(4, ev(4, ts="abc")))))
    exc = import_fails(base, [path])
    check_message(exc, path, index=4, field="ts", expected="a number")


# -- paths and ranks ----------------------------------------------------------------------------------


def test_path_does_not_exist(base: Baseline, tmp_path: Path) -> None:
    path = tmp_path / "no-such-trace.json"
    exc = import_fails(base, [path])
    check_message(exc, path, words=("does not exist",))


def test_directory_without_traces(base: Baseline, tmp_path: Path) -> None:
    folder = tmp_path / "empty-dir"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a trace")
    (folder / "sub.json").mkdir()  # a directory with a trace-like name is not a trace either
    exc = import_fails(base, [folder])
    check_message(exc, folder, words=("no .json",))


def test_no_paths_at_all(base: Baseline) -> None:
    import_fails(base, [], UsageError)


def test_empty_job_name(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "ok.json", kineto(events()))
    with pytest.raises(UsageError):
        base.store.import_traces([path], "  ")
    base.assert_nothing_stored()


def test_two_files_with_the_same_rank(base: Baseline, tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", kineto(events()))
    b = write(tmp_path, "b.json", kineto(events()))  # both say distributedInfo.rank 0
    exc = import_fails(base, [a, b], UsageError)
    check_message(exc, b, words=(str(a), "rank 0"))


def test_rank_option_with_several_files(base: Baseline, tmp_path: Path) -> None:
    a = write(tmp_path, "rank0.json", kineto(events()))
    b = write(tmp_path, "rank1.json", kineto(events(), header={"schemaVersion": 1}))
    with pytest.raises(UsageError, match="--rank"):
        base.store.import_traces([a, b], "bad-job", rank=3)
    base.assert_nothing_stored()


def test_rank_unknown_with_several_files(base: Baseline, tmp_path: Path) -> None:
    a = write(tmp_path, "rank0.json", kineto(events()))
    b = write(tmp_path, "other.json", kineto(events(), header={"schemaVersion": 1}))
    exc = import_fails(base, [a, b], UsageError)
    check_message(exc, b, words=("rank",))


@pytest.mark.parametrize("bad_position", ["first", "last"])
def test_one_bad_file_among_good_ones_imports_nothing(
    bad_position: str, base: Baseline, tmp_path: Path
) -> None:
    """All or nothing: good files read before (or after) the bad one are not stored either."""
    good = [tmp_path / "in" / f"rank{r}.json" for r in range(3)]
    good[0].parent.mkdir(exist_ok=True)
    for r, p in enumerate(good):
        write_rank(p, SynthSpec(ranks=4, steps=1, ops_per_step=4), r)
    bad = write(tmp_path, "rank3.json", kineto(with_event(1, ev(1, pid={"x": 1})), header={}))
    paths = [bad, *good] if bad_position == "first" else [*good, bad]
    exc = import_fails(base, paths)
    check_message(exc, bad, index=1, field="pid", expected="an integer or a string")


def test_import_into_an_existing_job_fails_cleanly(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "bad.json", kineto(with_event(0, ev(0, ph="Q"))))
    with pytest.raises(TraceFormatError):
        base.store.import_traces([path], "baseline")
    base.assert_nothing_stored()


# -- values that only a careful reader refuses ----------------------------------------------------------
# Each was a bug found while writing these tests (a TypeError or a DuckDB error escaping, a value
# accepted or refused depending on the other events of the chunk, a silently changed string).

_BIG = "99999999999999999999999"
_UNKNOWN_FIELD = ev(6, myfield=1)  # sends its chunk through the exact parser

BAD_VALUES: dict[str, Case] = {
    "pid-beyond-64-bit": Case(
        kineto(with_event(2, ev(2).replace('"pid":0', f'"pid":{_BIG}'))), index=2, field="pid"
    ),
    "ts-integer-beyond-64-bit": Case(
        kineto(with_event(2, ev(2).replace('"ts":1020.5', f'"ts":{_BIG}'))), index=2, field="ts"
    ),
    "big-int-in-args": Case(
        kineto(with_event(2, ev(2, args={"bytes": 1}).replace('"bytes":1', f'"bytes":{_BIG}'))),
        index=2,
        field="args.bytes",
    ),
    "big-int-in-args-with-an-unknown-field-nearby": Case(
        kineto(
            [*with_event(2, ev(2, args={"bytes": 1}).replace('"bytes":1', f'"bytes":{_BIG}')), _UNKNOWN_FIELD]
        ),
        index=2,
        field="args.bytes",
    ),
    "lone-surrogate-escape": Case(kineto(with_event(2, ev(2).replace('"op2"', '"op\\ud8002"'))), index=2),
    "ts-overflows-64-bit-nanoseconds": Case(
        kineto(with_event(2, ev(2).replace('"ts":1020.5', '"ts":100000000000000000000'))), index=2, field="ts"
    ),
    "ts-one-digit-too-many-in-an-epoch-time": Case(
        kineto(with_event(2, ev(2, ts=17000000000000000.5))), index=2, field="ts"
    ),
    "dur-overflows-64-bit-nanoseconds": Case(
        kineto(with_event(2, ev(2).replace('"dur":2.25', '"dur":1e17'))), index=2, field="dur"
    ),
    "ts-beyond-decimal-38": Case(
        kineto(with_event(2, ev(2).replace('"ts":1020.5', '"ts":1e40'))), index=2, field="ts"
    ),
    "ts-is-a-numeric-string": Case(
        kineto(with_event(2, ev(2, ts="1020.5"))), index=2, field="ts", expected="a number"
    ),
    "ts-is-a-numeric-string-with-an-unknown-field-nearby": Case(
        kineto([*with_event(2, ev(2, ts="1020.5")), _UNKNOWN_FIELD]), index=2, field="ts", expected="a number"
    ),
    "dur-is-a-numeric-string": Case(
        kineto(with_event(2, ev(2, dur="2"))), index=2, field="dur", expected="a number"
    ),
    "raw-newline-in-a-string": Case(
        kineto(with_event(2, ev(2).replace('"op2"', '"op\n2"'))), index=2, words=("invalid JSON",)
    ),
    "raw-tab-in-a-string": Case(
        kineto(with_event(2, ev(2).replace('"op2"', '"op\t2"'))), index=2, words=("invalid JSON",)
    ),
}


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_bad_value(name: str, base: Baseline, tmp_path: Path) -> None:
    case = BAD_VALUES[name]
    path = write(tmp_path, "bad.json", case.content)
    exc = import_fails(base, [path])
    check_message(exc, path, index=case.index, field=case.field, expected=case.expected, words=case.words)


def _with_args_value(value: str) -> bytes:
    return kineto(with_event(2, ev(2, args={"a": 1}).replace('"a":1', f'"a":{value}')))


#: Invalid JSON or non-JSON numbers that the exact parser refuses; the fast path must refuse them too.
LENIENT: dict[str, Case] = {
    "trailing-comma-in-an-args-list": Case(_with_args_value("[1, ]"), index=2, words=("invalid JSON",)),
    "trailing-comma-in-args": Case(
        kineto(with_event(2, ev(2, args={"a": 1}).replace('"a":1}', '"a":1,}'))),
        index=2,
        words=("invalid JSON",),
    ),
    "trailing-comma-in-the-event": Case(
        kineto(with_event(2, ev(2)[:-1] + ",}")), index=2, words=("invalid JSON",)
    ),
    "nan-in-args": Case(_with_args_value("NaN"), index=2, field="args.a"),
    "infinity-in-args": Case(_with_args_value("-Infinity"), index=2, field="args.a"),
}


@pytest.mark.parametrize(
    ("name", "neighbour"),
    [
        *[(n, "alone") for n in LENIENT],  # the fast path would read this chunk
        *[(n, "next-to-an-unknown-field") for n in LENIENT],  # the exact parser reads this chunk
    ],
)
def test_fast_path_is_as_strict_as_the_exact_parser(
    name: str, neighbour: str, base: Baseline, tmp_path: Path
) -> None:
    case = LENIENT[name]
    content = case.content
    if neighbour != "alone":
        content = content.replace(b"\n  ],", b",\n  " + _UNKNOWN_FIELD.encode() + b"\n  ],", 1)
    path = write(tmp_path, "bad.json", content)
    exc = import_fails(base, [path])
    check_message(exc, path, index=case.index, field=case.field, words=case.words)


@pytest.mark.parametrize("where", ["args", "unknown-field"])
def test_number_beyond_double_range_is_refused_or_exported(
    where: str, base: Baseline, tmp_path: Path
) -> None:
    if where == "args":
        content = _with_args_value("1e999")
    else:
        content = kineto(with_event(2, ev(2, myfield=1).replace('"myfield":1', '"myfield":1e999')))
    path = write(tmp_path, "huge.json", content)
    try:
        base.store.import_traces([path], "huge")
    except TraceFormatError as exc:  # refusing it is fine, if the message says where
        check_message(exc, path, index=2, field="args.a" if where == "args" else "myfield")
        base.assert_nothing_stored()
        return
    out = tmp_path / "out" / "huge.json"
    base.store.export_chrome("huge", out)
    doc = json.loads(out.read_bytes(), parse_float=Decimal)
    (op2,) = [e for e in doc["traceEvents"] if e.get("name") == "op2"]
    value = op2["args"]["a"] if where == "args" else op2["myfield"]
    assert value == Decimal("1e999")


def test_empty_event_list(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "empty-list.json", kineto([]).replace(b"\n  \n", b"\n"))
    try:
        base.store.import_traces([path], "empty-list")
    except HyperscopeError as exc:
        assert str(path) in str(exc)
        base.assert_nothing_stored()
    else:
        assert base.count("empty-list") == 0


@pytest.mark.parametrize(
    "header",
    [b'{"traceName": "traceEvents", ', b'{"meta": {"traceEvents": 1}, '],
    ids=["in-a-string", "in-a-nested-object"],
)
def test_trace_events_text_in_the_header(header: bytes, base: Baseline, tmp_path: Path) -> None:
    path = write(
        tmp_path, "odd-header.json", header + b'"traceEvents": [' + ",".join(events()).encode() + b"]}"
    )
    base.store.import_traces([path], "odd-header")
    assert base.count("odd-header") == 6


# -- a full disk ----------------------------------------------------------------------------------------


def _enospc(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_writes(match: Callable[[Path], bool]) -> Callable[..., Any]:
    """A Path.open (which write_bytes and write_text use) that finds the disk full for some paths."""
    original = Path.open

    def open_or_fail(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+") and match(self):
            _enospc()
        return original(self, mode, *args, **kwargs)

    return open_or_fail


def _in_staging(path: Path) -> bool:
    return any(part.startswith(".staging-") for part in path.parts)


def _duckdb_disk_full(self: Importer, *_: object) -> int:
    # What DuckDB raises when it cannot write (seen with RLIMIT_FSIZE; the same on a full disk).
    raise duckdb.IOException(
        f'IO Error: Could not write file "{self.work_dir}/part-r0-00000.parquet": No space left on device'
    )


def _events_file_full(self: pq.ParquetWriter, *_: object, **__: object) -> None:
    """The disk fills at the events file, after every part was written."""
    if "events" in Path(str(self.where)).parts:
        _enospc()
    return _WRITE_TABLE(self, *_, **__)  # type: ignore[arg-type]


_WRITE_TABLE = pq.ParquetWriter.write_table


@pytest.mark.parametrize(
    "where",
    ["first-write-in-staging", "metadata", "parquet-writer", "duckdb", "spilled-parts", "merged-events"],
)
def test_disk_full(where: str, base: Baseline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "in" / "rank0.json"
    path.parent.mkdir()
    write_rank(path, SynthSpec(ranks=1, steps=2, ops_per_step=10), 0)
    if where in ("spilled-parts", "merged-events"):  # rows written out as sorted parts, then merged
        monkeypatch.setattr(_staged, "SPILL_BYTES", 1)
        monkeypatch.setattr(_staged, "RANK_SORT_BYTES", 0)
        if where == "spilled-parts":  # parts are Arrow IPC files (store/_parts.py)
            monkeypatch.setattr(pa.ipc.RecordBatchFileWriter, "write_table", _enospc)
        else:
            monkeypatch.setattr(pq.ParquetWriter, "write_table", _events_file_full)
    elif where == "first-write-in-staging":
        monkeypatch.setattr(Path, "open", _fail_writes(_in_staging))
    elif where == "metadata":
        monkeypatch.setattr(Path, "open", _fail_writes(lambda p: _in_staging(p) and p.name == "meta.json"))
    elif where == "parquet-writer":
        monkeypatch.setattr(pq.ParquetWriter, "write_table", _enospc)
    else:  # the DuckDB insert of either reader (the compiled one's columns, or SQL's rows)
        monkeypatch.setattr(Importer, "_add_chunk", _duckdb_disk_full)
        monkeypatch.setattr(Importer, "_add_columns", _duckdb_disk_full)
    exc = import_fails(base, [path], StoreError)
    assert "disk full" in str(exc) and "nothing was stored" in str(exc)
    assert str(base.home) in str(exc)
    monkeypatch.undo()
    base.store.import_traces([path], "after-disk-full")  # the store still works once there is space
    assert base.count("after-disk-full") > 0


class _CatalogFull:
    """Stands in for the catalog's sqlite connection: the profile row cannot be written."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().startswith("INSERT INTO profiles"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_disk_full_when_writing_the_catalog(base: Baseline, tmp_path: Path) -> None:
    """The profile is already in place when the catalog write fails: it must be removed again."""
    path = write(tmp_path, "ok.json", kineto(events()))
    real = base.store.catalog._db
    base.store.catalog._db = _CatalogFull(real)  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError, match="disk is full") as info:
            base.store.import_traces([path], "bad-job")
    finally:
        base.store.catalog._db = real
    assert str(base.home) in str(info.value)
    base.assert_nothing_stored()


# -- unknown fields are kept ----------------------------------------------------------------------------


def test_unknown_fields_and_header_keys_are_kept(base: Baseline, tmp_path: Path) -> None:
    header: dict[str, object] = {
        **HEADER,
        "myHeaderKey": {"nested": [1, 2.5, "x"], "flag": True},
        "myHeaderNumber": 7,
    }
    evs = events()
    evs[2] = ev(2, myfield={"a": 1})
    evs[4] = ev(4, myflag=[1, "two"], other="text")
    content = kineto(evs, header=header).replace(
        b'"displayTimeUnit"', b'"myTrailerKey": "kept", "displayTimeUnit"'
    )
    assert orjson.loads(content)["myTrailerKey"] == "kept"
    path = write(tmp_path, "unknown.json", content)
    report = base.store.import_traces([path], "unknown")
    assert report.profile.events == 6
    out = tmp_path / "out" / "export.json"
    written = base.store.export_chrome("unknown", out)
    assert written == [out]
    doc = orjson.loads(out.read_bytes())
    assert doc["myHeaderKey"] == header["myHeaderKey"]
    assert doc["myHeaderNumber"] == 7
    assert doc["myTrailerKey"] == "kept"
    assert doc["schemaVersion"] == 1
    by_name = {e["name"]: e for e in doc["traceEvents"]}
    assert len(by_name) == 6
    assert by_name["op2"]["myfield"] == {"a": 1}
    assert by_name["op4"]["myflag"] == [1, "two"] and by_name["op4"]["other"] == "text"
    assert "myfield" not in by_name["op3"]
    # and it imports again unchanged
    again = base.store.import_traces([out], "unknown-again")
    assert again.profile.events == 6


# -- through the command line -------------------------------------------------------------------------


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "HYPERSCOPE_HOME")}
    return subprocess.run(
        [sys.executable, "-m", "hyperscope", "import", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def cli_message(proc: subprocess.CompletedProcess[str], path: Path) -> str:
    """stderr with rich's line wrapping undone (see test_cli_error_is_not_wrapped), after checking
    that it names ``path``; the path is then blanked so that the test's name in it proves nothing."""
    assert "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr.replace("\n", "")
    assert str(path) in err, f"{path} not in stderr {proc.stderr!r}"
    return err.replace(str(path), "<path>")


def test_cli_bad_field(base: Baseline, tmp_path: Path) -> None:
    path = write(tmp_path, "bad.json", kineto(with_event(2, ev(2, ts="abc"))))
    proc = run_cli(path, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 1, proc.stderr
    err = cli_message(proc, path)
    for part in ("traceEvents[2]", "field 'ts'", "expected a number", "nothing was imported"):
        assert part in err, f"{part!r} not in stderr {proc.stderr!r}"
    base.assert_nothing_stored()


def test_cli_truncated_gzip(base: Baseline, tmp_path: Path) -> None:
    data = gzip.compress(kineto(events(40)))
    path = write(tmp_path, "cut.json.gz", data[: len(data) // 2])
    proc = run_cli(path, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 1, proc.stderr
    err = cli_message(proc, path)
    assert "gzip" in err and "nothing was imported" in err, proc.stderr
    base.assert_nothing_stored()


def test_cli_usage_error(base: Baseline, tmp_path: Path) -> None:
    a = write(tmp_path, "rank0.json", kineto(events()))
    b = write(tmp_path, "rank1.json", kineto(events()))
    proc = run_cli(a, b, "--rank", "1", "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 2, proc.stderr
    err = cli_message(proc, Path("--rank"))
    assert "applies to a single file" in err and "nothing was imported" in err, proc.stderr
    base.assert_nothing_stored()


def test_cli_missing_file(base: Baseline, tmp_path: Path) -> None:
    path = tmp_path / "missing.json"
    proc = run_cli(path, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 1, proc.stderr
    err = cli_message(proc, path)
    assert "does not exist" in err and "nothing was imported" in err, proc.stderr
    base.assert_nothing_stored()


def test_cli_error_is_not_wrapped(base: Baseline, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / "a-trace-file-with-a-long-name.json"
    deep.parent.mkdir()
    deep.write_bytes(kineto(with_event(2, ev(2, ts="abc"))))
    proc = run_cli(deep, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 1
    assert str(deep) in proc.stderr, proc.stderr


def test_cli_error_with_brackets_in_the_message(base: Baseline, tmp_path: Path) -> None:
    content = kineto(events()).replace(b",\n  " + ev(3).encode(), b"\n  [/bold] " + ev(3).encode())
    path = write(tmp_path, "brackets.json", content)
    proc = run_cli(path, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "nothing was imported" in proc.stderr, proc.stderr
    base.assert_nothing_stored()


def test_cli_leaves_no_staging_after_bad_directory(base: Baseline, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    write_rank(folder / "rank0.json", SynthSpec(ranks=2, steps=1, ops_per_step=3), 0)
    shutil.copy(folder / "rank0.json", folder / "rank0-copy.json")  # two files claim rank 0
    proc = run_cli(folder, "--job", "bad-job", "--home", base.home)
    assert proc.returncode == 2, proc.stderr
    err = cli_message(proc, folder / "rank0.json")
    assert "rank 0" in err and "nothing was imported" in err, proc.stderr
    base.assert_nothing_stored()
