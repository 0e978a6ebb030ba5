"""What every analysis shares: where the events come from, which part of them to look at, and the
shape of an answer.

Analyses are pure functions ``(source, Scope, parameters) → Table``. A source is a stored
:class:`~hyperscope.store.profile.Profile` or a DuckDB connection that already has the views
``events`` and ``samples`` (what ``Profile.connect()`` gives), so a server can keep one connection
open and the tests can hand in their own. The scope becomes inline SQL, so two analyses on one
connection never see each other's state; only a materializing ``Prepared`` (what ``dashboard()``
uses, on a connection of its own) creates temp tables, and drops them when done.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, is_dataclass
from enum import StrEnum
from typing import Any, Final, Generic, TypeVar

import duckdb
import psutil

from hyperscope.errors import UsageError
from hyperscope.store.profile import Profile

Source = Profile | duckdb.DuckDBPyConnection

#: DuckDB's memory on connections the analyses open themselves; beyond it, sorts spill to disk.
#: Profiles above LARGE_PROFILE_EVENTS get up to LARGE_MEMORY_BYTES (at most half of what is free):
#: at 100M events, spilling the sorts to disk under 1 GB took 123 s against 87 s with 8 GB.
MEMORY_LIMIT: Final = "1GB"
LARGE_PROFILE_EVENTS: Final = 20_000_000
LARGE_MEMORY_BYTES: Final = 8 << 30


def memory_limit_bytes(events: int) -> int:
    """DuckDB's memory limit for a profile of ``events``, in bytes (DuckDB's MB and GB are powers
    of 1000: ``MEMORY_LIMIT`` is 10⁹ bytes)."""
    if events <= LARGE_PROFILE_EVENTS:
        return 10**9
    free = psutil.virtual_memory().available
    return (max(1 << 30, min(LARGE_MEMORY_BYTES, free // 2)) >> 20) * 10**6


def memory_limit(events: int) -> str:
    """``memory_limit_bytes`` as DuckDB's setting reads it."""
    if events <= LARGE_PROFILE_EVENTS:
        return MEMORY_LIMIT
    return f"{memory_limit_bytes(events) // 10**6}MB"


#: Device-side work, as the schema's kinds name it. ``sync`` is not work: a GPU waiting on an event
#: is idle, which is where our definition of "busy" departs from HTA's (see docs/analysis.md).
DEVICE_WORK_KINDS: Final = ("kernel", "memcpy", "memset")
#: Host-side events that are the CPU doing something (not markers such as annotations or steps).
HOST_WORK_KINDS: Final = ("cpu_op", "python", "runtime", "driver")

#: The step number of a ``ProfilerStep#N`` name (RE2, as DuckDB reads it).
STEP_NAME_SQL: Final = r"ProfilerStep\s*#\s*(\d+)"


class Level(StrEnum):
    """How far per-rank figures are rolled up: device-time sums over the ranks of a node or the job."""

    RANK = "rank"
    NODE = "node"
    JOB = "job"

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls(text)
        except ValueError:
            raise UsageError(f"level {text!r}: expected one of rank, node, job") from None

    def key_sql(self, rank: str = "rank", node: str = "node") -> str:
        """The SQL expression (VARCHAR) that names a group at this level."""
        if self is Level.RANK:
            return f"CAST({rank} AS VARCHAR)"
        if self is Level.NODE:
            return f"coalesce(nullif({node}, ''), '?')"
        return "'job'"


@dataclass(frozen=True, slots=True)
class Scope:
    """Which ranks, nodes, time window and steps an analysis looks at; ``None`` means all.

    ``start_ns``/``end_ns`` are absolute (the store's clock). ``steps`` is an inclusive range of
    ``ProfilerStep#N`` numbers: each rank is cut to [start of its first step in range, end of its
    last one], so ranks whose clocks or pace differ are each compared over the same work.
    Intervals that cross a window's edge are clipped to it: time is counted where it falls.
    """

    ranks: tuple[int, ...] | None = None
    nodes: tuple[str, ...] | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    steps: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.start_ns is not None and self.end_ns is not None and self.end_ns <= self.start_ns:
            raise UsageError(f"time window: end_ns {self.end_ns} must be after start_ns {self.start_ns}")
        if self.steps is not None:
            first, last = self.steps
            if first < 0 or last < first:
                raise UsageError(f"steps {first}:{last}: expected A:B with 0 <= A <= B")
        if self.ranks is not None and any(r < 0 for r in self.ranks):
            raise UsageError(f"ranks {list(self.ranks)}: expected non-negative rank numbers")


ALL: Final = Scope()


def parse_steps(text: str) -> tuple[int, int]:
    """``"A:B"``, ``"A:"``-less forms: ``"5"`` (one step) or ``"3:7"`` (inclusive)."""
    match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
    if not match:
        raise UsageError(f"--steps {text!r}: expected A:B (inclusive step numbers, e.g. 3:7) or N")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise UsageError(f"--steps {text!r}: the last step {last} is before the first {first}")
    return first, last


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Table(Generic[R]):
    """One analysis' answer: typed rows plus notes that say what the numbers cannot show.

    ``notes`` carry the caveats a reader must see next to the numbers (no samples, a partial last
    step, a rank without GPU events), so they travel with the table into JSON and the terminal.
    """

    title: str
    row_type: type[R]
    rows: tuple[R, ...]
    notes: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        assert is_dataclass(self.row_type)
        return tuple(f.name for f in fields(self.row_type))

    def to_dict(self) -> dict[str, Any]:
        names = self.columns
        return {
            "title": self.title,
            "columns": list(names),
            "rows": [_row_dict(r, names) for r in self.rows],
            "notes": list(self.notes),
        }

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[R]:
        return iter(self.rows)


def _row_dict(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``asdict(row)`` without its deep copy where no field holds a container or a dataclass (the
    rows of every table today): ``asdict`` took 0.03 s of the 8-rank DLRM set's 0.16 s precompute."""
    out = {name: getattr(row, name) for name in names}
    if any(isinstance(v, _NESTED) or is_dataclass(v) for v in out.values()):
        return asdict(row)
    return out


_NESTED = (list, tuple, dict, set)


@contextmanager
def connection(source: Source) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one analysis: a profile's own (closed after), or the caller's (left open).

    On its own connections DuckDB gets ``memory_limit(events)`` and a private spill directory: a
    dashboard over 100M events sorts within a bound, spilling to disk, instead of taking most of the
    machine's memory (DuckDB's default is 80% of RAM; it took 11 GB). A caller's connection keeps
    the caller's settings.
    """
    if isinstance(source, Profile):
        con = source.connect()
        spill = tempfile.mkdtemp(prefix="hyperscope-analysis-")
        try:
            con.execute("SET enable_progress_bar = false")
            con.execute(f"SET memory_limit = '{memory_limit(source.meta.events)}'")
            con.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
            yield con
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)
    elif isinstance(source, duckdb.DuckDBPyConnection):
        source.execute("SET enable_progress_bar = false")
        yield source
    else:
        raise UsageError(f"source: expected a Profile or a DuckDB connection, got {type(source).__name__}")


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    return con.execute(sql, list(params)).fetchall()


@dataclass(frozen=True, slots=True)
class Window:
    rank: int
    node: str
    lo_ns: int
    hi_ns: int
    #: the rank's whole extent, nothing cut: every timed event lies inside, no clipping needed
    full: bool = False


def rank_windows(con: duckdb.DuckDBPyConnection, scope: Scope) -> list[Window]:
    """Each selected rank's [lo, hi) window in ns: its event span cut by the scope's time and steps.

    Ranks that hold no timed events at all are absent; a step range that a rank never reached
    leaves that rank out (and the caller says so), rather than widening to the whole trace.
    """
    found = rows(
        con,
        """SELECT rank, any_value(node), min(ts_ns), max(ts_ns + coalesce(dur_ns, 0))
           FROM events WHERE ph <> 'M' AND kind <> 'trace' AND ts_ns IS NOT NULL
           GROUP BY rank ORDER BY rank""",
    )
    steps: dict[int, tuple[int, int]] = {}
    if scope.steps is not None:
        first, last = scope.steps
        for rank, lo, hi in rows(
            con,
            f"""SELECT rank, min(ts_ns), max(ts_ns + dur_ns) FROM events
                WHERE kind = 'step' AND dur_ns IS NOT NULL
                  AND TRY_CAST(regexp_extract(name, '{STEP_NAME_SQL}', 1) AS BIGINT) BETWEEN ? AND ?
                GROUP BY rank""",
            [first, last],
        ):
            steps[int(rank)] = (int(lo), int(hi))
    out = []
    for rank, node, rank_lo, rank_hi in found:
        lo, hi = rank_lo, rank_hi
        if scope.ranks is not None and rank not in scope.ranks:
            continue
        if scope.nodes is not None and (node or "") not in scope.nodes:
            continue
        lo, hi = int(lo), int(hi)
        if scope.steps is not None:
            if rank not in steps:
                continue
            lo, hi = max(lo, steps[rank][0]), min(hi, steps[rank][1])
        if scope.start_ns is not None:
            lo = max(lo, scope.start_ns)
        if scope.end_ns is not None:
            hi = min(hi, scope.end_ns)
        if hi > lo:
            whole = (lo, hi) == (int(rank_lo), int(rank_hi))
            out.append(Window(int(rank), str(node or ""), lo, hi, whole))
    return out


def check_ranks(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """A rank or node the profile does not have is a usage error, not an empty answer."""
    if scope.ranks is None and scope.nodes is None:
        return
    have = rows(con, "SELECT DISTINCT rank, coalesce(node, '') FROM events ORDER BY 1")
    ranks = sorted({int(r) for r, _ in have})
    nodes = sorted({str(n) for _, n in have})
    for r in scope.ranks or ():
        if r not in ranks:
            known = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_span(ranks)}"
            raise UsageError(f"rank {r}: not in this profile (it has {known})")
    for n in scope.nodes or ():
        if n not in nodes:
            raise UsageError(f"node {n!r}: not in this profile (it has nodes {', '.join(nodes)})")


def _span(ranks: list[int]) -> str:
    if not ranks:
        return "none"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def windows_sql(windows: Sequence[Window]) -> str:
    """The windows as an inline relation ``w(rank, node, lo, hi)``; empty when there are none."""
    if not windows:
        return (
            "(SELECT NULL::INTEGER AS rank, NULL::VARCHAR AS node, NULL::BIGINT AS lo, "
            "NULL::BIGINT AS hi WHERE false)"
        )
    values = ", ".join(f"({w.rank}, {_sql_str(w.node)}, {w.lo_ns}, {w.hi_ns})" for w in windows)
    return f"(SELECT * FROM (VALUES {values}) AS v(rank, node, lo, hi))"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scoped_events_sql(windows: Sequence[Window], where: str, columns: str = "e.*") -> str:
    """Timed events of the windows' ranks that overlap their window, with ``s``/``t_end`` clipped to it.

    ``s`` and ``t_end`` are the clipped start and end; ``ts_ns``/``dur_ns`` stay as recorded so
    per-event statistics (a kernel's duration) are never cut short by a window edge.
    """
    if windows and all(w.full for w in windows):
        # The unscoped case, the dashboard's default: no join, no clipping (a no-op here).
        ranks = ", ".join(str(w.rank) for w in windows)
        return f"""SELECT {columns}, e.ts_ns AS s, e.ts_ns + e.dur_ns AS t_end FROM events e
                   WHERE e.dur_ns IS NOT NULL AND e.rank IN ({ranks}) AND ({where})"""
    return f"""SELECT {columns}, greatest(e.ts_ns, w.lo) AS s, least(e.ts_ns + e.dur_ns, w.hi) AS t_end
               FROM events e JOIN {windows_sql(windows)} w ON e.rank = w.rank
               WHERE e.dur_ns IS NOT NULL AND e.ts_ns < w.hi AND e.ts_ns + e.dur_ns > w.lo
                 AND ({where})"""


def in_list(values: Sequence[str]) -> str:
    return "(" + ", ".join(_sql_str(v) for v in values) + ")"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on an already sorted list."""
    if len(sorted_values) == 0:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


#: Our kernel types. Communication is a collective library's kernel (NCCL, RCCL); memory is a copy
#: or a set, by kind, not by name; everything else a kernel does is computation.
#: NCCL/RCCL kernels: names starting nccl or rccl in any case (kernels.COMM_PATTERN); a prefix
#: ILIKE, not a regex, costs a tenth as much per row (0.03 s against 0.2 s over 3M kernels)
COMM_KERNEL_SQL: Final = "(kind = 'kernel' AND (name ILIKE 'nccl%' OR name ILIKE 'rccl%'))"
TYPE_BITS: Final = {"computation": 1, "communication": 2, "memory": 4}
TYPE_SQL: Final = f"""CASE WHEN kind IN ('memcpy', 'memset') THEN 'memory'
    WHEN {COMM_KERNEL_SQL} THEN 'communication' ELSE 'computation' END"""
BIT_SQL: Final = f"""CASE WHEN kind IN ('memcpy', 'memset') THEN 4 WHEN {COMM_KERNEL_SQL} THEN 2 ELSE 1 END"""


def device_ops_sql(windows: Sequence[Window], kinds: Sequence[str] = DEVICE_WORK_KINDS) -> str:
    """Device operations of the scope: one row per kernel/copy/set with its GPU (``device``)."""
    return scoped_events_sql(
        windows,
        f"e.kind IN {in_list(kinds)}",
        "e.rank, e.node, coalesce(e.device, e.pid, -1) AS device, e.stream, e.kind, e.name, e.ts_ns, "
        "e.dur_ns, e.correlation, e.bytes, e.memcpy_kind",
    )


def scope_notes(windows: Sequence[Window], scope: Scope, con: duckdb.DuckDBPyConnection) -> list[str]:
    """What the reader must know about the scope: ranks left out because the step range missed them."""
    notes = []
    if scope.steps is not None:
        all_ranks = {int(r) for (r,) in rows(con, "SELECT DISTINCT rank FROM events")}
        wanted = all_ranks if scope.ranks is None else all_ranks & set(scope.ranks)
        missing = sorted(wanted - {w.rank for w in windows})
        if missing:
            notes.append(
                f"ranks {', '.join(map(str, missing))} have no ProfilerStep in "
                f"{scope.steps[0]}:{scope.steps[1]}"
            )
    return notes
