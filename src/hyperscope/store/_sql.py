"""SQL that turns chunks of raw trace events into rows of the event schema.

It is generated from the schema tables so that adding a typed column is a one-line change there.
DuckDB does the per-event work in C++: Python never builds an object per event on the fast path.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from hyperscope.schema.events import (
    ARG_COLUMNS,
    CATEGORY_KINDS,
    PHASES,
    PHASES_WITHOUT_TS,
    EventKind,
)

#: Top-level event fields the fast path reads. Others send the chunk through the exact path, which
#: moves them under ``__extra`` so they are kept.
KNOWN_KEYS: Final = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s", "args", "__extra")

#: ts and dur are read as exact decimals: float64 cannot hold epoch microseconds to the nanosecond.
RAW_COLUMNS: Final = (
    "{'ph':'JSON','cat':'JSON','name':'JSON','pid':'JSON','tid':'JSON',"
    "'ts':'DECIMAL(38,3)','dur':'DECIMAL(38,3)','id':'JSON','bp':'JSON','s':'JSON',"
    "'args':'JSON','__extra':'JSON'}"
)

MEMCPY_KINDS: Final = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD")


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_type(t: pa.DataType) -> str:
    if t == pa.int64():
        return "BIGINT"
    if t == pa.float64():
        return "DOUBLE"
    if t == pa.string():
        return "VARCHAR"
    if t == pa.list_(pa.int64()):
        return "BIGINT[]"
    raise TypeError(f"no SQL type for {t}")


def read_raw(path: str) -> str:
    return (
        f"CREATE OR REPLACE TEMP TABLE raw AS SELECT * FROM read_json({quote(path)}, "
        f"format='newline_delimited', columns={RAW_COLUMNS}, maximum_object_size=67108864)"
    )


def unknown_keys(path: str) -> str:
    known = ", ".join(quote(k) for k in KNOWN_KEYS)
    return (
        f"SELECT count(*) FROM read_json({quote(path)}, format='newline_delimited', records=false, "
        f"columns={{'json': 'JSON'}}, maximum_object_size=67108864) "
        f"WHERE len(list_filter(json_keys(json), lambda k: k NOT IN ({known}))) > 0"
    )


def invalid_rows() -> str:
    """Count rows the fast path must not accept; the exact path then names the first one."""
    phases = ", ".join(quote(p) for p in sorted(PHASES))
    no_ts = ", ".join(quote(p) for p in sorted(PHASES_WITHOUT_TS))
    return f"""
    SELECT count(*) FROM raw WHERE
         json_type(ph) IS DISTINCT FROM 'VARCHAR' OR (ph->>'$') NOT IN ({phases})
      OR (cat IS NOT NULL AND json_type(cat) <> 'VARCHAR')
      OR (name IS NOT NULL AND json_type(name) <> 'VARCHAR')
      OR (name IS NULL AND (ph->>'$') = 'X')
      OR (ts IS NULL AND (ph->>'$') NOT IN ({no_ts}))
      OR (dur IS NULL AND (ph->>'$') = 'X')
      OR (pid IS NOT NULL AND json_type(pid) NOT IN ('BIGINT', 'UBIGINT', 'VARCHAR'))
      OR (tid IS NOT NULL AND json_type(tid) NOT IN ('BIGINT', 'UBIGINT', 'VARCHAR'))
      OR (args IS NOT NULL AND json_type(args) <> 'OBJECT')
      OR (__extra IS NOT NULL AND json_type(__extra) <> 'OBJECT')
    """


def _int_or_null(col: str) -> str:
    return f"CASE WHEN json_type({col}) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({col} AS BIGINT) END"


def stage() -> str:
    """Typed values and, per typed arg column, whether the value survives a round trip."""
    paths = ", ".join(quote(f'$."{c.key}"') for c in ARG_COLUMNS)
    parts = [
        "ph->>'$' AS ph_s",
        "cat->>'$' AS cat_s",
        "name->>'$' AS name_s",
        f"{_int_or_null('pid')} AS pid_i",
        f"{_int_or_null('tid')} AS tid_i",
        f"{_int_or_null('id')} AS id_i",
        "ts",
        "dur",
        "pid",
        "tid",
        "id",
        "bp",
        "s",
        "args",
        "__extra",
    ]
    for i, c in enumerate(ARG_COLUMNS, start=1):
        h = f"hot[{i}]"
        t = _sql_type(c.type)
        if t == "VARCHAR":
            parts.append(f"CASE WHEN json_type({h}) = 'VARCHAR' THEN {h}->>'$' END AS v{i}")
            parts.append(f"({h} IS NULL OR json_type({h}) = 'VARCHAR') AS ok{i}")
        elif t == "BIGINT":
            parts.append(
                f"CASE WHEN json_type({h}) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({h} AS BIGINT) END AS v{i}"
            )
            parts.append(f"({h} IS NULL OR v{i} IS NOT NULL) AS ok{i}")
        elif t == "DOUBLE":
            # A JSON number with a fraction or exponent parses to the double that export prints back.
            parts.append(f"CASE WHEN json_type({h}) = 'DOUBLE' THEN TRY_CAST({h} AS DOUBLE) END AS v{i}")
            parts.append(f"({h} IS NULL OR v{i} IS NOT NULL) AS ok{i}")
        else:
            parts.append(f"TRY_CAST({h} AS {t}) AS v{i}")
            parts.append(f"({h} IS NULL OR to_json(v{i}) = {h}) AS ok{i}")
    return (
        "CREATE OR REPLACE TEMP TABLE staged AS SELECT "
        + ", ".join(parts)
        + f" FROM (SELECT *, json_extract(args, [{paths}]) AS hot FROM raw)"
    )


def clean_columns() -> str:
    return "SELECT " + ", ".join(f"bool_and(ok{i})" for i in range(1, len(ARG_COLUMNS) + 1)) + " FROM staged"


def kind_case() -> str:
    cats = " ".join(
        f"WHEN cat_s = {quote(cat)} THEN {quote(kind.value)}" for cat, kind in CATEGORY_KINDS.items()
    )
    return f"""CASE
        WHEN ph_s = 'M' THEN {quote(EventKind.METADATA)}
        WHEN ph_s IN ('s', 't', 'f') THEN {quote(EventKind.FLOW)}
        WHEN ph_s = 'C' THEN {quote(EventKind.COUNTER)}
        WHEN name_s = '[memory]' THEN {quote(EventKind.MEMORY)}
        WHEN name_s LIKE 'ProfilerStep#%' AND coalesce(cat_s, '') <> 'gpu_user_annotation'
             THEN {quote(EventKind.STEP)}
        {cats}
        WHEN ph_s IN ('i', 'I') THEN {quote(EventKind.INSTANT)}
        ELSE {quote(EventKind.OTHER)} END"""


def rows(rank: int, node: str, clean: list[bool]) -> str:
    """Final rows of one chunk; ``clean[i]`` says whether ARG_COLUMNS[i] moves out of ``args``."""
    memcpy = "|".join(MEMCPY_KINDS)
    cols = [
        f"{rank}::INTEGER AS rank",
        f"{quote(node)} AS node",
        "pid_i AS pid",
        "tid_i AS tid",
        f"{kind_case()} AS kind",
        "cat_s AS cat",
        "ph_s AS ph",
        "name_s AS name",
        "CAST(ts * 1000 AS BIGINT) AS ts_ns",
        "CAST(dur * 1000 AS BIGINT) AS dur_ns",
        "id_i AS flow_id",
        f"CASE WHEN cat_s = 'gpu_memcpy' THEN nullif(regexp_extract(name_s, '({memcpy})', 1), '') END"
        " AS memcpy_kind",
    ]
    removed = []
    for i, (c, ok) in enumerate(zip(ARG_COLUMNS, clean, strict=True), start=1):
        t = _sql_type(c.type)
        cols.append(f"v{i} AS {c.name}" if ok else f"NULL::{t} AS {c.name}")
        if ok:
            removed.append(f'"{c.key}":null')
    patch = quote("{" + ",".join(removed) + "}")
    cols.append(f"CASE WHEN args IS NOT NULL THEN json_merge_patch(args, {patch})::VARCHAR END AS args")
    leftovers = (
        "json_object('pid', CASE WHEN pid_i IS NULL THEN pid END, "
        "'tid', CASE WHEN tid_i IS NULL THEN tid END, "
        "'id', CASE WHEN id_i IS NULL THEN id END, 'bp', bp, 's', s)"
    )
    cols.append(
        f"nullif(json_merge_patch(coalesce(__extra, '{{}}'::JSON), {leftovers})::VARCHAR, '{{}}') AS extra"
    )
    return "SELECT " + ",\n  ".join(cols) + " FROM staged"
