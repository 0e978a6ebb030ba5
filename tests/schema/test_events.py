"""The event contract is consistent with itself."""

import pyarrow as pa

from hyperscope.schema import ARG_COLUMNS, CATEGORY_KINDS, CORE_COLUMNS, EVENT_SCHEMA, SORT_KEY, EventKind


def test_every_column_is_named_once_with_units_in_time_columns() -> None:
    names = [f.name for f in EVENT_SCHEMA]
    assert len(names) == len(set(names))
    assert {"ts_ns", "dur_ns", "bytes", "correlation", "rank", "kind", "name", "args", "extra"} <= set(names)
    assert "ts" not in names and "dur" not in names  # times always carry their unit
    assert EVENT_SCHEMA.field("ts_ns").type == pa.int64()


def test_arg_columns_map_one_key_to_one_column() -> None:
    keys = [c.key for c in ARG_COLUMNS]
    assert len(keys) == len(set(keys))
    core = {c.name for c in CORE_COLUMNS}
    assert not core & {c.name for c in ARG_COLUMNS}


def test_kinds_and_sort_key() -> None:
    assert set(CATEGORY_KINDS.values()) <= set(EventKind)
    assert SORT_KEY[-1] == "ts_ns" and SORT_KEY[0] == "rank"
