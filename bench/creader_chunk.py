"""One chunk of a trace through both per-chunk transforms: DuckDB's SQL (``_sql.rows`` over
``read_json``) and the compiled reader (``_creader`` + ``_arrow_rows.from_reader_columns``). Prints the CPU
seconds of each (median of --rounds) and whether the rows are the same.

    .venv/bin/python bench/creader_chunk.py \
        ../shared/traces/HolisticTraceAnalysis/df_index_resolver/df_index_resolver.json.gz
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from hyperscope.store import _arrow_rows, _creader, _sql
from hyperscope.store._tracefile import TraceFile


def sql_rows(con: duckdb.DuckDBPyConnection, work: Path, text: bytes) -> list[tuple[object, ...]]:
    path = work / "chunk.json"
    path.write_bytes(b"[" + text + b"]")
    con.execute(_sql.read_raw(str(path), len(text)))
    assert con.execute(_sql.invalid_rows()).fetchone() == (0,)
    assert con.execute(_sql.unknown_keys(str(path), len(text))).fetchone() == (0,)
    return con.execute(_sql.rows(0, "n")).fetchall()


def c_rows(con: duckdb.DuckDBPyConnection, text: bytes, count: int) -> list[tuple[object, ...]] | None:
    table = _creader.read_columns(text, count)
    if table is None:
        return None
    con.register("cols", _arrow_rows.from_reader_columns(table, rank=0, node="n"))
    try:
        return con.execute("SELECT * FROM cols").fetchall()
    finally:
        con.unregister("cols")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", type=Path)
    parser.add_argument("--chunk", type=int, default=0, help="which chunk of the file (default the first)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chunk = next(c for i, c in enumerate(TraceFile(args.trace).chunks()) if i == args.chunk)
    print(f"{args.trace.name} chunk {args.chunk}: {chunk.count:,} events, {len(chunk.text) / 1e6:.1f} MB")
    con = duckdb.connect(config={"threads": 1})
    with tempfile.TemporaryDirectory() as work:
        times: dict[str, list[float]] = {"sql": [], "c": []}
        want: list[tuple[object, ...]] = []
        got: list[tuple[object, ...]] | None = None
        for _ in range(args.rounds):
            t0 = time.process_time()
            want = sql_rows(con, Path(work), chunk.text)
            t1 = time.process_time()
            got = c_rows(con, chunk.text, chunk.count)
            times["sql"].append(t1 - t0)
            times["c"].append(time.process_time() - t1)
    if got is None:
        print("the compiled reader gave the chunk back (the DuckDB path would read it)")
        return 1
    same = sorted(map(repr, want)) == sorted(map(repr, got))
    sql_s, c_s = statistics.median(times["sql"]), statistics.median(times["c"])
    print(
        f"DuckDB SQL {sql_s:.3f} s CPU, compiled reader {c_s:.3f} s CPU: {sql_s / c_s:.1f}x; "
        f"rows same: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
