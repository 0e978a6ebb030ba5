"""An XSpace window's raw rows typed into the event schema by Arrow, without DuckDB.

The importer's SQL (``store/_sql.rows``, run by ``torch_backend.typed_rows``) types raw rows by
reading every field as JSON again: on a TF or JAX window at ``cpu_ops`` detail that was about half
of the writer's work for the window, and DuckDB's own memory on top. But the rows ``xplane`` and
``xspace_pb`` build are typed already (ints are ints, text is text) and their ``args`` are written
by Python's ``json`` with compact separators, which the SQL's ``json_merge_patch(args, ...)``
writes back unchanged, key for key, as long as the text holds:

- no key that moves to a typed column (``ARG_COLUMNS``: ``correlation``, ``device``, ...): those
  are cut out of ``args`` by the SQL;
- no number with an exponent, no ``NaN``/``Infinity`` (DuckDB prints those its own way: ``1e-8``
  for Python's ``1e-08``; a plain decimal such as TF's ``"fragmentation":0.125`` it writes back as
  Python wrote it, the shortest text that reads back the same double) and no backslash (an
  escape: DuckDB writes non-ASCII text as UTF-8, Python as ``\\uXXXX``);
- no ``bp`` (the flow's end binding goes to ``extra``, in DuckDB's JSON).

Such rows (every row of a CPU capture: TF's ops carry ``_ct``, ``_p``, ``iter_num``; JAX's
``_src``, ``hlo_op``) are typed here column by column; the others (device ops, launches, flows,
odd values: found by patterns that may be over-cautious, never under) still go through the SQL, so
the stored rows are those of the SQL path, value for value (``tests/capture/test_direct_types.py``
holds them equal on hand-made rows of every kind and on real TF and JAX captures).
"""

from __future__ import annotations

import re
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import ARG_COLUMNS, EVENT_SCHEMA, SORT_KEY
from hyperscope.store._arrow_rows import kinds, memcpy_kinds

__all__ = ["needs_sql", "typed_directly"]

#: What only the SQL writes as it must: a typed arg's key, a float, an escape, a control character.
_ARG_KEYS: Final = "|".join(re.escape(c.key) for c in ARG_COLUMNS)
_ARGS_FOR_SQL: Final = (
    rf'"(?:{_ARG_KEYS})":|[:,\[]-?(?:[0-9]+(?:\.[0-9]+)?[eE]|NaN|Infinity)|\\|[\x00-\x1f\x7f]'
)
_TEXT_FOR_SQL: Final = r"[\x00-\x1f\x7f\\]"


def needs_sql(raw: pa.Table) -> pa.Array:
    """Per row, whether its typing is left to the SQL (a boolean array, never null)."""
    mask = pc.is_valid(raw["bp"])
    mask = pc.or_(mask, pc.fill_null(pc.match_substring_regex(raw["args"], _ARGS_FOR_SQL), False))
    for name in ("name", "cat"):
        mask = pc.or_(mask, pc.fill_null(pc.match_substring_regex(raw[name], _TEXT_FOR_SQL), False))
    return pc.or_(mask, pc.invert(pc.is_in(raw["ph"], pa.array(["X", "i", "I", "s", "f", "t", "C", "M"]))))


def typed_directly(raw: pa.Table, *, rank: int, node: str) -> pa.Table:
    """Rows of ``RAW_SCHEMA`` for which ``needs_sql`` is false, as rows of the event schema, sorted
    by ``SORT_KEY`` (what the SQL gives them)."""
    n = raw.num_rows
    ph, cat, name = raw["ph"], raw["cat"], raw["name"]
    kind = kinds(ph, cat, name)
    # sorted before the table is made: the typed arg columns (null here) are never taken, and each
    # type's nulls are one array shared by its columns (33 of the schema's 46 columns)
    keys = pa.table({"pid": raw["pid"], "tid": raw["tid"], "kind": kind, "ts_ns": raw["ts_ns"]})
    order = pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in SORT_KEY if k != "rank"])
    columns: dict[str, pa.ChunkedArray] = {
        "pid": raw["pid"], "tid": raw["tid"], "kind": kind, "cat": cat, "ph": ph, "name": name,
        "ts_ns": raw["ts_ns"], "dur_ns": raw["dur_ns"], "flow_id": raw["id"],
        "memcpy_kind": memcpy_kinds(cat, name), "args": raw["args"],
    }  # fmt: skip
    taken = {k: _chunked(pc.take(v, order)) for k, v in columns.items()}
    taken["rank"] = _chunked(pa.repeat(pa.scalar(rank, pa.int32()), n))
    taken["node"] = _chunked(pa.repeat(pa.scalar(node, pa.string()), n))
    nulls: dict[pa.DataType, pa.ChunkedArray] = {}
    for f in EVENT_SCHEMA:
        if f.name not in taken and f.type not in nulls:
            nulls[f.type] = _chunked(pa.nulls(n, f.type))
    arrays = [taken[f.name] if f.name in taken else nulls[f.type] for f in EVENT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


def _chunked(a: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a])
