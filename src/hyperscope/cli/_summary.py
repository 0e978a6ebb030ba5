"""The summary every import, ``show`` and ``demo`` prints: one table of ranks, then the top kernels."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from hyperscope.cli._options import out
from hyperscope.store.summary import Summary


def print_summary(summary: Summary) -> None:
    table = Table("rank", "node", "events", "span (ms)", "kernels", "kernel time (ms)", "steps")
    for r in summary.ranks:
        table.add_row(
            str(r.rank),
            r.node or "-",
            f"{r.events:,}",
            f"{r.span_ns / 1e6:,.3f}",
            f"{r.kernels:,}",
            f"{r.kernel_ns / 1e6:,.3f}",
            str(r.steps),
        )
    out.print(table)
    out.print("events by kind: " + ", ".join(f"{k} {v:,}" for k, v in summary.kinds.items()))
    if summary.samples:
        out.print(
            "system samples (mean): "
            + ", ".join(f"{m} {mean(m, v)}" for m, (_, v) in summary.samples.items())
        )
    for note in summary.notes:
        out.print(Text(f"note: {note}", style="yellow"))
    if summary.top_kernels:
        kt = Table("top kernels by time", "launches", "total (ms)")
        for name, count, dur in summary.top_kernels:
            kt.add_row(name if len(name) < 90 else name[:87] + "...", f"{count:,}", f"{dur / 1e6:,.3f}")
        out.print(kt)


def mean(metric: str, value: float) -> str:
    if metric.endswith("_bytes"):
        return mb(int(value))
    return f"{value:,.1f}{'%' if metric.endswith('_pct') else ''}"


def mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} KB"
