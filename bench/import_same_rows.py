"""Check that two versions of the importer store the same events: same rows, columns and types.

A change to the import path must leave the stored table identical. This imports each trace with a
reference source tree (``--reference SRC``, e.g. a ``git worktree`` of main's ``src``) and with the
installed hyperscope, each in a fresh child process, and compares the two events tables and the
profiles' rank metadata. Traces: those in ../shared/traces and generated ones (several ranks, gzip,
mixed separators, unknown fields, big numbers), so the fast path and the exact path both run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from _common import TRACES_DIR

from hyperscope.store.synth import SynthSpec, write_job

# Child: argv[1] = store home, argv[2] = JSON list of paths; prints the profile's directory.
CHILD = """
import json, sys
from hyperscope import Store
with Store(sys.argv[1]) as store:
    report = store.import_traces(json.loads(sys.argv[2]), "same")
    print(store.profile("same", report.profile.id).path)
"""


def shared_cases() -> list[tuple[str, list[Path]]]:
    if not TRACES_DIR.is_dir():
        return []
    cases = []
    for readme in sorted(TRACES_DIR.glob("*/*/")):
        files = sorted(p for p in readme.rglob("*.json*") if p.is_file())
        if files:
            cases.append((str(readme.relative_to(TRACES_DIR)), [readme] if len(files) > 1 else files))
    return cases


def generated_cases(work: Path) -> list[tuple[str, list[Path]]]:
    """Synthetic traces, plus hand-made ones that go through the exact path or odd layouts."""
    plain = work / "synth"
    write_job(plain, SynthSpec(ranks=3, steps=4, ops_per_step=60))
    gz = work / "synth-gz"
    write_job(gz, SynthSpec(ranks=2, steps=3, ops_per_step=30, seed=7), compress=True)
    odd = work / "odd.json"
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 1.5,
            "dur": 2.25,
            "args": {"correlation": 5, "grid": [1, 2, 3], "stream": 7, "note": {"a": [1.50, 1e3, -0.0]}},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op",
            "pid": "host",
            "tid": "main",
            "ts": 0,
            "dur": 10,
            "args": {"External id": 18446744073709551615, "bytes": 1.0, "dtype": 3, "extra key": None},
        },
        {"ph": "i", "name": "mark", "ts": 3, "s": "g", "unknown_field": [1, {"b": 2}]},
        {"ph": "s", "cat": "ac2g", "name": "f", "id": "x1", "ts": 1, "bp": "e", "pid": 0, "tid": 7},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "C", "name": "mem", "ts": 4, "pid": 0, "args": {"v": 12.125}},
    ]
    text = (
        b'{"distributedInfo": {"rank": 0}, "traceEvents": ['
        + b",\n  ".join(orjson.dumps(e) for e in events[:3])
        + b","
        + b",".join(orjson.dumps(e) for e in events[3:])
        + b'], "trailer": 1}'
    )
    odd.write_bytes(text)
    indent0 = work / "indent0.json"
    indent0.write_text(json.dumps({"traceEvents": events}, indent=0))
    return [
        ("generated 3 ranks", [plain]),
        ("generated gzip 2 ranks", [gz]),
        ("hand-made", [odd]),
        ("indent=0", [indent0]),
    ]


def import_with(src: str | None, paths: list[Path], home: Path) -> Path:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), json.dumps([str(p) for p in paths])],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"import failed ({src or 'this tree'}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def stored(profile: Path) -> tuple[pa.Table, object]:
    table = pq.read_table(sorted((profile / "events").glob("*.parquet")))
    meta = json.loads((profile / "meta.json").read_text()) if (profile / "meta.json").exists() else {}
    ranks = [{k: v for k, v in r.items() if k != "source_file"} for r in meta.get("ranks", [])]
    return table, ranks


def _nullable(table: pa.Table) -> pa.Table:
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def compare(name: str, paths: list[Path], reference: str, work: Path) -> bool:
    a_table, a_ranks = stored(import_with(reference, paths, work / f"ref-{abs(hash(name))}"))
    b_table, b_ranks = stored(import_with(None, paths, work / f"new-{abs(hash(name))}"))
    problems = []
    # nullability aside: DuckDB's writer marks a column with no null "required", pyarrow's never
    a_table, b_table = _nullable(a_table), _nullable(b_table)
    if a_table.schema != b_table.schema:
        problems.append(f"schema differs:\n{a_table.schema}\n---\n{b_table.schema}")
    elif not a_table.equals(b_table):  # rows that tie on the sort key may come in either order
        con = duckdb.connect()
        con.register("a", a_table)
        con.register("b", b_table)
        only = [
            con.execute(f"SELECT count(*) FROM (SELECT * FROM {x} EXCEPT ALL SELECT * FROM {y})").fetchall()[
                0
            ][0]
            for x, y in (("a", "b"), ("b", "a"))
        ]
        if a_table.num_rows != b_table.num_rows or any(only):
            problems.append(
                f"{a_table.num_rows} vs {b_table.num_rows} rows; only in the reference: {only[0]}, "
                f"only in this tree: {only[1]}"
            )
    if a_ranks != b_ranks:
        problems.append("rank metadata differs")
    print(f"{name}: {b_table.num_rows:,} events -> {'SAME' if not problems else 'DIFFERENT'}")
    for p in problems:
        print("   ", p)
    return not problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="src/ directory of the reference version")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="same-rows-") as tmp:
        work = Path(tmp)
        cases = shared_cases() + generated_cases(work)
        ok = [compare(name, paths, args.reference, work) for name, paths in cases]
    print(f"\n{sum(ok)} of {len(ok)} the same")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
