"""``hyperscope demo``: a newcomer's first look, on embedded defaults.

It profiles the example for real where PyTorch is installed (else imports a generated sample) and
serves the UI on it. A machine without a GPU records no kernel, so the demo also imports the real
GPU recording that ships with hyperscope as a second job and opens the UI on that one: every chart
and a full timeline, before the user owns a GPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from hyperscope._samples import H200_JOB, H200_TRACE
from hyperscope.cli._options import HomeOption, err, fail, open_store, out
from hyperscope.cli._summary import mb, print_summary
from hyperscope.cli.profile import precompute_for_ui
from hyperscope.cli.ui import ui as ui_command
from hyperscope.errors import HyperscopeError
from hyperscope.store.store import ImportReport, Store
from hyperscope.store.summary import summarize

#: the example `hyperscope demo` profiles; present in a clone of the repository, not in a wheel
_DEMO_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_transformer.py"


def demo(
    ranks: Annotated[int, typer.Option(min=1, max=64, help="Ranks of the generated sample.")] = 4,
    steps: Annotated[
        int, typer.Option(min=1, max=1000, help="Training steps (of the example, or per sample rank).")
    ] = 6,
    job: Annotated[str, typer.Option(help="Job name (made unique: demo, demo-2, ...).")] = "demo",
    synthetic: Annotated[
        bool,
        typer.Option(
            "--synthetic",
            help="Import a generated multi-rank sample instead of profiling the example "
            "(what happens anyway where PyTorch is not installed).",
        ),
    ] = False,
    gpu_sample: Annotated[
        bool,
        typer.Option(
            "--gpu-sample/--no-gpu-sample",
            help="Where the run recorded no GPU kernel (no GPU here), also import the real H200 "
            f"recording that ships with hyperscope as job {H200_JOB!r} and open the UI on it.",
        ),
    ] = True,
    serve_ui: Annotated[
        bool, typer.Option("--serve/--no-serve", help="Serve the web UI on the store afterwards.")
    ] = True,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the UI; 0 picks a free one.")] = 8321,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser.")] = False,
    home: HomeOption = None,
) -> None:
    """Profile a small transformer for real (PyTorch installed), else import a generated sample
    multi-rank trace; print its summary, then serve the web UI on it (stop with Ctrl+C). Without a
    GPU, a real GPU recording is imported beside it, and the UI opens on that."""
    with open_store(home) as store:
        name, home_dir = _unique(store, job), store.home
    example = None if synthetic else _example()
    profiled = None
    if example is not None:
        out.print(f"profiling {example.name} ({steps} steps, tiny sizes) as job [bold]{name}[/] ...")
        profiled, problem = _profile(example, name, home_dir, steps)
        if problem:
            err.print(Text(f"the example could not be profiled ({problem}); using a generated sample"))
    if profiled is None:
        if example is not None:  # the failed run may have left its job: the sample gets its own
            with open_store(home_dir) as store:
                name = _unique(store, job)
        try:
            report = _sample(home_dir, name, ranks, steps)
        except HyperscopeError as exc:
            fail(str(exc))
        out.print(
            f"imported as job [bold]{report.job.name}[/]: {report.profile.events:,} events, "
            f"{mb(report.source_bytes)} of JSON → {mb(report.profile.bytes)} in {home_dir}"
        )
    else:
        out.print(f"profiled as job [bold]{name}[/]: {profiled:,} events in {home_dir}")
    with open_store(home_dir) as store:
        profile = store.profile(name)
        summary = summarize(profile)
    print_summary(summary)
    precompute_for_ui(home_dir, name, profile.meta.profile_id)
    shown = profile.meta.profile_id
    # a generated sample has GPU rows of its own, but they are made up: only a real run that
    # recorded kernels makes the real recording unnecessary
    if gpu_sample and (profiled is None or not any(r.kernels for r in summary.ranks)):
        shown = _gpu_sample(home_dir)
    out.print(
        f"\nnext: `hyperscope report {name}`, `hyperscope jobs`, "
        f"`hyperscope export {name} --chrome {name}.json.gz`, `hyperscope ui`"
    )
    if not serve_ui:
        return
    ui_command(port=port, no_browser=no_browser, home=home_dir, open_path=f"#/dashboard/{shown}")


def _gpu_sample(home: Path) -> str:
    """Import the shipped H200 recording as its own job; its profile id (the page the UI opens).
    A store that has it from an earlier demo keeps that one: a recording does not change."""
    with open_store(home) as store:
        kept = next((j for j in store.jobs() if j.name == H200_JOB and j.profiles), None)
        if kept is not None:
            out.print(f"the real GPU recording is job [bold]{H200_JOB}[/] already; the UI opens on it")
            return store.profile(H200_JOB).meta.profile_id
        name = H200_JOB
        try:
            report = store.import_traces([H200_TRACE], name)
        except HyperscopeError as exc:
            fail(f"the GPU sample {H200_TRACE} could not be imported: {exc}")
    precompute_for_ui(home, name, report.profile.id)
    out.print(
        f"no GPU kernel was recorded here, so a real GPU recording (an NVIDIA H200, PyTorch 2.11, "
        f"bf16 transformer) was imported as job [bold]{name}[/]: {report.profile.events:,} events; "
        "the UI opens on it"
    )
    return report.profile.id


def _unique(store: Store, job: str) -> str:
    """``job``, else ``job-2``, ``job-3``, ...: a demo never adds to an earlier job."""
    existing = {j.name for j in store.jobs()}
    name, n = job, 1
    while name in existing:
        n += 1
        name = f"{job}-{n}"
    return name


def _example() -> Path | None:
    """The example script when it and PyTorch are both here; finding torch does not import it."""
    import importlib.util

    if not _DEMO_EXAMPLE.is_file() or importlib.util.find_spec("torch") is None:
        return None
    return _DEMO_EXAMPLE


def _profile(example: Path, job: str, home: Path, steps: int) -> tuple[int | None, str]:
    """Run the example under the launcher, as `hyperscope profile` would: (events, problem)."""
    from hyperscope.capture.config import ProfilerConfig
    from hyperscope.capture.launcher import run

    command = [sys.executable, str(example), "--tiny", "--steps", str(steps), "--no-profile", "--cpu-ops"]
    # every operator recorded: on a CPU-only machine they are the timeline; tiny sizes keep it short
    config = ProfilerConfig(job=job, home=home, cpu_ops=True, sample_interval_s=0.1, flush_min_gap_s=0.2)
    try:
        result = run(command, config)
    except HyperscopeError as exc:
        return None, str(exc)
    if result.returncode != 0 or result.job is None or result.problem:
        return None, result.problem or f"the example exited with code {result.returncode}"
    ref = next((p for p in result.job.profiles if p.id == result.profile_id), None)
    return (ref.events if ref else 0), ""


def _sample(home: Path, job: str, ranks: int, steps: int) -> ImportReport:
    """A generated multi-rank trace (NCCL, copies, steps), imported like a user's traces."""
    from hyperscope.store.synth import SynthSpec, write_job

    with Store(home) as store, tempfile.TemporaryDirectory(prefix="hyperscope-demo-") as tmp:
        paths = write_job(Path(tmp), SynthSpec(ranks=ranks, steps=steps))
        out.print(f"generated a sample {ranks}-rank trace of {steps} steps in {tmp}")
        return store.import_traces(paths, job)
