"""A scope resolved once on one connection, shared by several analyses (what the dashboard uses).

Resolving a scope costs a pass over the events (each rank's window), and the relations every
analysis reads (scoped device operations with their launch times, host work) cost another each.
A ``Prepared`` does that once; a materializing one keeps them as temp tables and shares derived
results (the GPU pass, the profiled threads' busy pieces, the step table) through ``cache``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from hyperscope.analysis._common import (
    BIT_SQL,
    DEVICE_WORK_KINDS,
    HOST_WORK_KINDS,
    Scope,
    Source,
    check_ranks,
    connection,
    device_ops_sql,
    in_list,
    rank_windows,
    scope_notes,
    scoped_events_sql,
)


class Prepared:
    """A connection with a scope resolved once: windows, notes, and the scoped relations every
    analysis reads (device ops with their launch times, host work), optionally materialized.

    Analyses accept one in place of a source, so a dashboard resolves the scope and reads the
    Parquet files once for all its tables instead of once per table. ``cache`` keeps results that
    several tables share (the GPU sweep); it lives and dies with this object.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, scope: Scope, *, materialize: bool = False) -> None:
        check_ranks(con, scope)
        self.con = con
        self.scope = scope
        self.windows = rank_windows(con, scope)
        self.notes = tuple(scope_notes(self.windows, scope, con))
        self.explicit = scope.steps is not None or scope.start_ns is not None or scope.end_ns is not None
        self.cache: dict[str, Any] = {}
        self._tables: list[str] = []
        dev = device_ops_sql(self.windows)
        host = scoped_events_sql(self.windows, f"e.kind IN {in_list(HOST_WORK_KINDS)}", "e.rank, e.tid")
        launches = scoped_events_sql(
            self.windows,
            "e.kind IN ('runtime', 'driver') AND e.correlation IS NOT NULL",
            "e.rank, e.correlation, e.ts_ns AS launch_ts",
        )
        # Each device op carries the start of the runtime/driver call that launched it (the first,
        # should a correlation id repeat): latency, outliers and idle causes need no join of their own.
        first_launch = (
            f"(SELECT rank, correlation, min(launch_ts) AS launch_ts FROM ({launches}) GROUP BY ALL)"
        )
        columns = (
            f"d.rank, d.device, d.kind, {BIT_SQL} AS bit, d.correlation, d.ts_ns, d.s, d.t_end, l.launch_ts"
        )
        joined = (
            f"SELECT {columns} FROM ({dev}) d LEFT JOIN {first_launch} l "
            "ON d.rank = l.rank AND d.correlation = l.correlation"
        )
        self.devn = f"({joined})"
        self.host = f"(SELECT rank, coalesce(tid, -1) AS tid, s, t_end FROM ({host}))"
        self.materialized = materialize
        if materialize:
            # Numbers only: at 100M events this spills to disk.
            self.devn = self._materialize("devn", joined)

    def _materialize(self, name: str, sql: str) -> str:
        table = f"_hs_{name}_{id(self):x}"
        self.con.execute(f"CREATE TEMP TABLE {table} AS {sql}")
        self._tables.append(table)
        return table

    def shared(self, name: str, sql: str) -> str:
        """A relation several analyses read: a temp table when materializing, else inline SQL."""
        if name not in self.cache:
            self.cache[name] = self._materialize(name, sql) if self.materialized else f"({sql})"
        return str(self.cache[name])

    def dev(self, kinds: Sequence[str] = DEVICE_WORK_KINDS) -> str:
        """Scoped device ops of ``kinds`` with every column (names, bytes), read from the store."""
        return f"({device_ops_sql(self.windows, kinds)})"

    def close(self) -> None:
        for table in self._tables:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
        self._tables.clear()


@contextmanager
def prepared(source: Source | Prepared, scope: Scope) -> Iterator[Prepared]:
    """The caller's Prepared as it is (its scope wins), else a fresh one on ``source``."""
    if isinstance(source, Prepared):
        yield source
        return
    with connection(source) as con:
        ctx = Prepared(con, scope)
        try:
            yield ctx
        finally:
            ctx.close()
