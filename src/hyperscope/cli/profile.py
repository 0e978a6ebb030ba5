"""``hyperscope profile``: run a training command under the profiler (parse, call, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hyperscope.capture.config import ProfilerConfig, parse_steps
from hyperscope.capture.launcher import precompute, run
from hyperscope.cli._options import HomeOption, err
from hyperscope.errors import HyperscopeError, UsageError
from hyperscope.store.store import default_home


def profile(
    command: Annotated[
        list[str],
        typer.Argument(
            help="The training command, after --: python train.py ..., or torchrun ... train.py.",
            show_default=False,
            metavar="COMMAND",
        ),
    ],
    job: Annotated[
        str | None,
        typer.Option("--job", "-j", help="Job name (default: script name and time).", metavar="NAME"),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            help="Record only these steps: START:STOP (10:40 records 10 to 39) or a list (3,5,8). "
            "Steps are counted from 0 by hyperscope.step(), else by the optimizer's step().",
            metavar="STEPS",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help="Stop recording after this many seconds.", metavar="SECONDS", show_default=False),
    ] = None,
    cpu_ops: Annotated[bool, typer.Option("--cpu-ops", help="Record every PyTorch operator.")] = False,
    python_stacks: Annotated[
        bool, typer.Option("--python-stacks", help="Record Python call stacks (slow; implies --cpu-ops).")
    ] = False,
    memory: Annotated[
        bool, typer.Option("--memory", help="Record tensor allocations (implies --cpu-ops).")
    ] = False,
    record_shapes: Annotated[
        bool, typer.Option("--record-shapes", help="Record operator input shapes (implies --cpu-ops).")
    ] = False,
    device: Annotated[
        bool, typer.Option("--device/--no-device", help="Record GPU kernels, copies and their launches.")
    ] = True,
    sample_interval: Annotated[
        float,
        typer.Option(help="Seconds between CPU/GPU/memory samples; 0 turns them off.", metavar="SECONDS"),
    ] = 0.5,
    perf_counters: Annotated[
        bool, typer.Option("--perf-counters/--no-perf-counters", help="Sample CPU performance counters.")
    ] = True,
    flush_steps: Annotated[
        int, typer.Option(help="Write a file every N recorded steps (bounds memory).", metavar="N")
    ] = 10,
    flush_min_gap: Annotated[
        float, typer.Option(help="...but at most one file per this many seconds.", metavar="SECONDS")
    ] = 5.0,
    home: HomeOption = None,
) -> None:
    """Profile a training command, unmodified, on every rank it starts.

    Examples:

      hyperscope profile --job resnet -- python train.py --epochs 1

      hyperscope profile --steps 10:40 --cpu-ops -- torchrun --nproc-per-node 2 train.py

    The job appears in `hyperscope jobs` as soon as the first rank starts (InProgress), then
    Completed, or Failed when the command fails; hyperscope exits with the command's exit code.
    """
    from hyperscope.cli._options import fail as _fail

    try:
        config = ProfilerConfig(
            job=job,
            steps=_steps(steps),
            duration_s=duration,
            cpu_ops=cpu_ops,
            python_stacks=python_stacks,
            memory=memory,
            record_shapes=record_shapes,
            device=device,
            sample_interval_s=sample_interval,
            perf_counters=perf_counters,
            flush_every_steps=flush_steps,
            flush_min_gap_s=flush_min_gap,
            home=home,
        )
        result = run(command, config)
    except HyperscopeError as exc:
        _fail(str(exc).replace("ProfilerConfig.", "option "), 2 if isinstance(exc, UsageError) else 1)
    # A command killed by a signal exits as a shell reports it: 128 + the signal's number. Whatever
    # happened to profiling, that is the exit code: a batch script sees the training's outcome.
    code = 128 - result.returncode if result.returncode < 0 else result.returncode
    if result.job is None or result.problem:
        err.print(f"hyperscope: no profile was recorded: {result.problem}")
        raise typer.Exit(code)
    j = result.job
    ref = next((p for p in j.profiles if p.id == result.profile_id), None)
    events = ref.events if ref else 0
    err.print(
        f"hyperscope: job {j.name} is {j.status.value}: {events:,} events from {ref.ranks if ref else 0} "
        f"rank(s). Next: hyperscope show {j.name}"
    )
    if j.message:
        err.print(f"hyperscope: {j.message}")
    # Asked to stop (Slurm's time limit sends SIGKILL soon after SIGTERM): exit now; the UI
    # computes at its first look what would have been precomputed.
    if ref is not None and ref.events and result.asked_to_stop is None:
        # without --home: the store the launcher used ($HYPERSCOPE_HOME, else ~/.hyperscope), not ./None
        problem = precompute(
            Path(config.home).expanduser() if config.home else default_home(), j.name, ref.id
        )
        if problem:
            err.print(f"hyperscope: {problem}")
    if code:
        raise typer.Exit(code)


def precompute_for_ui(home: Path | str | None, job: str, profile_id: str) -> None:
    """The whole-profile dashboard and the timeline index, computed now and kept for the UI's first
    look (each one that took half a second or more is reported)."""
    from hyperscope.analysis.stored import precompute_job
    from hyperscope.store.store import default_home

    def report(what: str, took: float) -> None:
        if took >= 0.5:
            err.print(f"hyperscope: {what} in {took:.1f} s (kept beside the profile for the UI)")

    precompute_job(Path(home).expanduser() if home else default_home(), job, profile_id, report)


def _steps(text: str | None) -> range | list[int] | None:
    if text is None:
        return None
    try:
        return parse_steps(text)
    except ValueError as exc:
        raise UsageError(f"--steps {text!r}: expected {exc}") from None
