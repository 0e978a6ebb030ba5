"""``hyperscope restart-in-place -- srun ...``: the in-job supervisor of a batch script. Parse, call
:mod:`hyperscope.recovery.inplace`, exit with the step's status."""

from __future__ import annotations

from typing import Annotated

import typer


def restart_in_place_command(
    command: Annotated[
        list[str],
        typer.Argument(help="The job step to run, after --: usually an srun line.", metavar="-- COMMAND"),
    ],
    max_restarts: Annotated[int, typer.Option(min=0, help="Restarts in place before giving up.")] = 3,
    hang_timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds every rank may be silent (heartbeats) before a hang.")
    ] = 300.0,
) -> None:
    """Run a job step and, when it fails or hangs, start it again inside the same allocation (its
    ranks reload their checkpoint) instead of a Slurm requeue; a lost node still ends the job for
    Slurm to requeue. Use `srun --kill-on-bad-exit=1` so one crashed rank ends the step at once,
    and the warm launcher on each task so a crashed rank is forked again without importing
    PyTorch again (docs/resilience.md, "Restart in place").

    \b
    Example (in an sbatch script):
      hyperscope restart-in-place --max-restarts 3 -- srun --kill-on-bad-exit=1 \\
          python -m hyperscope.recovery.warm --max-restarts 3 -- train.py --epochs 10
    """
    from hyperscope.recovery import inplace

    raise typer.Exit(inplace.main(command, max_restarts, hang_timeout))
