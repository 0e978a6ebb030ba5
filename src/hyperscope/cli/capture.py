"""``hyperscope capture JOB``: profile a running job now. Parse, call ``capture.remote``, print."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from hyperscope.cli._options import HomeOption, err, out
from hyperscope.errors import HyperscopeError

if TYPE_CHECKING:
    from hyperscope.capture.remote import RunningJob


def capture_command(
    job: Annotated[
        str | None,
        typer.Argument(
            help="The running job: its catalog name (hyperscope profile/submit), Slurm job id, "
            "run id or script name.",
            metavar="JOB",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Record this many steps.", metavar="N", show_default=False)
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Record about this many seconds (turned into steps at the slowest rank's pace, so "
            "every rank stops on the same step).",
            metavar="S",
            show_default=False,
        ),
    ] = None,
    ranks: Annotated[
        str | None,
        typer.Option(help="Only these ranks, such as 0,3 or 0-3 (default: all).", show_default=False),
    ] = None,
    cpu_ops: Annotated[
        bool, typer.Option("--cpu-ops", help="Also record every PyTorch operator on the CPU.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds to wait for the ranks to answer and to start.")
    ] = 15.0,
    wait: Annotated[
        bool, typer.Option(help="Wait until the capture ends (--no-wait: until it has started).")
    ] = True,
    list_running: Annotated[
        bool, typer.Option("--list", help="List the running jobs a capture can reach, and exit.")
    ] = False,
    home: HomeOption = None,
) -> None:
    """Profile the next N steps of a running job, on every rank, with no restart.

    Every rank starts on the same step and stops after N steps (or about S seconds); the result is
    a new profile of that job in the store, in the UI while it is written. The job needs nothing
    but a call to hyperscope.step() per training step (or to run under `hyperscope profile`); the
    request travels through a file in a directory all ranks see (the cluster's shared directory,
    or the store), so no port is opened on a compute node.

    Examples:

      hyperscope capture --list

      hyperscope capture 42 --steps 20              (Slurm job 42, all ranks)

      hyperscope capture train-20261201 --duration 30 --ranks 0,3 --cpu-ops
    """
    from hyperscope.capture import remote
    from hyperscope.capture.request import parse_ranks
    from hyperscope.store.store import default_home

    root = home.expanduser() if home is not None else default_home()
    try:
        if list_running:
            _print_running(remote.running(remote.controls(root)))
            return
        if job is None:
            raise HyperscopeError("name the job to capture (hyperscope capture --list shows them)")
        result = remote.capture_running(
            job, root, steps=steps, duration_s=duration,
            ranks=None if ranks is None else parse_ranks(ranks), cpu_ops=cpu_ops,
            timeout_s=timeout, wait=wait, progress=lambda line: err.print(line, markup=False),
        )  # fmt: skip
    except HyperscopeError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    for note in result.notes:
        err.print(f"note: {note}", markup=False)
    verb = "recorded" if result.finished else "recording"
    if result.lockstep:
        what = f"steps {result.start_step}-{result.end_step} of rank(s) {','.join(map(str, result.ranks))}"
    else:  # ranks that do not step together: each from its own step, at about the same time
        what = f"{result.steps} steps of " + ", ".join(
            f"rank {r} (from step {s})" for r, s in sorted(result.starts.items())
        )
    out.print(f"{verb} {what}: profile {result.profile_id} of job {result.job!r}", markup=False)
    shown = _quote(result.store)
    out.print(f"  store: {shown}   open it with: hyperscope ui --home {shown}", markup=False)


def _print_running(jobs: list[RunningJob]) -> None:
    table = Table("run", "names", "ranks", "step", "where")
    for r in jobs:
        table.add_row(r.key, ", ".join(r.names), f"{len(r.ranks)}/{r.world_size}", str(r.furthest_step),
                      str(r.control.dir))  # fmt: skip
    if not jobs:
        out.print("no running job calls hyperscope.step() where this machine can see it", markup=False)
        return
    out.print(table)


def _quote(path: Path) -> str:
    text = str(path)
    return f"'{text}'" if " " in text else text
