"""The compiled reader (``store/_creader``) gives exactly the rows of DuckDB's SQL transform.

Each case is one chunk read both ways and compared row for row (every column, its type and its
text: ``args`` byte for byte, as DuckDB writes it). Chunks the reader may not answer for must come
back as ``None`` so that the DuckDB path reads them (and names what is wrong).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from hyperscope import Store
from hyperscope.store import _arrow_rows, _creader, _sql
from hyperscope.store._tracefile import TraceFile
from hyperscope.store._validate import fast_path_safe
from hyperscope.store.synth import SynthSpec, write_job
from tests.conftest import SHARED_SKIP, SHARED_TRACES, TRACE_SETS

pytestmark = pytest.mark.skipif(
    _creader._library() is None, reason="no C compiler: the compiled reader cannot be built here"
)


def _sql_rows(tmp: Path, text: bytes) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    path = tmp / "chunk.json"
    path.write_bytes(b"[" + text + b"]")
    con.execute(_sql.read_raw(str(path), len(text)))
    assert con.execute(_sql.invalid_rows()).fetchone() == (0,)
    assert con.execute(_sql.unknown_keys(str(path), len(text))).fetchone() == (0,)
    return con.execute(_sql.rows(3, "node-a")).fetchall()


def _c_rows(text: bytes, count: int) -> list[tuple[object, ...]] | None:
    table = _creader.read_columns(text, count)
    if table is None:
        return None
    con = duckdb.connect()  # Arrow's rows, as DuckDB gives them back (the same Python values)
    con.register("cols", _arrow_rows.from_reader_columns(table, rank=3, node="node-a"))
    return con.execute("SELECT * FROM cols").fetchall()


def _same(tmp: Path, text: bytes, count: int) -> None:
    got = _c_rows(text, count)
    assert got is not None, "the compiled reader gave back a chunk it should read"
    want = _sql_rows(tmp, text)
    assert len(got) == len(want) == count
    for a, b in zip(got, want, strict=True):
        assert repr(a) == repr(b)


def _chunk(*events: str, sep: str = ",") -> tuple[bytes, int]:
    return sep.join(events).encode(), len(events)


EVENTS = [
    # typed args of every type, and keys left in args
    '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1700000000000000.123,"dur":4.5,'
    '"args":{"External id":12,"device":0,"stream":7,"grid":[1,2,3],"block":[],"correlation":99,'
    '"memory bandwidth (GB/s)":1.25,"blocks per SM":0.5,"Collective name":"allreduce","dtype":"Float",'
    '"warps per SM":3,"queued":0,"other":{"a":[1,2.0,"x"]},"flag":true,"none":null}}',
    # values of a typed key in another type stay in args
    '{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":10,"dur":1,'
    '"args":{"correlation":"12","device":1.0,"grid":[1,2.5],"block":[1,"a"],"dtype":7,'
    '"memory bandwidth (GB/s)":3,"Input Dims":[[2,3],[3,4]],"Input type":["float",""]}}',
    # strings: escapes, unicode, control characters, and \\/ (written back as DuckDB writes them)
    '{"ph":"i","cat":"cpu_instant_event","name":"a\\"b\\\\c\\/d\\u00e9\\ud83d\\ude00\\n\\t\\u001f",'
    '"pid":1,"tid":1,"ts":1.0005,"s":"t","args":{"k\\u00e9y":"v\\b\\f\\r","é":"ü \\u2028"}}',
    # doubles in args in every notation
    '{"ph":"X","name":"d","pid":1,"tid":1,"ts":2.0015,"dur":0.0004,"args":{"a":1e5,"b":1.0,"c":0.1,'
    '"d":1e-7,"e":123456789012.5,"f":-0.0,"g":1E+2,"h":0.000123,"i":1.5e30,"j":12345678901234567.0,'
    '"k":3.14159265358979,"l":1e21,"m":1e20,"n":0.000001,"o":-2.5e-5,"p":5e-24,"q":0.0,'
    '"r":1.7976931348623157e30,"s":1234567890123456789.5e1}}',
    # pid / tid / id as strings go to extra, with bp and s, in DuckDB's order
    '{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler",'
    '"ts":5,"dur":3,"args":{"Op count":0}}',
    '{"ph":"f","cat":"ac2g","name":"ac2g","id":"0x1f","pid":0,"tid":"stream 7","ts":6,"bp":"e"}',
    '{"ph":"s","cat":"ac2g","name":"ac2g","id":41,"pid":0,"tid":7,"ts":6}',
    # metadata without a time, empty args, no args, no cat
    '{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"python"}}',
    '{"ph":"M","name":"thread_sort_index","pid":0,"tid":0,"ts":0,"args":{}}',
    '{"ph":"C","name":"mem","pid":0,"ts":7}',
    # limits: the largest int64, the latest time that fits with its duration
    '{"ph":"X","cat":"cpu_op","name":"x","pid":9223372036854775807,"tid":-9223372036854775808,'
    '"ts":9223372036854775.000,"dur":0.807,"args":{"Ev Idx":-1,"Bytes":-9223372036854775808}}',
    # memcpy kinds and steps
    '{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pinned)","pid":0,"tid":7,"ts":8,'
    '"dur":1,"args":{"bytes":4096}}',
    '{"ph":"X","cat":"user_annotation","name":"ProfilerStep#3","pid":1,"tid":1,"ts":1,"dur":9}',
    # every rule of the kind, in its order: a GPU-side step, memory, 2021's categories, unknown ones
    '{"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#3","pid":0,"tid":7,"ts":1,"dur":9}',
    '{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":3,"s":"t",'
    '"args":{"Bytes":512,"Addr":1}}',
    '{"ph":"X","cat":"Memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":7,"ts":8,"dur":1}',
    '{"ph":"X","cat":"Kernel","name":"sgemm","pid":0,"tid":7,"ts":9,"dur":2}',
    '{"ph":"X","cat":"Operator","name":"aten::add","pid":1,"tid":1,"ts":9,"dur":2}',
    '{"ph":"X","cat":"mtia_ccp_events","name":"op","pid":2,"tid":1,"ts":9,"dur":2}',
    '{"ph":"X","cat":"npu_stream_work","name":"op","pid":2,"tid":1,"ts":9,"dur":2}',
    '{"ph":"t","cat":"fwdbwd","name":"fwdbwd","id":3,"pid":1,"tid":1,"ts":4}',
    '{"ph":"I","name":"mark","pid":1,"tid":1,"ts":4}',
]


def test_rows_are_those_of_duckdbs_transform(tmp_path: Path) -> None:
    text, count = _chunk(*EVENTS)
    assert fast_path_safe(text)
    _same(tmp_path, text, count)


def test_strings_with_an_escape_or_utf8_at_every_offset(tmp_path: Path) -> None:
    """Runs of plain bytes are found eight at a time (``_json_plain.h``): whatever ends one, at
    whatever offset, the values are DuckDB's."""
    events = []
    for special in ['\\"', "\\\\", "\\/", "\\n", "\\u00e9", "é", "😀", "\x7f"]:
        for length in range(20):
            for at in range(0, length + 1, 3):
                inner = "a" * at + special + "b" * (length - at)
                events.append(
                    f'{{"ph":"X","cat":"cpu_op","name":"{inner}","pid":1,"tid":1,"ts":1,"dur":1,'
                    f'"args":{{"k{inner}":"{inner}"}}}}'
                )
    _same(tmp_path, *_chunk(*events))


@pytest.mark.parametrize("sep", [",", ",\n  ", " , ", "\n,\n", ",\t\r\n"])
def test_any_separator_and_whitespace_inside_events(tmp_path: Path, sep: str) -> None:
    spaced = [json.dumps(json.loads(e), indent=1) for e in EVENTS[:6]]
    _same(tmp_path, *_chunk(*spaced, sep=sep))


@pytest.mark.parametrize(
    "event",
    [
        '{"ph":"X","name":"a","ts":1,"dur":1,"extra_key":1}',  # unknown key: moved to extra by SQL
        '{"ph":"X","name":"a","ts":1,"dur":1,"ts":2}',  # duplicate key
        '{"ph":"X","name":"a","ts":1e3,"dur":1}',  # a time with an exponent
        '{"ph":"X","name":"a","ts":-1,"dur":1}',  # negative: refused by the SQL path
        '{"ph":"X","name":"a","ts":1,"dur":-0.5}',
        '{"ph":"X","name":"a","ts":9223372036854775.807,"dur":1}',  # ends beyond int64 ns
        '{"ph":"X","name":"a","ts":1}',  # X without dur
        '{"ph":"X","ts":1,"dur":1}',  # X without name
        '{"ph":"Q","name":"a","ts":1}',  # no such phase
        '{"ph":"i","name":"a"}',  # no ts
        '{"ph":"i","name":"a","ts":1,"pid":true}',
        '{"ph":"i","name":"a","ts":1,"pid":-0}',
        '{"ph":"i","name":"a","ts":1,"tid":9223372036854775808}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":"\\ud800"}}',  # lone surrogate
        '{"ph":"i","name":"a\\u0000b","ts":1}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":1,"x":2}}',  # duplicate args key
        '{"ph":"i","name":"a","ts":1,"args":[1]}',
        '{"ph":"i","name":"a","ts":1,"args":{"correlation":18446744073709551615}}',
        '{"ph":"i","cat":null,"name":"a","ts":1}',
        '{"ph":"i","name":"a","ts":1,"bp":null}',
        # what DuckDB's lenient reader would misread (fast_path_safe): the exact path decides
        '{"ph":"i","name":"a","ts":1,"args":{"x":1e300}}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":1E-400}}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":12345678901234567890}}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":NaN}}',
        '{"ph":"i","name":"a","ts":1,"args":{"x":[1,]}}',
        '{"ph":"i","name":"a","ts":"1"}',
        '{"ph":"i","name":"a","ts":true}',
    ],
)
def test_what_it_cannot_answer_for_goes_back_to_duckdb(event: str) -> None:
    text, count = _chunk(EVENTS[0], event)
    assert _creader.read_columns(text, count) is None


def test_a_wrong_event_count_gives_the_chunk_back() -> None:
    text, count = _chunk(*EVENTS[:3])
    assert _creader.read_columns(text, count + 1) is None
    assert _creader.read_columns(text, count - 1) is None


def test_generated_traces(tmp_path: Path) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=2, steps=3, ops_per_step=40, seed=11))
    for path in sorted(job.iterdir()):
        for chunk in TraceFile(path).chunks():
            _same(tmp_path, chunk.text, chunk.count)


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TRACE_SETS))
def test_every_chunk_of_the_real_traces(tmp_path: Path, name: str) -> None:
    paths = [SHARED_TRACES / p for p in TRACE_SETS[name]]
    if not all(p.exists() for p in paths):
        pytest.skip(SHARED_SKIP)
    files = [f for p in paths for f in (sorted(p.glob("*.json*")) if p.is_dir() else [p])]
    for path in files:
        for chunk in TraceFile(path).chunks():
            if fast_path_safe(chunk.text):
                _same(tmp_path, chunk.text, chunk.count)


def test_import_stores_the_same_events_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    write_job(job, SynthSpec(ranks=2, steps=3, ops_per_step=40, seed=5), compress=True)
    tables = {}
    for reader in ("sql", "c"):
        monkeypatch.setenv(_creader.ENV, reader)
        with Store(tmp_path / reader) as store:
            report = store.import_traces([job], "j")
            profile = store.profile("j", report.profile.id).path
        tables[reader] = pq.read_table(sorted((profile / "events").glob("*.parquet")))
    assert tables["c"].num_rows == tables["sql"].num_rows > 0
    assert tables["c"].equals(tables["sql"])


def test_built_once_per_source_and_none_without_a_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _creader.build(tmp_path / "cache")
    assert built is not None and built.is_file()
    assert _creader.build(tmp_path / "cache") == built  # cached: not compiled again
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [built.name]  # no temporary left
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert _creader.build(tmp_path / "other") is None
    monkeypatch.setenv(_creader.ENV, "sql")
    assert not _creader.available()
    assert os.environ[_creader.ENV] == "sql"
