"""``hyperscope report JOB``: every dashboard number for a job, as rich tables or JSON.

Parse, call :func:`hyperscope.analysis.dashboard`, print. Kept out of main.py so the analysis
commands grow here without touching the store commands.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table as RichTable
from rich.text import Text

from hyperscope.analysis import (
    Scope,
    Table,
    annotation_histogram,
    annotation_stats,
    dashboard,
    hta,
    parse_steps,
    to_json,
)
from hyperscope.cli._options import HomeOption, err, out
from hyperscope.errors import HyperscopeError, UsageError
from hyperscope.store.store import Store

#: Sections printed in a terminal, in order; JSON carries every table of the dashboard.
_SHOWN = (
    "gpu_time",
    "gpu_time_job",
    "kernel_types",
    "idle",
    "steps",
    "ranks",
    "kernels",
    "precision",
    "gpu_activity",
    "memory_ops",
    "launch_latency",
    "annotations",
    "cpu_time",
)
_MS_SUFFIXES = ("_ns",)
#: what the "group" column holds in each table printed (a rank, a node, or the whole job: a job
#: table's column of "job" is left out)
_GROUPS = {
    "gpu_time": "rank",
    "idle": "rank",
    "steps": "rank",
    "launch_latency": "rank",
    "cpu_time": "rank",
    "gpu_time_job": None,
    "kernel_types": None,
    "steps_job": None,
}


def _fail(message: str, code: int) -> NoReturn:
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


def report(
    job: Annotated[str, typer.Argument(help="Job name or id.", metavar="JOB")],
    rank: Annotated[
        list[int] | None,
        typer.Option(
            "--rank", "-r", help="Only this rank (repeat for several).", show_default=False, metavar="R"
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(help="Only steps A to B of ProfilerStep#N, inclusive (e.g. 3:7, or 5).", metavar="A:B"),
    ] = None,
    top: Annotated[int, typer.Option(help="Kernels and annotations to list.", metavar="N")] = 15,
    annotation: Annotated[
        str | None,
        typer.Option(help="Also the duration statistics and histogram of this annotation.", metavar="NAME"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts (every table).")] = False,
    hta_mode: Annotated[
        bool,
        typer.Option("--hta", help="Also compute HTA 0.5.0's temporal/kernel breakdown and overlap."),
    ] = False,
    home: HomeOption = None,
) -> None:
    """Print the dashboard of a job's newest profile: GPU busy/idle, compute vs communication,
    idle causes, step times, stragglers, top kernels, precision, memory copies, launch latency,
    annotations and CPU time. Times in ms."""
    try:
        first_last = parse_steps(steps) if steps is not None else None
        if top < 1:
            raise UsageError(f"--top {top}: expected a positive number")
        scope = Scope(ranks=tuple(rank) if rank else None, steps=first_last)
    except UsageError as exc:
        _fail(str(exc), 2)
    try:
        with Store(home) as store:
            profile = store.profile(job)
            tables: dict[str, Table[Any]] = dashboard(profile, scope, top_k=top)
            if annotation is not None:
                tables["annotation"] = annotation_stats(profile, scope, name=annotation)
                tables["annotation_histogram"] = annotation_histogram(profile, annotation, scope)
            if hta_mode:
                if scope != Scope():
                    raise UsageError("--hta covers the whole profile as HTA does; drop --rank and --steps")
                tables.update(hta.breakdowns(profile))
    except HyperscopeError as exc:
        _fail(str(exc), 2 if isinstance(exc, UsageError) else 1)
    if as_json:
        payload = {"job": job, "ranks": list(rank or []), "steps": list(first_last) if first_last else None}
        out.print_json(json.dumps({**payload, "tables": to_json(tables)}))
        return
    # HTA's kernel table (top kernels per rank and type) goes to JSON only: long, and ours is above
    names = [*_SHOWN, *(k for k in tables if k.startswith("annotation_") or k == "annotation")]
    names += [k for k in tables if k.startswith("hta_") and k != "hta_kernels"]
    said: set[str] = set()  # a note shared by two tables (the per-rank and the job one): once
    for name in names:
        _print_table(tables[name], said, _GROUPS.get(name, "group"))


def _print_table(table: Table[Any], said: set[str] | None = None, group: str | None = "group") -> None:
    """One table and its notes; a note in ``said`` (printed under an earlier table) is not repeated."""
    said = set() if said is None else said
    columns = [c for c in table.columns if c != "group" or group is not None]
    header = {c: (group if c == "group" and group else _header(c)) for c in columns}
    shown = RichTable(*(header[c] for c in columns), title=table.title, title_justify="left")
    for row in table.to_dict()["rows"]:
        shown.add_row(*(_cell(c, row[c]) for c in columns))
    if table.rows:
        out.print(shown)
    else:
        out.print(Text(f"{table.title}: nothing in scope", style="bold"))
    for note in table.notes:
        if note not in said:
            out.print(Text(f"  note: {note}", style="dim"))
            said.add(note)


def _header(column: str) -> str:
    if column.endswith(_MS_SUFFIXES):
        return column[: -len("_ns")] + " (ms)"
    return column


def _cell(column: str, value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if column.endswith(_MS_SUFFIXES) and isinstance(value, int | float) and not column.endswith("ts_ns"):
        return f"{value / 1e6:,.3f}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."
