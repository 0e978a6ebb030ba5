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
    EVENT_SCHEMA,
    MEMCPY_KINDS,
    PHASES,
    PHASES_WITHOUT_TS,
    EventKind,
    categories_of,
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


def _object_size(largest: int) -> int:
    """DuckDB's ``maximum_object_size``: 16 MB, or the chunk's size when one event is larger (the
    reader refuses events over ``_tracefile.EVENT_LIMIT`` before they get here)."""
    return max(16 << 20, largest + 64)


def _files(path: str | list[str]) -> str:
    return quote(path) if isinstance(path, str) else "[" + ", ".join(quote(p) for p in path) + "]"


def read_raw(path: str | list[str], largest: int = 0) -> str:
    """Table ``raw`` of the events of one chunk file, or of several with a ``filename`` column
    (small files are read in one statement: DuckDB's fixed cost per statement, ~25 ms to plan
    ``rows``, is most of a small file's import)."""
    several = ", filename=true" if isinstance(path, list) else ""
    return (
        f"CREATE OR REPLACE TEMP TABLE raw AS SELECT * FROM read_json({_files(path)}, "
        f"format='array', columns={RAW_COLUMNS}, maximum_object_size={_object_size(largest)}{several})"
    )


def unknown_keys(path: str | list[str], largest: int = 0) -> str:
    known = ", ".join(quote(k) for k in KNOWN_KEYS)
    return (
        f"SELECT count(*) FROM read_json({_files(path)}, format='array', records=false, "
        f"columns={{'json': 'JSON'}}, maximum_object_size={_object_size(largest)}) "
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
      OR abs(ts) > 9223372036854775.807 OR abs(dur) > 9223372036854775.807
      OR ts < 0 OR dur < 0 OR ts + coalesce(dur, 0) > 9223372036854775.807
    """


def _int_or_null(col: str) -> str:
    return f"CASE WHEN json_type({col}) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({col} AS BIGINT) END"


def _typed_args() -> list[str]:
    """One expression per typed arg column: the value when it round-trips exactly, else NULL.

    A value that would not come back identical (an integer in a float column, a string where a
    number belongs) stays in ``args`` instead, for that event alone.
    """
    exprs = []
    for i, c in enumerate(ARG_COLUMNS, start=1):
        h = f"hot[{i}]"
        t = _sql_type(c.type)
        if t == "VARCHAR":
            exprs.append(f"CASE WHEN json_type({h}) = 'VARCHAR' THEN {h}->>'$' END")
        elif t == "BIGINT":
            exprs.append(
                f"CASE WHEN json_type({h}) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({h} AS BIGINT) END"
            )
        elif t == "DOUBLE":
            # A JSON number with a fraction or exponent parses to the double that export prints back.
            exprs.append(f"CASE WHEN json_type({h}) = 'DOUBLE' THEN TRY_CAST({h} AS DOUBLE) END")
        else:
            exprs.append(f"CASE WHEN to_json(TRY_CAST({h} AS {t})) = {h} THEN TRY_CAST({h} AS {t}) END")
    return exprs


def kind_case() -> str:
    cats = " ".join(
        f"WHEN cat_s = {quote(cat)} THEN {quote(kind.value)}" for cat, kind in CATEGORY_KINDS.items()
    )
    gpu_annotations = ", ".join(quote(c) for c in categories_of(EventKind.GPU_ANNOTATION))
    return f"""CASE
        WHEN ph_s = 'M' THEN {quote(EventKind.METADATA)}
        WHEN ph_s IN ('s', 't', 'f') THEN {quote(EventKind.FLOW)}
        WHEN ph_s = 'C' THEN {quote(EventKind.COUNTER)}
        WHEN name_s = '[memory]' THEN {quote(EventKind.MEMORY)}
        WHEN name_s LIKE 'ProfilerStep#%' AND coalesce(cat_s, '') NOT IN ({gpu_annotations})
             THEN {quote(EventKind.STEP)}
        {cats}
        WHEN ph_s IN ('i', 'I') THEN {quote(EventKind.INSTANT)}
        ELSE {quote(EventKind.OTHER)} END"""


def rows(rank: int, node: str) -> str:
    """Final rows of one chunk of ``raw``, in the column order of the event schema."""
    return _rows(f"{int(rank)}::INTEGER", quote(node))


def rows_by_file(files: dict[str, tuple[int, str]]) -> str:
    """Final rows of ``raw`` read from several files (``read_raw`` of a list): each file's rank
    and node, by its ``filename``."""
    ranks = " ".join(f"WHEN {quote(f)} THEN {int(r)}" for f, (r, _) in files.items())
    nodes = " ".join(f"WHEN {quote(f)} THEN {quote(n)}" for f, (_, n) in files.items())
    return _rows(f"(CASE filename {ranks} END)::INTEGER", f"(CASE filename {nodes} END)")


def _memcpy_kind() -> str:
    memcpy = "|".join(MEMCPY_KINDS)
    memcpy_cats = ", ".join(quote(c) for c in categories_of(EventKind.MEMCPY))
    return (
        f"CASE WHEN cat_s IN ({memcpy_cats}) THEN nullif(regexp_extract(name_s, '({memcpy})', 1), '') END"
        " AS memcpy_kind"
    )


def _typed_columns(rank: str, node: str, ts_ns: str, dur_ns: str) -> list[str]:
    """The stored columns up to the typed args, in the events table's order (the compiled
    reader's rows get the same from ``_arrow_rows.from_reader_columns``)."""
    cols = [
        f"{rank} AS rank",
        f"{node} AS node",
        "pid_i AS pid",
        "tid_i AS tid",
        f"{kind_case()} AS kind",
        "cat_s AS cat",
        "ph_s AS ph",
        "name_s AS name",
        f"{ts_ns} AS ts_ns",
        f"{dur_ns} AS dur_ns",
        "id_i AS flow_id",
        _memcpy_kind(),
    ]
    return cols + [f"v{i} AS {c.name}" for i, c in enumerate(ARG_COLUMNS, start=1)]


def _rows(rank: str, node: str) -> str:
    paths = ", ".join(quote(f'$."{c.key}"') for c in ARG_COLUMNS)
    typed = _typed_args()
    cols = _typed_columns(rank, node, "CAST(ts * 1000 AS BIGINT)", "CAST(dur * 1000 AS BIGINT)")
    moved = ", ".join(
        f"CASE WHEN v{i} IS NOT NULL THEN {quote(chr(34) + c.key + chr(34) + ':null')} END"
        for i, c in enumerate(ARG_COLUMNS, start=1)
    )
    cols.append(
        "CASE WHEN args IS NOT NULL THEN json_merge_patch(args, "
        f"('{{' || concat_ws(',', {moved}) || '}}')::JSON)::VARCHAR END AS args"
    )
    leftovers = (
        "json_object('pid', CASE WHEN pid_i IS NULL THEN pid END, "
        "'tid', CASE WHEN tid_i IS NULL THEN tid END, "
        "'id', CASE WHEN id_i IS NULL THEN id END, 'bp', bp, 's', s)"
    )
    plain = (
        "bp IS NULL AND s IS NULL AND __extra IS NULL AND (pid IS NULL OR pid_i IS NOT NULL)"
        " AND (tid IS NULL OR tid_i IS NOT NULL) AND (id IS NULL OR id_i IS NOT NULL)"
    )
    cols.append(
        f"CASE WHEN {plain} THEN NULL ELSE "
        f"nullif(json_merge_patch(coalesce(__extra, '{{}}'::JSON), {leftovers})::VARCHAR, '{{}}') END"
        " AS extra"
    )
    inner = (
        "SELECT *, ph->>'$' AS ph_s, cat->>'$' AS cat_s, name->>'$' AS name_s, "
        f"{_int_or_null('pid')} AS pid_i, {_int_or_null('tid')} AS tid_i, {_int_or_null('id')} AS id_i, "
        f"json_extract(args, [{paths}]) AS hot FROM raw"
    )
    values = ", ".join(f"{expr} AS v{i}" for i, expr in enumerate(typed, start=1))
    return "SELECT " + ",\n  ".join(cols) + f" FROM (SELECT *, {values} FROM ({inner}))"


def empty_events() -> str:
    """An empty relation with the columns and types of the event schema."""
    cols = []
    for f in EVENT_SCHEMA:
        t = "INTEGER" if f.type == pa.int32() else _sql_type(f.type)
        cols.append(f"NULL::{t} AS {f.name}")
    return "SELECT " + ", ".join(cols) + " WHERE false"
