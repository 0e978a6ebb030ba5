"""``hyperscope diff A B``: what changed between two runs (or two ranks, or two step ranges).

Parse, call :func:`hyperscope.analysis.compare`, print: the one-line summary first, then the
tables. ``A``/``B`` are ``JOB`` (its newest profile) or ``JOB@PROFILE``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from hyperscope.analysis import Scope, Table, compare, parse_steps
from hyperscope.cli._options import HomeOption, out
from hyperscope.cli.report import _fail, _print_table
from hyperscope.errors import HyperscopeError, UsageError
from hyperscope.store.store import Store

#: Rows of the long tables shown in a terminal (JSON carries all of them).
_TERMINAL_ROWS = 15
_KERNEL_COLUMNS = (
    "name",
    "match",
    "launches_a",
    "launches_b",
    "mean_a_ns",
    "mean_b_ns",
    "delta_total_ns",
    "delta_per_step_ns",
    "share_pct",
)


def split_ref(text: str) -> tuple[str, str | None]:
    """``JOB`` or ``JOB@PROFILE`` → (job, profile id or None)."""
    job, sep, profile = text.rpartition("@") if "@" in text else (text, "", "")
    if sep and (not job or not profile):
        raise UsageError(f"{text!r}: expected JOB or JOB@PROFILE")
    return (job, profile) if sep else (text, None)


def diff(
    a: Annotated[str, typer.Argument(help="Baseline: JOB or JOB@PROFILE.", metavar="A")],
    b: Annotated[
        str | None, typer.Argument(help="Compared run: JOB or JOB@PROFILE (default: A again).", metavar="B")
    ] = None,
    rank: Annotated[
        list[int] | None,
        typer.Option(
            "--rank",
            "-r",
            help="Only this rank (repeat for several); B too unless --against-rank.",
            show_default=False,
            metavar="R",
        ),
    ] = None,
    against_rank: Annotated[
        list[int] | None,
        typer.Option(
            help="B's rank(s), e.g. the straggler against --rank of the median.",
            show_default=False,
            metavar="R2",
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(help="Only steps X to Y (inclusive); B too unless --against-steps.", metavar="X:Y"),
    ] = None,
    against_steps: Annotated[str | None, typer.Option(help="B's step range.", metavar="X:Y")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts (every row).")] = False,
    home: HomeOption = None,
) -> None:
    """Compare B against A: step time (median change, and whether it is beyond noise by a
    bootstrap interval), GPU time, kernels matched by name (and by name without template
    arguments or tile sizes) sorted by how much of the step-time change each explains, CPU
    operators, peak memory, and communication per collective. Times in ms (GPU time in µs);
    per-step figures are per rank's step."""
    try:
        ref_a, ref_b = split_ref(a), split_ref(b if b is not None else a)
        steps_a = parse_steps(steps) if steps is not None else None
        steps_b = parse_steps(against_steps) if against_steps is not None else steps_a
        ranks_a = tuple(rank) if rank else None
        ranks_b = tuple(against_rank) if against_rank else ranks_a
        scope_a, scope_b = Scope(ranks=ranks_a, steps=steps_a), Scope(ranks=ranks_b, steps=steps_b)
    except UsageError as exc:
        _fail(str(exc), 2)
    labels = (_label(a, ranks_a, steps_a), _label(b or a, ranks_b, steps_b))
    try:
        with Store(home) as store:
            pa, pb = store.profile(*ref_a), store.profile(*ref_b)
            result = compare((pa, scope_a), (pb, scope_b), labels=labels)
    except HyperscopeError as exc:
        _fail(str(exc), 2 if isinstance(exc, UsageError) else 1)
    if as_json:
        out.print_json(json.dumps(result.to_dict()))
        return
    out.print(Text(result.summary.line, style="bold"))
    out.print(Text(f"A = {labels[0]}, B = {labels[1]}; {result.summary.test}", style="dim"))
    for note in result.tables["summary"].notes:
        out.print(Text(f"  note: {note}", style="dim"))
    for name in ("steps", "gpu_time", "kernels", "operators", "memory", "collectives"):
        _print_table(_shown(name, result.tables[name]))


def _label(ref: str, ranks: tuple[int, ...] | None, steps: tuple[int, int] | None) -> str:
    text = ref
    if ranks:
        text += " rank " + ",".join(map(str, ranks))
    if steps:
        text += f" steps {steps[0]}:{steps[1]}"
    return text


_METRIC_COLUMNS = ("metric", "unit", "a", "b", "delta", "a_per_step", "b_per_step", "delta_per_step")
_SCALE = {"ns": ("µs", 1e-3), "bytes": ("MB", 1e-6), "%": ("%", 1.0)}


def _shown(name: str, table: Table[Any]) -> Table[Any]:
    """The terminal's cut of a table: the first rows, kernel tables without the name lists,
    metric tables in µs and MB."""
    from dataclasses import make_dataclass

    if name in ("gpu_time", "memory"):
        metric_type = make_dataclass("Metric", list(_METRIC_COLUMNS), frozen=True)

        def scaled(r: Any) -> Any:
            unit, factor = _SCALE.get(r.unit, (r.unit, 1.0))
            values = [None if getattr(r, c) is None else getattr(r, c) * factor for c in _METRIC_COLUMNS[2:]]
            return metric_type(r.metric, unit, *values)

        return Table(table.title, metric_type, tuple(scaled(r) for r in table.rows), table.notes)
    if name not in ("kernels", "operators"):
        return table

    row_type = make_dataclass("Shown", list(_KERNEL_COLUMNS), frozen=True)
    rows = tuple(
        row_type(_short(r.name), *(getattr(r, c) for c in _KERNEL_COLUMNS[1:]))
        for r in table.rows[:_TERMINAL_ROWS]
    )
    notes = table.notes
    if len(table.rows) > _TERMINAL_ROWS:
        notes = (*notes, f"{len(table.rows) - _TERMINAL_ROWS} more rows in --json")
    return Table(table.title, row_type, rows, notes)


def _short(name: str, width: int = 48) -> str:
    """A kernel name a terminal column can hold: the start, which says what it is (JSON has all)."""
    return name if len(name) <= width else name[: width - 1] + "…"
