"""A profile B made from a profile A by slowing named kernels by known amounts: the pairs on which
``compare`` must give every delta exactly (tests) and the pairs it is timed on (bench).

Every launch of a kernel named in ``slow`` lasts ``slow[name]`` ns longer, and everything after it
on its rank moves later by as much: a timestamp ``t`` of rank ``r`` becomes ``t + Σ d`` over the
slowed launches of ``r`` that start strictly before ``t``. Starts and ends move separately, so an
interval grows by the slowdowns of the launches that start inside it: a slowed kernel by its own
``d``, a step by the sum over its slowed kernels, and an event that contains no slowed start keeps
its length. So B's answers are A's plus arithmetic the caller knows (as long as no other device op
starts while a slowed kernel runs, which would stretch that op too).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import duckdb

from hyperscope.errors import UsageError
from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY
from hyperscope.schema.layout import EVENTS_DIR, META_FILE, SAMPLES_DIR
from hyperscope.store.profile import Profile


def _sq(text: str) -> str:
    return text.replace("'", "''")


def _renamed(rename: dict[str, str]) -> str:
    if not rename:
        return "e.name"
    whens = " ".join(f"WHEN '{_sq(a)}' THEN '{_sq(b)}'" for a, b in rename.items())
    return f"CASE e.name {whens} ELSE e.name END AS name"


def write_slowed(
    source: Profile,
    path: Path,
    slow: dict[str, int],
    *,
    rename: dict[str, str] | None = None,
    threads: int | None = None,
) -> Profile:
    """Write B (``source`` with the kernels of ``slow`` slowed, and events named as keys of
    ``rename`` renamed, as a new build of a kernel would be) into the new directory ``path``."""
    if not slow or any(d < 0 for d in slow.values()):
        raise UsageError(f"slow {slow!r}: expected kernel names with non-negative ns to add")
    path.mkdir(parents=True, exist_ok=False)
    (path / EVENTS_DIR).mkdir()
    values = ", ".join(f"('{_sq(n)}', {int(d)})" for n, d in slow.items())
    cols = ", ".join(
        "CAST(e.ts_ns + coalesce(a.cum, 0) AS BIGINT) AS ts_ns"
        if f.name == "ts_ns"
        else "CAST(e.dur_ns + coalesce(z.cum, 0) - coalesce(a.cum, 0) AS BIGINT) AS dur_ns"
        if f.name == "dur_ns"
        else _renamed(rename or {})
        if f.name == "name"
        else f"e.{f.name}"
        for f in EVENT_SCHEMA
    )
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute("SET memory_limit = '2GB'")
        con.execute(f"SET temp_directory = '{_sq(str(path / '.tmp'))}'")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        src = f"read_parquet('{_sq(source.events_glob)}')"
        con.execute(
            f"""CREATE TEMP TABLE sl AS
                SELECT rank, at_ns, CAST(max(cum) AS BIGINT) AS cum FROM (
                    SELECT e.rank, e.ts_ns AS at_ns,
                           sum(v.d) OVER (PARTITION BY e.rank ORDER BY e.ts_ns) AS cum
                    FROM {src} e JOIN (VALUES {values}) v(name, d) ON e.name = v.name
                    WHERE e.kind = 'kernel' AND e.dur_ns IS NOT NULL) GROUP BY ALL"""
        )
        # Part by part, each sorted on its own (a profile is a directory of sorted parts): a shift
        # that only grows with time keeps a part's rows in order, and no sort spills to disk.
        for n, part in enumerate(sorted((source.path / EVENTS_DIR).glob("*.parquet"))):
            target = path / EVENTS_DIR / f"part-{n:05d}.parquet"
            con.execute(
                f"""COPY (
                      SELECT {cols} FROM read_parquet('{_sq(str(part))}') e
                      ASOF LEFT JOIN sl a ON e.rank = a.rank AND e.ts_ns > a.at_ns
                      ASOF LEFT JOIN sl z ON e.rank = z.rank AND e.ts_ns + e.dur_ns > z.at_ns
                      ORDER BY {", ".join("e." + k for k in SORT_KEY)})
                    TO '{_sq(str(target))}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 131072)"""
            )
        count, lo, hi = con.execute(
            "SELECT count(*), min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) "
            f"FROM read_parquet('{_sq(str(path / EVENTS_DIR / '*.parquet'))}')"
        ).fetchall()[0]
    finally:
        con.close()
        shutil.rmtree(path / ".tmp", ignore_errors=True)
    if (source.path / SAMPLES_DIR).is_dir():
        shutil.copytree(source.path / SAMPLES_DIR, path / SAMPLES_DIR)
    meta = replace(
        source.meta,
        profile_id=path.name[:16],
        created_ns=time.time_ns(),
        events=int(count),
        ts_min_ns=lo,
        ts_max_ns=hi,
    )
    (path / META_FILE).write_text(meta.to_json())
    return Profile.open(path)
